// Tensor-core fragments for one warp (wavefront): gpu::wmma, with exactly the calls the flash
// attention kernels use (16x16x16 tiles, bf16 A and B, fp32 accumulator):
//   fragment<matrix_a, 16,16,16, bf16_t, row_major>, fragment<matrix_b, ..., row_major | col_major>,
//   fragment<accumulator, 16,16,16, float>, fill_fragment, load_matrix_sync, mma_sync,
//   store_matrix_sync (mem_row_major).
// CUDA: nvcuda::wmma itself. HIP (gfx90a): weft's own fragments over the MFMA instruction
// v_mfma_f32_16x16x16bf16_1k, because rocWMMA is not packaged for Debian 12 (ROCm 5.2).
//
// MFMA operand layout relied on (one wavefront of 64 lanes; "item" is the element index in
// the lane's register vector), from AMD's Matrix Instruction Calculator
// (github.com/ROCm/amd_matrix_instruction_calculator, `--architecture cdna2 --instruction
// v_mfma_f32_16x16x16bf16_1k --detail-instruction`) and AMD's lab notes "AMD matrix cores"
// (gpuopen.com/learn/amd-lab-notes/amd-lab-notes-matrix-cores-readme):
//   A (16 x 16, M x K), 4 bf16 per lane:  A[i][k] in lane i + 16 * (k / 4), item k % 4
//   B (16 x 16, K x N), 4 bf16 per lane:  B[k][j] in lane j + 16 * (k / 4), item k % 4
//   C, D (16 x 16), 4 fp32 per lane:      D[i][j] in lane j + 16 * (i / 4), item i % 4
// i.e. lane l holds row l % 16 of A, column l % 16 of B and column l % 16 of D, the k (or i)
// block 4 * (l / 16) .. + 3. Loads and stores go element by element from any address (wmma's
// 32-byte alignment is not needed here). NOT VERIFIED: no AMD GPU was available; the layer
// compiles for gfx90a, and tests/hip's device test checks a product against the host when it
// runs on one.
#pragma once
#include "backend/cuda/gpu_runtime.h"

#if WEFT_GPU_COMPILER
#if defined(WEFT_HIP)

namespace weft::gpu::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

using Bf16x4 = short __attribute__((ext_vector_type(4)));  // the MFMA builtin's A and B operand
using F32x4 = float __attribute__((ext_vector_type(4)));   // its C and D

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment;

template <typename Layout>
struct fragment<matrix_a, 16, 16, 16, bf16_t, Layout> {
  Bf16x4 x;
};
template <typename Layout>
struct fragment<matrix_b, 16, 16, 16, bf16_t, Layout> {
  Bf16x4 x;
};
template <>
struct fragment<accumulator, 16, 16, 16, float, void> {
  F32x4 x;
};
using FragAcc = fragment<accumulator, 16, 16, 16, float, void>;

namespace detail {
__device__ __forceinline__ int lane() { return static_cast<int>(__lane_id()); }
__device__ __forceinline__ short bits(bf16_t v) { return static_cast<short>(v.data); }
}  // namespace detail

__device__ __forceinline__ void fill_fragment(FragAcc& f, float v) { f.x = F32x4{v, v, v, v}; }

// A row-major: A[i][k] = p[i * ldm + k]; lane l takes i = l % 16, k = 4 (l / 16) + e.
__device__ __forceinline__ void load_matrix_sync(fragment<matrix_a, 16, 16, 16, bf16_t, row_major>& f,
                                                 const bf16_t* p, unsigned ldm) {
  const int l = detail::lane(), i = l % 16, k0 = 4 * (l / 16);
  for (int e = 0; e < 4; ++e) f.x[e] = detail::bits(p[i * ldm + k0 + e]);
}
// B row-major: B[k][j] = p[k * ldm + j]; lane l takes j = l % 16, k = 4 (l / 16) + e.
__device__ __forceinline__ void load_matrix_sync(fragment<matrix_b, 16, 16, 16, bf16_t, row_major>& f,
                                                 const bf16_t* p, unsigned ldm) {
  const int l = detail::lane(), j = l % 16, k0 = 4 * (l / 16);
  for (int e = 0; e < 4; ++e) f.x[e] = detail::bits(p[(k0 + e) * ldm + j]);
}
// B col-major: B[k][j] = p[j * ldm + k].
__device__ __forceinline__ void load_matrix_sync(fragment<matrix_b, 16, 16, 16, bf16_t, col_major>& f,
                                                 const bf16_t* p, unsigned ldm) {
  const int l = detail::lane(), j = l % 16, k0 = 4 * (l / 16);
  for (int e = 0; e < 4; ++e) f.x[e] = detail::bits(p[j * ldm + k0 + e]);
}
// Accumulator: D[i][j] at p[i * ldm + j] (row-major) or p[j * ldm + i]; lane l holds
// j = l % 16, i = 4 (l / 16) + e.
__device__ __forceinline__ void load_matrix_sync(FragAcc& f, const float* p, unsigned ldm, layout_t layout) {
  const int l = detail::lane(), j = l % 16, i0 = 4 * (l / 16);
  for (int e = 0; e < 4; ++e) f.x[e] = layout == mem_row_major ? p[(i0 + e) * ldm + j] : p[j * ldm + i0 + e];
}
__device__ __forceinline__ void store_matrix_sync(float* p, const FragAcc& f, unsigned ldm, layout_t layout) {
  const int l = detail::lane(), j = l % 16, i0 = 4 * (l / 16);
  for (int e = 0; e < 4; ++e) {
    if (layout == mem_row_major) {
      p[(i0 + e) * ldm + j] = f.x[e];
    } else {
      p[j * ldm + i0 + e] = f.x[e];
    }
  }
}

// D = A B + C on the matrix cores (fp32 accumulation); the B layout only mattered for the load.
template <typename LayoutA, typename LayoutB>
__device__ __forceinline__ void mma_sync(FragAcc& d, const fragment<matrix_a, 16, 16, 16, bf16_t, LayoutA>& a,
                                         const fragment<matrix_b, 16, 16, 16, bf16_t, LayoutB>& b,
                                         const FragAcc& c) {
  d.x = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.x, b.x, c.x, 0, 0, 0);
}

}  // namespace weft::gpu::wmma

#else  // CUDA

#include <mma.h>
namespace weft::gpu {
namespace wmma = nvcuda::wmma;
}  // namespace weft::gpu

#endif
#endif  // WEFT_GPU_COMPILER
