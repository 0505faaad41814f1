// The CPU backend's pointwise ops of the graph networks (backend.h: activations, products,
// row scaling), the reference of every other backend's. Each element is computed on its own, so
// results are bitwise independent of the thread count.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace weft::cpu {

// The activation and its derivative at x, in float (what every backend computes).
float activation_value(float x, Activation a);
float activation_derivative(float x, Activation a);

void activation_forward(float* out, const float* inp, int64_t n, Activation a);
void activation_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation a, bool accumulate);
void mul(float* out, const float* a, const float* b, int64_t n, bool accumulate);
void scale_rows(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate);

}  // namespace weft::cpu
