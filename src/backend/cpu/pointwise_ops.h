// The CPU backend's pointwise ops of the graph networks (backend.h: activations, products,
// row scaling), the reference of every other backend's. Each element is computed on its own, so
// results are bitwise independent of the thread count.
#pragma once
#include <cstdint>
#include <functional>

#include "backend/backend.h"

namespace weft::cpu {

// The activation and its derivative at x, in float (what every backend computes).
float activation_value(float x, Activation a);
float activation_derivative(float x, Activation a);

void activation_forward(float* out, const float* inp, int64_t n, Activation a);
void activation_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation a, bool accumulate);
// Runs f(y, x, d, m, avx512) over n elements in blocks of kActivationBlock (activation_simd.h;
// threads take whole blocks, the last one through a zero-padded copy, m a multiple of 16) when
// the CPU has AVX-512 or AVX2 with FMA, and returns true; false (nothing run) otherwise. y is
// written; d (may be null) read with x. Each element takes the same path whatever n and the
// thread count.
using SimdBlockFn = std::function<void(float* y, const float* x, const float* d, int64_t m, bool avx512)>;
bool simd_blocks(int64_t n, const SimdBlockFn& f, float* y, const float* x, const float* d);

void mul(float* out, const float* a, const float* b, int64_t n, bool accumulate);
void scale_rows(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate);

}  // namespace weft::cpu
