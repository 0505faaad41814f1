// The cpu backend's tanh GELU (GPT-2's), forward and backward: the reference formulas of
// cpu_math.h (fast_tanh through vexp), in a file compiled with -fno-trapping-math so that GCC
// if-converts the clamps and vectorises the loops (CMakeLists.txt). Each element is computed on
// its own with the same operations in the same order as the scalar loop, so the results are
// bitwise those of the scalar code for any input (NaN included) and any thread count.
#pragma once
#include <cstdint>

namespace weft::cpu {

// out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp[i].
void gelu_tanh_forward(float* out, const float* inp, int64_t n);
// dinp[i] = gelu'(inp[i]) dout[i] (written, not accumulated).
void gelu_tanh_backward(float* dinp, const float* inp, const float* dout, int64_t n);

}  // namespace weft::cpu
