// Row conversions of the CPU backend's kernels that read 16-bit tensors in place
// (attention_16.h, layernorm_16.h): a run of elements widened exactly into fp32 scratch, or
// rounded from it to nearest even with the bits of the backend's encode_16.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <omp.h>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/precision.h"
#include "core/view.h"

namespace weft::cpu {

inline void check_float_dtype(DType dt, const char* op, const char* what) {
  if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16) {
    throw_input("{}: {} is {}; the op takes f32, bf16 or f16 tensors", op, what, dtype_name(dt));
  }
}

// d[0, n) = the elements [off, off + n) of a tensor, widened to fp32 (exact).
inline void widen(float* d, const void* base, DType dt, int64_t off, int64_t n) {
  if (dt == DType::kF32) {
    std::memcpy(d, static_cast<const float*>(base) + off, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(base) + off;
  if (dt == DType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(bf16{s[i]});
    return;
  }
#ifdef __FLT16_MAX__
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(std::bit_cast<_Float16>(s[i]));
#else
  cast_from_16_ref(d, s, n, dt, false);
#endif
}

// The elements [off, off + n) of a tensor = s[0, n), rounded to its dtype (the bits of the
// backend's encode_16).
inline void narrow(void* base, DType dt, int64_t off, const float* s, int64_t n) {
  if (dt == DType::kF32) {
    std::memcpy(static_cast<float*>(base) + off, s, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(base) + off;
  if (dt == DType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]).bits;
    return;
  }
#ifdef __FLT16_MAX__
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(s[i]));
#else
  cast_to_16_ref(d, s, n, dt);
#endif
}

// Element i of a tensor of any float dtype, widened.
inline float element(CView v, int64_t i) {
  float x;
  widen(&x, v.data, v.dtype, i, 1);
  return x;
}

// Per-thread fp32 scratch of the kernels above: host memory outside the tracked categories, as
// the fp32 kernels' block scratch and the BLAS libraries' packing buffers (docs/memory.md).
class ThreadScratch {
 public:
  // `per` floats for each of the OpenMP threads, each thread's 64-byte aligned, `*stride` floats
  // apart; returns thread 0's.
  float* get(int64_t per, int64_t* stride) {
    *stride = (per + 15) / 16 * 16;
    const size_t want = static_cast<size_t>(*stride) * static_cast<size_t>(omp_get_max_threads()) + 16;
    if (v_.size() < want) v_.resize(want);
    const auto p = reinterpret_cast<uintptr_t>(v_.data());
    return v_.data() + ((64 - p % 64) % 64) / sizeof(float);
  }
  int64_t bytes() const { return static_cast<int64_t>(v_.size() * sizeof(float)); }

 private:
  std::vector<float> v_;
};

}  // namespace weft::cpu
