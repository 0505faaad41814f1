// Symmetric absmax block quantization (ZeRO++ qwZ/qgZ, Wang et al. 2023, "ZeRO++: Extremely
// Efficient Collective Communication for Giant Model Training", sections 3.1 and 3.3): the one
// wire format of quantized weights and gradients on every backend.
//
// Wire format of one quantized piece of n elements with block size G and b bits (8 or 4):
//   data   ceil(n*b/8) bytes rounded up to a multiple of 4: element i of block k quantized as
//          q = clamp(rint(x / s_k), -qmax, qmax), qmax = 2^(b-1)-1 (127, 7), two's complement;
//          int4: element 2j in the low nibble of byte j, element 2j+1 in the high nibble (as
//          DType::kI4, core/dtype.h); the padding (an odd int4 count, the rounding to 4 bytes)
//          is zero. Element indices count over the whole piece: with an odd G an int4 byte
//          may hold the last element of one block and the first of the next.
//   scales ceil(n/G) fp32 values (little endian) s_k = absmax_k / qmax (IEEE fp32 division;
//          0 for an all-zero block), right after the data; the last block may be partial.
// Dequantize: x' = q * s_k (one fp32 product; accumulate: out + x', one fp32 sum, never fused).
// Error bound |x - x'| <= s_k / 2 = absmax/qmax/2 per element while s_k is a normal float
// (absmax >= qmax * 2^-126); below that the scale loses bits (and rounds to 0 under
// absmax ~ qmax * 2^-150, where the block dequantizes to zeros: an error under 2^-143).
//
// The exact rules, which every backend reproduces bit for bit (tests/cuda/quant_cuda_test.cc):
//   v      x (+ residual, one fp32 sum) for each element
//   absmax max |v| over the block; NaN if any v is NaN
//   s      NaN absmax: the quiet NaN 0x7fc00000 (one bit pattern, whatever the input's payload);
//          otherwise absmax / qmax (inf for a block holding an inf)
//   q      0 when s == 0; otherwise t = rint(v / s) (round half to even), 0 when t is NaN
//          (inf/inf), else t clamped to [-qmax, qmax]
// Non-finite inputs therefore make their block's scale non-finite and the block dequantizes to
// non-finite values (NaN scale: all NaN; inf scale: 0 * inf = NaN or q * inf = +-inf), which
// the loss scaler's overflow check sees; nothing is clamped silently. The residual of such a
// block becomes NaN too: a caller that skips the step on overflow resets its residual.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace weft {

struct QuantSpec {
  int bits = 8;          // 8 or 4
  int64_t block = 2048;  // elements per scale, 1 .. 1 << 24
};

// InputError naming `what` and the values unless bits is 8 or 4 and 1 <= block <= 1 << 24.
void check_quant_spec(const QuantSpec& q, const std::string& what);
// 2^(bits-1) - 1: 127 for int8, 7 for int4.
int quant_qmax(int bits);
// ceil(n / block).
int64_t quant_num_blocks(int64_t n, const QuantSpec& q);
// ceil(n * bits / 8) rounded up to a multiple of 4.
int64_t quant_data_bytes(int64_t n, const QuantSpec& q);
// data + 4 * blocks; 0 for n == 0.
int64_t quant_wire_bytes(int64_t n, const QuantSpec& q);

// Host reference (plain loops, the bytes every backend must produce). wire: quant_wire_bytes
// host bytes (no alignment needed). residual (optional, n floats): error feedback: quantizes
// x + residual and stores residual = (x + residual) - dequantized.
void quantize_blocks_ref(uint8_t* wire, const float* x, int64_t n, const QuantSpec& q, float* residual = nullptr);
// x: n 16-bit values of dt (kBF16 or kF16, the bits of core/dtype.h), widened exactly to fp32
// first; InputError for another dtype.
void quantize_blocks_ref(uint8_t* wire, const uint16_t* x, DType dt, int64_t n, const QuantSpec& q);
// out (n) = x' (writes), or out += x' when accumulate.
void dequantize_blocks_ref(float* out, const uint8_t* wire, int64_t n, const QuantSpec& q, bool accumulate);

}  // namespace weft
