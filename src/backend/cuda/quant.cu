// Block quantization (core/block_quant.h's wire format): bit for bit the bytes of the host
// reference quantize_blocks_ref / dequantize_blocks_ref (tests/cuda/quant_cuda_test.cc).
//
// Quantize runs two kernels on the stream:
//   1. quant_scales_kernel: one thread block per quantization block (grid-stride over blocks):
//      |x (+ residual)| reduced with a NaN-propagating max (the order of a max does not change
//      its value, so any reduction tree gives the reference's absmax), then s = absmax / qmax
//      (IEEE division, __fdiv_rn) or the one NaN 0x7fc00000.
//   2. quant_pack_kernel: one thread per 32-bit word of the data section (4 int8 or 8 int4
//      values; the words past n are the zero padding), so that an int4 byte holding the
//      last element of one block and the first of the next (odd block sizes) has one writer.
//      It recomputes x + residual, quantizes with its block's scale and, with a residual,
//      writes residual = v - q*s.
// Dequantize: one thread per data word, out = q*s or out + q*s.
// Every fp32 operation the bytes depend on is written as its IEEE intrinsic (__fadd_rn,
// __fsub_rn, __fmul_rn, __fdiv_rn; rintf rounds half to even): nvcc never contracts them
// into an FMA, whatever --fmad says, and division stays IEEE under -prec-div=false or fast
// math. HIP spells these intrinsics as plain operators, so contraction is switched off for
// this file below (hipcc's default -ffp-contract=fast-honor-pragmas honours the pragma), and
// its fp32 division is correctly rounded by default (-fhip-fp32-correctly-rounded-divide-sqrt).
// Warps of 32 and wavefronts of 64 work alike: the reduction is block_reduce (kernel_util.cuh).
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace weft::cuda::kern {
namespace {

constexpr int kPackThreads = 256;
constexpr int kMaxScaleThreads = 256;
constexpr unsigned kScaleNaN = 0x7fc00000u;

__device__ __forceinline__ float nan_max(float a, float b) {
  return a != a ? a : (b != b ? b : fmaxf(a, b));
}
struct NanMaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return nan_max(a, b); }
};

// q of one value: 0 when s == 0 or v / s is NaN, else rint(v / s) clamped to [-qmax, qmax].
__device__ __forceinline__ int quant_one(float v, float s, float qmax) {
  if (s == 0.0f) return 0;
  float t = rintf(__fdiv_rn(v, s));
  if (t != t) return 0;
  t = fminf(fmaxf(t, -qmax), qmax);
  return static_cast<int>(t);
}

__global__ void quant_scales_kernel(float* scales, const float* x, const float* residual, int64_t n, int64_t G,
                                    int64_t nb, float qmax) {
  for (int64_t k = blockIdx.x; k < nb; k += gridDim.x) {  // uniform per thread block
    const int64_t i0 = k * G, i1 = min(n, i0 + G);
    float m = 0.0f;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
      const float v = residual ? __fadd_rn(x[i], residual[i]) : x[i];
      m = nan_max(m, fabsf(v));
    }
    m = block_reduce(m, NanMaxOp{}, 0.0f);
    if (threadIdx.x == 0) scales[k] = m != m ? __uint_as_float(kScaleNaN) : __fdiv_rn(m, qmax);
  }
}

// Word w holds elements [w*E, w*E + E), E = 32 / BITS, element j of the word in bits
// [j*BITS, (j+1)*BITS) (little endian: int8 element j in byte j; int4 elements 2j, 2j+1 in
// the low and high nibble of byte j).
template <int BITS>
__global__ void quant_pack_kernel(uint32_t* data, const float* scales, const float* x, float* residual, int64_t n,
                                  int64_t G, int64_t words, float qmax) {
  constexpr int E = 32 / BITS;
  constexpr uint32_t mask = (1u << BITS) - 1u;
  for (int64_t w = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; w < words; w += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e0 = w * E;
    int64_t k = e0 / G, next = (k + 1) * G;  // the block of element e and where the next starts
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const int64_t e = e0 + j;
      if (e < n) {
        while (e >= next) {
          ++k;
          next += G;
        }
        const float v = residual ? __fadd_rn(x[e], residual[e]) : x[e];
        const float s = scales[k];
        const int q = quant_one(v, s, qmax);
        word |= (static_cast<uint32_t>(q) & mask) << (j * BITS);
        if (residual) residual[e] = __fsub_rn(v, __fmul_rn(static_cast<float>(q), s));
      }
    }
    data[w] = word;
  }
}

