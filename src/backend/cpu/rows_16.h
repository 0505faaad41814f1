// The CPU backend's 16-bit conversions, in one place: a run of elements widened exactly to fp32,
// or rounded to nearest even (core/dtype.h's inline conversions, and _Float16's where the
// compiler has it, which the software reference equals: tests/core/half_fallback_test.cc).
// Used by encode_16/decode_16 (the wires' codecs and the typed ops' staging) and by the kernels
// that read 16-bit tensors in place (attention_16.h, layernorm_16.h).
#pragma once
#include <algorithm>
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

// d[0, n) = the elements [off, off + n) of a tensor, widened to fp32 (exact); accumulate: +=.
inline void widen(float* d, const void* base, DType dt, int64_t off, int64_t n, bool accumulate = false) {
  if (dt == DType::kF32 && !accumulate) {
    std::memcpy(d, static_cast<const float*>(base) + off, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (dt == DType::kF32) {
    const float* s = static_cast<const float*>(base) + off;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(base) + off;
  if (dt == DType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = bf16_to_float(bf16{s[i]});
      d[i] = accumulate ? d[i] + v : v;
    }
    return;
  }
#ifdef __FLT16_MAX__
  if (dt == DType::kF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(std::bit_cast<_Float16>(s[i]));
      d[i] = accumulate ? d[i] + v : v;
    }
    return;
  }
#endif
  cast_from_16_ref(d, s, n, dt, accumulate);  // fp16 without _Float16; another dtype: InputError
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
  if (dt == DType::kF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(s[i]));
    return;
  }
#endif
  cast_to_16_ref(d, s, n, dt);  // fp16 without _Float16; another dtype: InputError
}

// f(first, count) over [0, n) in chunks of 2^15 elements, in parallel when there are several.
template <class F>
inline void in_chunks(int64_t n, F&& f) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  if (n <= kChunk) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(kChunk, n - c * kChunk));
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
