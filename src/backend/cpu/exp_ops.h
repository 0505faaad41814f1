// The exponentials of the cpu backend's softmaxes (attention rows, the cross-entropy over the
// vocabulary): cpu_math.h's vexp over a row, in a file compiled with -fno-trapping-math so that
// GCC if-converts vexp's clamps and vectorises the loops (CMakeLists.txt), as gelu_ops.h does for
// the GELU. Each element is computed on its own with the same operations as the scalar loop, and
// every sum adds the elements one by one in index order (never reassociated), so the results are
// bitwise those of the scalar loops they replace, for any input and any thread count. Within the
// default flags GCC could not vectorise those loops (the clamps), which left the cross-entropy's
// exp at about 4.4 ns an element on an AVX2 core; vectorised, with the in-order sum, 1.8 ns.
#pragma once
#include <cstdint>

namespace weft::cpu {

// r[j] = vexp(r[j] - shift) for j < n; returns their sum, added in order j = 0, 1, ...
float exp_shifted_sum(float* r, int64_t n, float shift);
// The sum, added in order, of vexp(r[j] - shift) for j < n (r unchanged).
float sum_exp_shifted(const float* r, int64_t n, float shift);
// r[j] = vexp(r[j] - shift) * k for j < n.
void exp_shifted_scaled(float* r, int64_t n, float shift, float k);

}  // namespace weft::cpu
