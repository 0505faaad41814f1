// Token + position embedding forward, and a deterministic backward: the positions are sorted
// by their row of wte (a stable radix sort keeps them in position order), then each distinct
// row sums its positions in that order and adds the sum once. dwpe: one thread per (t, c),
// summing over b in order. Nothing uses atomics, so repeated runs give identical bits.
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/radix_sort.cuh"

namespace weft::cuda::kern {
namespace {

constexpr uint32_t kNotMine = 0xffffffffu;  // sort key of a token outside [v0, v0 + vrows)

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t N,
                                         int64_t Tlen, int64_t C, int64_t v0, int64_t vrows) {
  const int64_t n = N * C;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / C, c = k % C;
    const int64_t row = static_cast<int64_t>(tokens[i]) - v0;
    float x = (row >= 0 && row < vrows) ? to_f(wte[row * C + c]) : 0.0f;
    if (wpe) x += to_f(wpe[(i % Tlen) * C + c]);
    out[k] = from_f<T>(x);
  }
}

__global__ void embedding_keys_kernel(uint32_t* keys, int32_t* vals, const int32_t* tokens, int64_t N, int64_t v0,
                                      int64_t vrows) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  const int64_t row = static_cast<int64_t>(tokens[i]) - v0;
  keys[i] = (row >= 0 && row < vrows) ? static_cast<uint32_t>(row) : kNotMine;
  vals[i] = static_cast<int32_t>(i);
}

// One block per sorted position; the first position of each run of equal keys sums the run.
template <typename T>
__global__ void embedding_rows_kernel(float* dwte, const T* dout, const uint32_t* keys, const int32_t* pos, int64_t N,
                                      int64_t C) {
  const int64_t s = blockIdx.x;
  const uint32_t key = keys[s];
  if (key == kNotMine || (s > 0 && keys[s - 1] == key)) return;
  int64_t end = s + 1;
  while (end < N && keys[end] == key) ++end;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t r = s; r < end; ++r) acc += to_f(dout[static_cast<int64_t>(pos[r]) * C + c]);
    dwte[static_cast<int64_t>(key) * C + c] += acc;
  }
}

template <typename T>
__global__ void embedding_pos_kernel(float* dwpe, const T* dout, int64_t B, int64_t Tlen, int64_t C) {
  const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (k >= Tlen * C) return;
  float acc = 0.0f;
  for (int64_t b = 0; b < B; ++b) acc += to_f(dout[b * Tlen * C + k]);
  dwpe[k] += acc;
}

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

// The key bits the sort looks at: rows are below vrows < 2^end_bit, so the marker's low
// end_bit bits (all ones) still sort after every row.
int sort_end_bit(int64_t vrows) {
  if (vrows >= (int64_t{1} << 31)) return 32;
  int end_bit = 1;
  while ((int64_t{1} << end_bit) <= vrows) ++end_bit;
  return end_bit;
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t T_, int64_t C,
                       int64_t v0, int64_t vrows, Stream s) {
  const int64_t N = B * T_;
  if (N * C == 0) return;
  embedding_forward_kernel<T><<<grid_for(N * C, 256), 256, 0, s>>>(out, tokens, wte, wpe, N, T_, C, v0, vrows);
  WEFT_KERNEL_CHECK("embedding_forward_kernel");
}

int64_t embedding_backward_scratch(int64_t N, int64_t vrows) {
  return static_cast<int64_t>(4 * align_up(static_cast<size_t>(N) * 4) +
                              align_up(gpu::sort_pairs_bytes(N, sort_end_bit(vrows))));
}

template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_,
                        int64_t C, int64_t v0, int64_t vrows, void* scratch, Stream s) {
  const int64_t N = B * T_;
  if (N == 0 || C == 0) return;
  char* p = static_cast<char*>(scratch);
  const size_t nb = align_up(static_cast<size_t>(N) * 4);
  auto* keys_in = reinterpret_cast<uint32_t*>(p);
  auto* keys_out = reinterpret_cast<uint32_t*>(p + nb);
  auto* vals_in = reinterpret_cast<int32_t*>(p + 2 * nb);
  auto* vals_out = reinterpret_cast<int32_t*>(p + 3 * nb);
  void* temp = p + 4 * nb;
  const int end_bit = sort_end_bit(vrows);
  const size_t temp_bytes = gpu::sort_pairs_bytes(N, end_bit);
  embedding_keys_kernel<<<grid_for(N, 256), 256, 0, s>>>(keys_in, vals_in, tokens, N, v0, vrows);
  WEFT_KERNEL_CHECK("embedding_keys_kernel");
  gpu::sort_pairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out, N, end_bit, s);
  embedding_rows_kernel<T><<<static_cast<unsigned>(N), 128, 0, s>>>(dwte, dout, keys_out, vals_out, N, C);
  WEFT_KERNEL_CHECK("embedding_rows_kernel");
  if (dwpe) {
    embedding_pos_kernel<T><<<grid_for(T_ * C, 256, INT32_MAX), 256, 0, s>>>(dwpe, dout, B, T_, C);
    WEFT_KERNEL_CHECK("embedding_pos_kernel");
  }
}

#define WEFT_INSTANTIATE(T)                                                                                        \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,   \
                                     int64_t, Stream);                                                             \
  template void embedding_backward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, \
                                      int64_t, void*, Stream);
WEFT_INSTANTIATE(float)
WEFT_INSTANTIATE(bf16_t)
#undef WEFT_INSTANTIATE

}  // namespace weft::cuda::kern
