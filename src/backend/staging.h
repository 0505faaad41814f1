// The staging arena's row chunks, shared by the backends' typed defaults (typed_defaults.cc)
// and the models' descriptions, which predict the arena (model/description.h RunSpec).
#pragma once
#include <algorithm>
#include <cstdint>

namespace weft {

// The typed defaults' row chunks (backend.h "ops", typed_defaults.cc): an op whose fp32 kernel
// computes each row on its own stages its 16-bit row operands a chunk of rows at a time, about
// kStagingChunk fp32 elements (1 MiB) of them.
inline constexpr int64_t kStagingChunk = int64_t{1} << 18;
// The rows of one chunk of an op over N rows whose 16-bit row operands take row16 elements a
// row (the sum of their row strides): N when everything fits in `chunk` (or nothing is 16-bit),
// else chunk / row16 rows, a multiple of 16 when at least 16 (so a chunk's rows keep the
// alignment they have in the whole call), at least 1.
inline int64_t staging_chunk_rows(int64_t N, int64_t row16, int64_t chunk) {
  if (N <= 0 || row16 <= 0) return std::max<int64_t>(N, 0);
  int64_t r = chunk / row16;
  if (r >= 16) r -= r % 16;
  return std::clamp<int64_t>(r, 1, N);
}

// A native 16-bit product's chunks (Backend::native_16bit_products, backend/cpu/native_products.h):
// C (M,N) = op(A) op(B) with op(A) M x K, op(B) K x N reads bf16 operands in place and rounds an
// f32 one to bf16 copies, two to an arena element, `chunk` fp32 elements (2 chunk bf16) at a time:
// an f32 A by chunks of C's rows (an f32 B then whole), else an f32 B by chunks of C's columns;
// when such a chunk would be under kNativeMinRows rows (columns) of a larger C, by chunks of
// the sum's K instead (op(A)'s columns and op(B)'s rows, the product accumulated: into an fp32
// copy of C, M N more arena elements, when C is 16-bit, rounded once at the end).
inline constexpr int64_t kNativeMinRows = 64;
struct NativeChunks {
  bool by_k = false;  // chunks of K, else of C's rows (f32 A) or columns (f32 B only)
  int64_t n = 0;      // rows, columns or K per chunk
  int64_t bf16 = 0;   // bf16 elements of the copies at once
  int64_t acc = 0;    // fp32 elements of C's copy (K chunks into a 16-bit C)
};
inline NativeChunks native_product_chunks(int64_t M, int64_t N, int64_t K, bool a32, bool b32, bool c16,
                                          int64_t chunk) {
  NativeChunks c;
  if (M <= 0 || N <= 0 || K <= 0 || (!a32 && !b32)) return c;
  const int64_t h = 2 * chunk, side = a32 ? M : N;  // the dimension of C chunked
  c.n = staging_chunk_rows(side, K, h);
  if (c.n < std::min(side, kNativeMinRows)) {
    c.by_k = true;
    c.n = staging_chunk_rows(K, (a32 ? M : 0) + (b32 ? N : 0), h);
    c.bf16 = c.n * ((a32 ? M : 0) + (b32 ? N : 0));
    c.acc = c16 ? M * N : 0;
  } else {
    c.bf16 = c.n * K + (a32 && b32 ? K * N : 0);
  }
  return c;
}
// Its arena: fp32 elements.
inline int64_t native_product_staging(int64_t M, int64_t N, int64_t K, bool a32, bool b32, bool c16, int64_t chunk) {
  const NativeChunks c = native_product_chunks(M, N, K, a32, b32, c16, chunk);
  return c.acc + (c.bf16 + 1) / 2;
}
// matmul_residual_layernorm_forward's native sum: a chunk of the fp32 residual's rows (C), with
// their f32 input rows (IN) rounded to bf16, at a time; an f32 weight (IN x C) rounded whole.
inline int64_t native_residual_staging(int64_t N, int64_t IN, int64_t C, bool inp32, bool w32, int64_t chunk) {
  if (N <= 0 || C <= 0) return 0;
  const int64_t row16 = 2 * C + (inp32 ? IN : 0);
  return (staging_chunk_rows(N, row16, 2 * chunk) * row16 + (w32 ? IN * C : 0) + 1) / 2;
}

// The elements such an op stages at once: its 16-bit whole operands and a chunk's rows.
inline int64_t staged_rows_elems(int64_t N, int64_t whole16, int64_t row16, int64_t chunk) {
  return whole16 + (row16 > 0 && N > 0 ? std::min(N, staging_chunk_rows(N, row16, chunk)) * row16 : 0);
}

}  // namespace weft
