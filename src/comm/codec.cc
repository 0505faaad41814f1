#include "comm/codec.h"

#include <zfp.h>
#include <zstd.h>

#include <cstring>
#include <vector>

#include "core/block_quant.h"
#include "core/error.h"

namespace weft {

namespace {

// A growing DEVICE scratch buffer of at least n elements of dt (kComm).
float* scratch(DeviceBuffer& b, Backend& be, int64_t n) {
  if (b.count() < n) b = DeviceBuffer(be, DType::kF32, n, MemCategory::kComm);
  return b.data<float>();
}

void zero_padding(Backend& be, void* wire, int64_t from, int64_t to) {
  if (to > from) be.fill(wire, DType::kI8, from, to - from, 0.0f);
}

// --- 16-bit casts ---
class Cast16Codec final : public Codec {
 public:
  Cast16Codec(const CodecSpec& s, Backend& be) : Codec(s, be), dt_(s.kind == CodecKind::kBf16 ? DType::kBF16 : DType::kF16) {}
  void decode(float* out, const void* wire, int64_t bytes, int64_t n, bool accumulate) override {
    WEFT_CHECK(bytes == max_wire_bytes(n), "{} decode: {} bytes for {} values (expected {})", spec().name(), bytes,
               n, max_wire_bytes(n));
    backend().decode_16(out, wire, n, dt_, accumulate);
  }

 protected:
  int64_t encode_plain(void* wire, const float* x, int64_t n) override {
    backend().encode_16(wire, x, n, dt_);
    const int64_t bytes = max_wire_bytes(n);
    zero_padding(backend(), wire, 2 * n, bytes);
    return bytes;
  }

 private:
  DType dt_;
};

// --- block quantization (the ZeRO++ wire format) ---
class BlockQuantCodec final : public Codec {
 public:
  BlockQuantCodec(const CodecSpec& s, Backend& be)
      : Codec(s, be), q_{s.kind == CodecKind::kInt8 ? 8 : 4, s.block} {}
  void decode(float* out, const void* wire, int64_t bytes, int64_t n, bool accumulate) override {
    WEFT_CHECK(bytes == max_wire_bytes(n), "{} decode: {} bytes for {} values (expected {})", spec().name(), bytes,
               n, max_wire_bytes(n));
    backend().dequantize_blocks(out, wire, n, q_, accumulate);
  }

 protected:
  int64_t encode_plain(void* wire, const float* x, int64_t n) override {
    backend().quantize_blocks(wire, x, n, q_, nullptr);
    return max_wire_bytes(n);
  }
  int64_t encode_feedback(void* wire, const float* x, int64_t n, float* residual) override {
    backend().quantize_blocks(wire, x, n, q_, residual);
    return max_wire_bytes(n);
  }

 private:
  QuantSpec q_;
};

// Host views of device memory for the host codecs: the memory itself where the backend grants
// access (cpu; cpu-guarded unfences it for the scope), else a staged copy.
class HostIn {
 public:
  HostIn(Backend& be, const void* p, size_t bytes) : access_(be, const_cast<void*>(p), bytes) {
    if (access_.direct()) {
      host_ = static_cast<const char*>(p);
      return;
    }
    copy_.resize(bytes);
    be.copy_to_host(copy_.data(), p, 0, bytes);
    host_ = copy_.data();
  }
  const char* get() const { return host_; }

 private:
  HostAccess access_;
  std::vector<char> copy_;
  const char* host_ = nullptr;
};

class HostOut {
 public:
  // read: the call reads the range too (accumulate).
  HostOut(Backend& be, void* p, size_t bytes, bool read) : be_(be), p_(p), access_(be, p, bytes) {
    if (access_.direct()) {
      host_ = static_cast<char*>(p);
      return;
    }
    copy_.resize(bytes);
    if (read) be.copy_to_host(copy_.data(), p, 0, bytes);
    host_ = copy_.data();
  }
  char* get() const { return host_; }
  // Writes back a staged copy (the first `bytes` of it).
  void commit(size_t bytes) {
    if (!access_.direct() && bytes > 0) be_.copy_to_device(p_, 0, copy_.data(), bytes);
  }

