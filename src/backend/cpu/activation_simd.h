// The cpu backend's activations on SIMD registers (pointwise_ops.cc dispatches to them by what
// the CPU has): SiLU and shifted softplus with SLEEF's vector exp and log1p (1.0-ULP; the library
// PyTorch's CPU kernels use), forward and backward, on whole blocks of kActivationBlock elements
// only: pointwise_ops.cc cuts every array into such blocks (the last one padded), so each element
// is computed the same way whatever the thread count. ReLU stays scalar (no function to call).
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace weft::cpu {

inline constexpr int64_t kActivationBlock = 1024;

// n: a multiple of 16 (AVX-512) or 8 (AVX2). a: kSilu or kShiftedSoftplus.
void activation_forward_avx512(float* out, const float* x, int64_t n, Activation a);
void activation_backward_avx512(float* dinp, const float* x, const float* dout, int64_t n, Activation a,
                                bool accumulate);
void activation_forward_avx2(float* out, const float* x, int64_t n, Activation a);
void activation_backward_avx2(float* dinp, const float* x, const float* dout, int64_t n, Activation a,
                              bool accumulate);

// The exact GELU x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) and its gradient (Phi(x) + x phi(x)) dout,
// with SLEEF's erf and exp (1.0-ULP). n: as above.
void gelu_erf_forward_avx512(float* out, const float* x, int64_t n);
void gelu_erf_backward_avx512(float* dinp, const float* x, const float* dout, int64_t n);
void gelu_erf_forward_avx2(float* out, const float* x, int64_t n);
void gelu_erf_backward_avx2(float* dinp, const float* x, const float* dout, int64_t n);

}  // namespace weft::cpu
