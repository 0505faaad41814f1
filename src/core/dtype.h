// Element types of device buffers (backend/backend.h) and of quantized wires.
//   kF32   IEEE binary32                       4 bytes
//   kBF16  bfloat16 (fp32's exponent, 7-bit mantissa)  2 bytes
//   kF16   IEEE binary16 (max 65504)           2 bytes
//   kI32   int32 (token ids, targets)          4 bytes
//   kI8    int8 (quantized wires)              1 byte
//   kI4    int4, two per byte: element 2k in the low nibble of byte k, 2k+1 in the high one
// Sizes are given for n elements (dtype_bytes), so that the packed int4 counts exactly.
// The training precision (core/precision.h) names the 16-bit storage types a run computes in;
// dtype_of / precision_of map between the two.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "core/precision.h"

namespace weft {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI8, kI4 };
constexpr int kDTypes = 6;

const char* dtype_name(DType t);  // "f32", "bf16", "f16", "i32", "i8", "i4"
// "f32" (or "fp32"), "bf16", "f16" (or "fp16"), "i32", "i8", "i4"; InputError otherwise.
DType parse_dtype(const std::string& name);

// Bits of one element: 32, 16, 16, 32, 8, 4.
int dtype_bits(DType t);
// Bytes of n elements, rounded up to whole bytes (int4: (n + 1) / 2).
inline size_t dtype_bytes(DType t, int64_t n) {
  return (static_cast<size_t>(n) * static_cast<size_t>(dtype_bits(t)) + 7) / 8;
}
inline bool dtype_is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

// The storage type of a training precision, and back (InputError for a non-float dtype).
DType dtype_of(Precision p);
Precision precision_of(DType t);

// The bytes of one element holding `value`, in *out (little endian; int4: the value in both
// nibbles, so that a byte of it fills two elements). Returns the number of bytes written
// (1 for int8 and int4). Float types round to nearest even; integer types need an integral
// value in range (InputError otherwise: a fill of 0.5 into an int8 buffer is a bug).
int encode_element(DType t, float value, uint8_t out[4]);

// bfloat16 on the host: a 2-byte value type bit-identical to the device's __nv_bfloat16
// (and HIP's __hip_bfloat16). Conversion rounds to nearest even; NaN stays NaN (quiet), as
// the device's __float2bfloat16_rn does.
struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet, keep the sign
    r.bits = static_cast<uint16_t>((u >> 16) | 0x0040u);
    return r;
  }
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  r.bits = static_cast<uint16_t>(u >> 16);
  return r;
}

inline float bf16_to_float(bf16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace weft