 private:
  Backend& be_;
  void* p_;
  HostAccess access_;
  std::vector<char> copy_;
  char* host_ = nullptr;
};

void add_into(float* out, const float* v, int64_t n, bool accumulate) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) out[i] += v[i];
  } else {
    std::memcpy(out, v, static_cast<size_t>(n) * sizeof(float));
  }
}

// --- ZFP fixed rate ---
class ZfpCodec final : public Codec {
 public:
  using Codec::Codec;
  void decode(float* out, const void* wire, int64_t bytes, int64_t n, bool accumulate) override {
    WEFT_CHECK(bytes == max_wire_bytes(n), "{} decode: {} bytes for {} values (expected {})", spec().name(), bytes,
               n, max_wire_bytes(n));
    if (n == 0) return;
    HostIn in(backend(), wire, static_cast<size_t>(bytes));
    HostOut o(backend(), out, static_cast<size_t>(n) * sizeof(float), accumulate);
    float* target = reinterpret_cast<float*>(o.get());
    std::vector<float> tmp;
    if (accumulate) {
      tmp.resize(static_cast<size_t>(n));
      run(tmp.data(), const_cast<char*>(in.get()), bytes, n, /*compress=*/false);
      add_into(target, tmp.data(), n, true);
    } else {
      run(target, const_cast<char*>(in.get()), bytes, n, false);
    }
    o.commit(static_cast<size_t>(n) * sizeof(float));
  }

 protected:
  int64_t encode_plain(void* wire, const float* x, int64_t n) override {
    const int64_t bytes = max_wire_bytes(n);
    if (n == 0) return 0;
    HostIn in(backend(), x, static_cast<size_t>(n) * sizeof(float));
    HostOut o(backend(), wire, static_cast<size_t>(bytes), false);
    const int64_t got = run(const_cast<float*>(reinterpret_cast<const float*>(in.get())), o.get(), bytes, n, true);
    // The fixed rate's bits, flushed to zfp's stream words (8 to 64 bits, as libzfp was
    // built): at most the whole 64-bit words codec_wire_bytes counts; the rest is zero.
    WEFT_CHECK(got <= bytes, "zfp:{} compressed {} values into {} bytes, more than the fixed rate's {}", spec().rate,
               n, got, bytes);
    std::memset(o.get() + got, 0, static_cast<size_t>(bytes - got));
    o.commit(static_cast<size_t>(bytes));
    return bytes;
  }

 private:
  // Compresses data (n floats) into buf or decompresses buf into data; returns the stream's bytes.
  int64_t run(float* data, char* buf, int64_t bytes, int64_t n, bool compress) {
    zfp_field* field = zfp_field_1d(data, zfp_type_float, static_cast<size_t>(n));
    zfp_stream* zs = zfp_stream_open(nullptr);
    zfp_stream_set_rate(zs, spec().rate, zfp_type_float, 1, zfp_false);
    bitstream* bs = stream_open(buf, static_cast<size_t>(bytes));
    zfp_stream_set_bit_stream(zs, bs);
    zfp_stream_rewind(zs);
    const size_t done = compress ? zfp_compress(zs, field) : zfp_decompress(zs, field);
    stream_close(bs);
    zfp_stream_close(zs);
    zfp_field_free(field);
    if (done == 0) throw_runtime("zfp:{}: {} of {} values failed", spec().rate, compress ? "compression" : "decompression", n);
    return static_cast<int64_t>(done);
  }
};

