// bf16 on the host side of the CUDA backend: the host value type of core/dtype.h (2 bytes,
// bit-identical to the device's __nv_bfloat16 and HIP's hip_bfloat16), so that model code
// compiled without nvcc can hold, copy and convert bf16 buffers. Conversion rounds to nearest
// even, NaN stays NaN (quiet), as the device's __float2bfloat16_rn does.
#pragma once
#include "core/dtype.h"

namespace weft::cuda {

using ::weft::bf16;

inline bf16 to_bf16(float f) { return float_to_bf16(f); }
inline float to_float(bf16 b) { return bf16_to_float(b); }

// The value a float takes after a round trip through bf16 storage.
inline float round_bf16(float f) { return to_float(to_bf16(f)); }

}  // namespace weft::cuda
