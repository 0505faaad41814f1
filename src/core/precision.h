// Numeric precision of a training run's compute (Micikevicius et al. 2018, "Mixed Precision
// Training"; Kalamkar et al. 2019 for bf16): parameters, activations and activation gradients
// are stored in the compute type; weight gradients accumulate in fp32; the optimizer keeps
// fp32 master weights and moments.
//   kFp32  everything fp32
//   kBf16  bfloat16 storage (8-bit exponent: fp32's range, no loss scaling needed)
//   kFp16  IEEE half storage (5-bit exponent, max 65504): needs (dynamic) loss scaling
// On the CPU backend the 16-bit types are emulated: values live in fp32 buffers rounded to
// the nearest representable 16-bit value (round to nearest even), so that every rounding,
// overflow and loss-scaling decision of a GPU run happens the same way here.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace weft {

enum class Precision { kFp32, kBf16, kFp16 };
Precision parse_precision(const std::string& name);  // "fp32", "bf16", "fp16"; InputError otherwise
const char* precision_name(Precision p);
// Bytes of one stored element: 4 for fp32, 2 for bf16/fp16.
inline int precision_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

// How the model's matrix products compute on 16-bit storage (`[precision] matmul`, `--matmul`):
//   kExact  the fp32 product of the stored values (16-bit operands widen exactly): bitwise
//           the emulated reference, and the same product an fp32 run calls
//   kFast   the device's native 16-bit product where it has one (oneDNN's bf16 matmul on CPUs
//           with AVX512-BF16 or AMX, cuBLASLt on GPUs): operands rounded to the storage type,
//           fp32 accumulation and outputs; equal to exact within the 16-bit tolerance
// An fp32 run computes the same either way.
enum class MatmulMode { kExact, kFast };
MatmulMode parse_matmul_mode(const std::string& name);  // "exact", "fast"; InputError otherwise
const char* matmul_mode_name(MatmulMode m);

// What a backend's matrix products are set to (Backend::set_products): the storage precision
// of their operands, the mode, and the library of the fp32 product where the backend offers a
// choice ("" = its default; `weft calibrate` measures the fastest and records it).
struct ProductSettings {
  Precision storage = Precision::kFp32;
  MatmulMode mode = MatmulMode::kExact;
  std::string fp32_kernel;
};
// The cpu backends' fp32 product libraries ("openblas", "onednn"), and whether `name` is one
// of them or "" (the default): what the config, the system file and the backend accept.
inline constexpr const char* kCpuFp32Kernels = "openblas, onednn";
inline bool cpu_fp32_kernel_known(const std::string& name) {
  return name.empty() || name == "openblas" || name == "onednn";
}

// x rounded to the nearest bfloat16 (ties to even); NaN stays NaN, overflow rounds to inf.
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// IEEE binary16 <-> fp32 in software (core/float16.cc):
// round to nearest even, NaN stays NaN; bit-identical to the compiler's _Float16 conversions
// (tests/core/half_fallback_test.cc compares them).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even, NaN stays NaN (quiet)

// The 16-bit wire casts' host reference (Backend::encode_16 / decode_16, the bf16 and fp16
// codecs of comm/codec.h): dt DType::kBF16 or DType::kF16 (InputError otherwise).
// decode: out = widened, or out += widened when accumulate.
enum class DType : uint8_t;  // core/dtype.h (which includes this header)
void cast_to_16_ref(uint16_t* wire, const float* x, int64_t n, DType dt);
void cast_from_16_ref(float* out, const uint16_t* wire, int64_t n, DType dt, bool accumulate);

// x rounded to the nearest IEEE binary16 (ties to even), back in fp32: |x| > 65504 (after
// rounding) becomes inf, tiny values become subnormal halves or zero. Through the compiler's
// _Float16 where it has one (__FLT16_MAX__: GCC on x86-64, clang with AVX512-FP16 or from
// clang 15); through the software conversion otherwise (clang 14 on other x86 CPUs, the
// fuzz build of docs/fuzzing.md).
#if defined(__FLT16_MAX__)
inline float round_fp16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }
#else
inline float round_fp16(float x) { return f16_to_f32(f32_to_f16(x)); }
#endif

inline float round_to(Precision p, float x) {
  return p == Precision::kBf16 ? round_bf16(x) : p == Precision::kFp16 ? round_fp16(x) : x;
}

}  // namespace weft