// --- Zstandard (lossless) ---
// Wire: the compressed frame, zero-padded to a multiple of 4 bytes (decode reads the frame's
// own size from its header and ignores the padding).
class ZstdCodec final : public Codec {
 public:
  ZstdCodec(const CodecSpec& s, Backend& be) : Codec(s, be), cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {
    if (cctx_ == nullptr || dctx_ == nullptr) throw_runtime("zstd: cannot create a context");
  }
  ~ZstdCodec() override {
    ZSTD_freeCCtx(cctx_);
    ZSTD_freeDCtx(dctx_);
  }
  void decode(float* out, const void* wire, int64_t bytes, int64_t n, bool accumulate) override {
    if (n == 0) return;
    HostIn in(backend(), wire, static_cast<size_t>(bytes));
    HostOut o(backend(), out, static_cast<size_t>(n) * sizeof(float), accumulate);
    const size_t raw = static_cast<size_t>(n) * sizeof(float);
    const size_t frame = ZSTD_findFrameCompressedSize(in.get(), static_cast<size_t>(bytes));
    if (ZSTD_isError(frame)) throw_runtime("zstd: no frame in {} wire bytes: {}", bytes, ZSTD_getErrorName(frame));
    std::vector<float> tmp;
    float* dst = reinterpret_cast<float*>(o.get());
    if (accumulate) {
      tmp.resize(static_cast<size_t>(n));
      dst = tmp.data();
    }
    const size_t got = ZSTD_decompressDCtx(dctx_, dst, raw, in.get(), frame);
    if (ZSTD_isError(got) || got != raw) {
      throw_runtime("zstd: decompressed {} of {} bytes: {}", ZSTD_isError(got) ? 0 : got, raw,
                    ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short frame");
    }
    if (accumulate) add_into(reinterpret_cast<float*>(o.get()), tmp.data(), n, true);
    o.commit(raw);
  }

 protected:
  int64_t encode_plain(void* wire, const float* x, int64_t n) override {
    if (n == 0) return 0;
    const int64_t cap = max_wire_bytes(n);
    HostIn in(backend(), x, static_cast<size_t>(n) * sizeof(float));
    HostOut o(backend(), wire, static_cast<size_t>(cap), false);
    const size_t got = ZSTD_compressCCtx(cctx_, o.get(), static_cast<size_t>(cap), in.get(),
                                         static_cast<size_t>(n) * sizeof(float), spec().level);
    if (ZSTD_isError(got)) throw_runtime("zstd: compressing {} values: {}", n, ZSTD_getErrorName(got));
    const int64_t bytes = (static_cast<int64_t>(got) + 3) / 4 * 4;
    std::memset(o.get() + got, 0, static_cast<size_t>(bytes) - got);
    o.commit(static_cast<size_t>(bytes));
    return bytes;
  }

 private:
  ZSTD_CCtx* cctx_;
  ZSTD_DCtx* dctx_;
};

bool cpu_backend(const std::string& name) { return name == "cpu" || name == "cpu-guarded"; }

}  // namespace

int64_t Codec::encode(void* wire, const float* x, int64_t n, float* residual) {
  WEFT_CHECK(n >= 0, "{} encode of {} values", spec_.name(), n);
  if (n == 0) return 0;
  return residual != nullptr ? encode_feedback(wire, x, n, residual) : encode_plain(wire, x, n);
}

int64_t Codec::encode_feedback(void* wire, const float* x, int64_t n, float* residual) {
  float* v = scratch(v_, be_, n);
  float* back = scratch(back_, be_, n);
  be_.add(v, x, residual, n);  // v = x + residual
  const int64_t bytes = encode_plain(wire, v, n);
  decode(back, wire, bytes, n, false);
  be_.scale(back, -1.0f, n);
  be_.add(residual, v, back, n);  // residual = v - decoded
  return bytes;
}

bool backend_has_codec(const std::string& backend, CodecKind kind) {
  if (cpu_backend(backend)) return true;
  return kind != CodecKind::kZfp && kind != CodecKind::kZstd;
}

void check_codec_on_backend(const CodecSpec& spec, const std::string& backend, const std::string& what) {
  if (!backend_has_codec(backend, spec.kind)) {
    throw_input("{} = \"{}\": the {} backend has no {} codec (weft runs zfp and zstd on the host only: backends "
                "cpu and cpu-guarded; on {} use bf16, fp16, int8 or int4)",
                what, spec.name(), backend, spec.name(), backend);
  }
}

std::unique_ptr<Codec> make_codec(const CodecSpec& spec, Backend& be, const std::string& what) {
  check_codec_on_backend(spec, be.name(), what);
  switch (spec.kind) {
    case CodecKind::kOff: return nullptr;
    case CodecKind::kBf16:
    case CodecKind::kFp16: return std::make_unique<Cast16Codec>(spec, be);
    case CodecKind::kInt8:
    case CodecKind::kInt4: return std::make_unique<BlockQuantCodec>(spec, be);
    case CodecKind::kZfp: return std::make_unique<ZfpCodec>(spec, be);
    case CodecKind::kZstd: return std::make_unique<ZstdCodec>(spec, be);
  }
  return nullptr;
}

}  // namespace weft
