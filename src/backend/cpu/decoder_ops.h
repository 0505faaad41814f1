// The CPU backend's ops of the decoder variants (backend.h, "the decoder variants' ops": RMSNorm,
// rotary positions, SwiGLU, grouped-query attention's key/value heads), the reference of every
// other backend's. Rows are independent and every sum over rows runs over fixed chunks of rows
// added in order, so results are bitwise independent of the thread count.
#pragma once
#include <cstdint>

namespace weft::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps);
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int64_t C);
void rope(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads, int64_t hd,
          int64_t rot, bool inverse);
void swiglu_forward(float* out, const float* pre, int64_t N, int64_t F);
void gelu_erf_forward(float* out, const float* inp, int64_t n);
void gelu_erf_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void swiglu_backward(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F);
void expand_kv(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd);
void reduce_kv(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd);

}  // namespace weft::cpu
