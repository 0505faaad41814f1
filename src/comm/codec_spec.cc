#include "comm/codec_spec.h"

#include <zstd.h>  // ZSTD_COMPRESSBOUND only (a macro): this file links no codec library

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/block_quant.h"
#include "core/error.h"

namespace weft {

namespace {

constexpr const char* kNames = "off, bf16, fp16, int8, int4, zfp:RATE (RATE bits per value, 1..32), zstd, zstd:LEVEL (1..19)";

int64_t round4(int64_t b) { return (b + 3) / 4 * 4; }

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && std::isfinite(out);
}

bool parse_int(const std::string& s, int& out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

}  // namespace

std::string CodecSpec::name() const {
  switch (kind) {
    case CodecKind::kOff: return "off";
    case CodecKind::kBf16: return "bf16";
    case CodecKind::kFp16: return "fp16";
    case CodecKind::kInt8: return "int8";
    case CodecKind::kInt4: return "int4";
    case CodecKind::kZfp: {
      std::string r = fmt::format("{}", rate);
      return "zfp:" + r;
    }
    case CodecKind::kZstd: return level == 1 ? "zstd" : fmt::format("zstd:{}", level);
  }
  return "?";
}

std::string CompressionPolicy::describe() const {
  return fmt::format("dp={} params={} tp={} pp={} error_feedback={}", dp.name(), params.name(), tp.name(), pp.name(),
                     error_feedback ? "on" : "off");
}

CodecSpec parse_codec(const std::string& text, const std::string& what, int64_t block) {
  CodecSpec c;
  c.block = block;
  const std::string head = text.substr(0, text.find(':'));
  const bool has_arg = text.find(':') != std::string::npos;
  const std::string arg = has_arg ? text.substr(text.find(':') + 1) : "";
  if (head == "off" || head == "bf16" || head == "fp16" || head == "int8" || head == "int4") {
    if (has_arg) throw_input("{} = \"{}\": the codec {} takes no argument (codecs: {})", what, text, head, kNames);
    if (head == "off") c.kind = CodecKind::kOff;
    if (head == "bf16") c.kind = CodecKind::kBf16;
    if (head == "fp16") c.kind = CodecKind::kFp16;
    if (head == "int8") c.kind = CodecKind::kInt8;
    if (head == "int4") c.kind = CodecKind::kInt4;
    if (c.kind == CodecKind::kInt8 || c.kind == CodecKind::kInt4) {
      check_quant_spec(QuantSpec{c.kind == CodecKind::kInt8 ? 8 : 4, block}, what);
    }
    return c;
  }
  if (head == "zfp") {
    c.kind = CodecKind::kZfp;
    if (!parse_double(arg, c.rate) || c.rate < 1.0 || c.rate > 32.0) {
      throw_input("{} = \"{}\": zfp needs a rate in bits per value from 1 to 32 (e.g. zfp:8), got \"{}\"", what,
                  text, arg);
    }
    return c;
  }
  if (head == "zstd") {
    c.kind = CodecKind::kZstd;
    if (has_arg && (!parse_int(arg, c.level) || c.level < 1 || c.level > 19)) {
      throw_input("{} = \"{}\": zstd's level must be an integer from 1 to 19, got \"{}\"", what, text, arg);
    }
    return c;
  }
  throw_input("{} = \"{}\": not a codec (codecs: {})", what, text, kNames);
}

int zfp_bits_per_block(double rate) {
  // zfp_stream_set_rate for 1-d floats without write random access: floor(4 rate + 0.5),
  // at least 1 + 8 bits.
  const int bits = static_cast<int>(std::floor(4.0 * rate + 0.5));
  return std::max(bits, 9);
}

double zfp_effective_rate(double rate) { return zfp_bits_per_block(rate) / 4.0; }

int64_t codec_wire_bytes(const CodecSpec& c, int64_t n) {
  if (n <= 0) return 0;
  switch (c.kind) {
    case CodecKind::kOff: return 4 * n;
    case CodecKind::kBf16:
    case CodecKind::kFp16: return round4(2 * n);
    case CodecKind::kInt8: return quant_wire_bytes(n, QuantSpec{8, c.block});
    case CodecKind::kInt4: return quant_wire_bytes(n, QuantSpec{4, c.block});
    case CodecKind::kZfp: {
      // zfp_compress flushes the stream to whole words (8 to 64 bits as libzfp was built):
      // whole 64-bit words hold it whatever the build.
      const int64_t blocks = (n + 3) / 4;
      const int64_t bits = blocks * zfp_bits_per_block(c.rate);
      return (bits + 63) / 64 * 8;
    }
    case CodecKind::kZstd: return round4(static_cast<int64_t>(ZSTD_COMPRESSBOUND(static_cast<size_t>(4 * n))));
  }
  return 4 * n;
}

double codec_nominal_ratio(const CodecSpec& c) {
  if (c.kind == CodecKind::kZstd) return 0.93;
  const int64_t n = int64_t{1} << 24;
  return static_cast<double>(codec_wire_bytes(c, n)) / (4.0 * static_cast<double>(n));
}

}  // namespace weft
