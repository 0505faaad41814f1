// The codecs of compressed collectives (comm/compressed_comm.h; names and sizes in
// comm/codec_spec.h): fp32 values on DEVICE memory of a backend in, wire bytes on DEVICE memory
// out, and back. One implementation per wire format, shared with everything else that uses it:
//   bf16, fp16   Backend::encode_16 / decode_16 (host reference core/precision.h; cpu
//                directly, cuda and HIP kernels in backend/cuda/wire_cast.cu)
//   int8, int4   Backend::quantize_blocks / dequantize_blocks: the ZeRO++ block quantizer of
//                core/block_quant.h, the same bytes on every backend
//   zfp:RATE     libzfp's fixed-rate mode, serial, on host memory
//   zstd         libzstd (ZSTD_compress at the level, ZSTD_decompress), on host memory
// zfp and zstd run on the host: on a backend whose memory the host can read (cpu, and
// cpu-guarded through HostAccess) they work on the device memory in place, elsewhere through
// staged copies; make_codec refuses them for a backend that is not a CPU one (cuda: weft has
// no GPU kernels for them and Debian's libzfp is built without its CUDA policy), naming the
// codec and the backend, rather than falling back silently.
//
// Error feedback (encode's residual): the codec encodes v = x + residual and leaves
// residual = v - decode(encode(v)), so that what one step's compression loses is sent in the
// next (Seide et al. 2014; Karimireddy et al. 2019). int8/int4 do it inside the quantizer;
// the others with the backend's add and scale around a decode.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "comm/codec_spec.h"

namespace weft {

class Codec {
 public:
  Codec(const CodecSpec& spec, Backend& be) : spec_(spec), be_(be) {}
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  const CodecSpec& spec() const { return spec_; }
  Backend& backend() const { return be_; }
  // The most bytes encode writes for n values (codec_wire_bytes: exact for fixed-size codecs).
  int64_t max_wire_bytes(int64_t n) const { return codec_wire_bytes(spec_, n); }

  // x (n DEVICE floats) -> wire (DEVICE, max_wire_bytes(n) bytes, 4-byte aligned). Returns the
  // bytes written, a multiple of 4 (the padding zero). residual: null, or n DEVICE floats of
  // error feedback (see above).
  int64_t encode(void* wire, const float* x, int64_t n, float* residual);
  // wire (`bytes` as encode returned them) -> out (n DEVICE floats): writes, or adds into out
  // when accumulate (one fp32 sum per element).
  virtual void decode(float* out, const void* wire, int64_t bytes, int64_t n, bool accumulate) = 0;

 protected:
  // encode without error feedback.
  virtual int64_t encode_plain(void* wire, const float* x, int64_t n) = 0;
  // encode with error feedback; the default encodes x + residual and decodes it back.
  virtual int64_t encode_feedback(void* wire, const float* x, int64_t n, float* residual);

 private:
  CodecSpec spec_;
  Backend& be_;
  DeviceBuffer v_, back_;  // error feedback scratch (n floats each)
};

// Whether weft has `kind` on the backend named `backend` ("cpu", "cpu-guarded", "cuda", ...):
// every codec on the CPU backends; bf16, fp16, int8, int4 on cuda (and HIP); zfp and zstd
// nowhere else.
bool backend_has_codec(const std::string& backend, CodecKind kind);
// InputError naming the codec, `what` and the backend when backend_has_codec says no.
void check_codec_on_backend(const CodecSpec& spec, const std::string& backend, const std::string& what);
// The codec for `spec` on `be` (null for off). InputError naming the codec, `what` (the
// setting, "compression.dp") and the backend when backend_has_codec says no.
std::unique_ptr<Codec> make_codec(const CodecSpec& spec, Backend& be, const std::string& what);

}  // namespace weft
