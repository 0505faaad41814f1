// bf16 on the host side of the CUDA backend: a 2-byte value type bit-identical to the
// device's __nv_bfloat16 (and HIP's __hip_bfloat16), so that model code compiled without
// nvcc can hold, copy and convert bf16 buffers. Conversion rounds to nearest even, NaN stays
// NaN (quiet), as the device's __float2bfloat16_rn does.
#pragma once
#include <cstdint>
#include <cstring>

namespace weft::cuda {

struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

inline bf16 to_bf16(float f) {
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

inline float to_float(bf16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value a float takes after a round trip through bf16 storage.
inline float round_bf16(float f) { return to_float(to_bf16(f)); }

}  // namespace weft::cuda