template <int BITS>
__global__ void dequant_kernel(float* out, const uint32_t* data, const float* scales, int64_t n, int64_t G,
                               int64_t words, bool accumulate) {
  constexpr int E = 32 / BITS;
  constexpr uint32_t mask = (1u << BITS) - 1u;
  constexpr uint32_t sign = 1u << (BITS - 1);
  for (int64_t w = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; w < words; w += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e0 = w * E;
    int64_t k = e0 / G, next = (k + 1) * G;
    const uint32_t word = data[w];
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const int64_t e = e0 + j;
      if (e < n) {
        while (e >= next) {
          ++k;
          next += G;
        }
        const uint32_t u = (word >> (j * BITS)) & mask;
        const int q = static_cast<int>(u) - ((u & sign) ? static_cast<int>(mask) + 1 : 0);  // two's complement
        const float d = __fmul_rn(static_cast<float>(q), scales[k]);
        out[e] = accumulate ? __fadd_rn(out[e], d) : d;
      }
    }
  }
}

}  // namespace

void quantize_blocks(uint8_t* wire, const float* x, float* residual, int64_t n, int bits, int64_t block,
                     int64_t data_bytes, Stream s) {
  if (n == 0) return;
  const int64_t nb = (n + block - 1) / block, words = data_bytes / 4;
  const float qmax = static_cast<float>((1 << (bits - 1)) - 1);
  float* scales = reinterpret_cast<float*>(wire + data_bytes);
  // Threads per quantization block: the block size rounded up to whole warps, at most 256.
  int64_t st = (block + gpu::kWarpSize - 1) / gpu::kWarpSize * gpu::kWarpSize;
  if (st > kMaxScaleThreads) st = kMaxScaleThreads;
  const unsigned sgrid = static_cast<unsigned>(nb < 65536 ? nb : 65536);
  quant_scales_kernel<<<sgrid, static_cast<unsigned>(st), 0, s>>>(scales, x, residual, n, block, nb, qmax);
  WEFT_KERNEL_CHECK("quant_scales_kernel");
  uint32_t* data = reinterpret_cast<uint32_t*>(wire);
  if (bits == 8) {
    quant_pack_kernel<8><<<grid_for(words, kPackThreads), kPackThreads, 0, s>>>(data, scales, x, residual, n, block,
                                                                               words, qmax);
  } else {
    quant_pack_kernel<4><<<grid_for(words, kPackThreads), kPackThreads, 0, s>>>(data, scales, x, residual, n, block,
                                                                               words, qmax);
  }
  WEFT_KERNEL_CHECK("quant_pack_kernel");
}

void dequantize_blocks(float* out, const uint8_t* wire, int64_t n, int bits, int64_t block, int64_t data_bytes,
                       bool accumulate, Stream s) {
  if (n == 0) return;
  const int64_t words = data_bytes / 4;
  const float* scales = reinterpret_cast<const float*>(wire + data_bytes);
  const uint32_t* data = reinterpret_cast<const uint32_t*>(wire);
  if (bits == 8) {
    dequant_kernel<8><<<grid_for(words, kPackThreads), kPackThreads, 0, s>>>(out, data, scales, n, block, words,
                                                                            accumulate);
  } else {
    dequant_kernel<4><<<grid_for(words, kPackThreads), kPackThreads, 0, s>>>(out, data, scales, n, block, words,
                                                                            accumulate);
  }
  WEFT_KERNEL_CHECK("dequant_kernel");
}

}  // namespace weft::cuda::kern
