// What a compressed collective puts on the wire: the codec names of the [compression] policy
// (docs/compression.md), their wire sizes and their properties, without any implementation
// (comm/codec.h has those): what the config, the planner and the reports need.
//
//   off        fp32 as it is (no codec)
//   bf16       bfloat16, round to nearest even (2 bytes per value; lossy: 8 significant bits)
//   fp16       IEEE binary16, round to nearest even (2 bytes; overflows above 65504 to inf)
//   int8       symmetric absmax block quantization, 8 bits (core/block_quant.h: the ZeRO++
//              wire format, one fp32 scale per block of `block` values)
//   int4       the same, 4 bits, two values per byte
//   zfp:RATE   ZFP fixed-rate mode (Lindstrom 2014; libzfp), RATE bits per value, 1..32; zfp
//              codes blocks of 4 values with at least 9 bits each, so the effective rate is
//              max(round(4 RATE), 9) / 4 (zfp_stream_set_rate)
//   zstd       lossless Zstandard (libzstd) of the fp32 bytes, level 1; zstd:L for level L
//              (1..19); the only codec whose size depends on the data
//
// Wire sizes are rounded up to a multiple of 4 bytes (so every block of a multi-peer buffer
// starts 4-byte aligned, as the device kernels need).
#pragma once
#include <cstdint>
#include <string>

namespace weft {

enum class CodecKind { kOff, kBf16, kFp16, kInt8, kInt4, kZfp, kZstd };

struct CodecSpec {
  CodecKind kind = CodecKind::kOff;
  double rate = 0;       // zfp: bits per value as asked (1..32)
  int level = 1;         // zstd: compression level (1..19)
  int64_t block = 2048;  // int8/int4: values per fp32 scale

  bool off() const { return kind == CodecKind::kOff; }
  bool lossless() const { return kind == CodecKind::kOff || kind == CodecKind::kZstd; }
  // Wire size a function of the element count alone (every codec but zstd).
  bool fixed_size() const { return kind != CodecKind::kZstd; }
  // "off", "bf16", "fp16", "int8", "int4", "zfp:8", "zstd" / "zstd:3": what parse_codec reads.
  std::string name() const;
};

// The [compression] policy: one codec per kind of traffic (docs/compression.md).
//   dp      data-parallel gradient reductions (all-reduce, reduce-scatter; zero 0-3) and the
//           tied embedding's row exchange
//   params  data-parallel parameter all-gathers (zero 1/2 after the step, zero 3 per group)
//   tp      tensor-parallel activations and their gradients (all-reduce, all-gather,
//           reduce-scatter of the sequence-parallel regions); max reductions stay exact
//   pp      pipeline sends and receives of activations and their gradients
// error_feedback: the dp codec's error is carried to the next step (a residual per rank).
struct CompressionPolicy {
  CodecSpec dp, params, tp, pp;
  bool error_feedback = false;
  bool any() const { return !dp.off() || !params.off() || !tp.off() || !pp.off(); }
  // "dp=int4 params=int8 tp=bf16 pp=off ef=on"
  std::string describe() const;
};

// Reads a codec name (the list above; case-sensitive, as written there). `what` names the
// setting in the InputError ("compression.dp"), which lists the codec names. block: the values
// per scale for int8/int4 (checked like QuantSpec: 1 .. 1 << 24).
CodecSpec parse_codec(const std::string& text, const std::string& what, int64_t block = 2048);

// zfp: the bits per block of 4 values zfp uses for the rate asked, and the rate that gives.
int zfp_bits_per_block(double rate);
double zfp_effective_rate(double rate);

// Bytes on the wire for n fp32 values: exact for fixed-size codecs, the bound (worst case,
// as ZSTD_compressBound, plus the rounding) for zstd. 0 for n == 0.
int64_t codec_wire_bytes(const CodecSpec& c, int64_t n);
// Bytes on the wire per fp32 value's 4 bytes, for the planner: codec_wire_bytes / (4 n) at
// large n for fixed-size codecs; for zstd the ratio measured on gradients (an estimate the
// caller may override with a calibrated one), 0.93.
double codec_nominal_ratio(const CodecSpec& c);

}  // namespace weft
