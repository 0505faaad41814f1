// The host reference of block quantization (block_quant.h). Compiled with -ffp-contract=off
// (CMakeLists.txt): the products q * s must not fuse into the sums around them (residual
// v - q*s, accumulate out + q*s), or the bytes would differ from the GPU kernels', which
// spell every operation with its IEEE intrinsic.
#include "core/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace weft {

namespace {

constexpr uint32_t kScaleNaN = 0x7fc00000u;  // the one NaN a scale takes

// One block's scale from the values v (len of them): block_quant.h's rules.
float block_scale(const float* v, int64_t len, int qmax) {
  float m = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < len; ++i) {
    const float a = std::fabs(v[i]);
    nan |= a != a;
    m = a > m ? a : m;
  }
  if (nan) {
    float s;
    std::memcpy(&s, &kScaleNaN, 4);
    return s;
  }
  return m / static_cast<float>(qmax);
}

// q of one value: 0 when s == 0 or v / s is NaN, else rint(v / s) clamped to [-qmax, qmax].
inline int quant_one(float v, float s, float qmax) {
  if (s == 0.0f) return 0;
  float t = std::rint(v / s);
  if (t != t) return 0;
  t = t < -qmax ? -qmax : t;
  t = t > qmax ? qmax : t;
  return static_cast<int>(t);
}

}  // namespace

void check_quant_spec(const QuantSpec& q, const std::string& what) {
  if ((q.bits != 8 && q.bits != 4) || q.block < 1 || q.block > (int64_t{1} << 24)) {
    throw_input("{}: quantization with {} bits and block {}: expected bits 8 or 4 and a block of 1 to {} elements",
                what, q.bits, q.block, int64_t{1} << 24);
  }
}

int quant_qmax(int bits) { return (1 << (bits - 1)) - 1; }

int64_t quant_num_blocks(int64_t n, const QuantSpec& q) { return (n + q.block - 1) / q.block; }

int64_t quant_data_bytes(int64_t n, const QuantSpec& q) {
  const int64_t bytes = (n * q.bits + 7) / 8;
  return (bytes + 3) / 4 * 4;
}

int64_t quant_wire_bytes(int64_t n, const QuantSpec& q) {
  return n == 0 ? 0 : quant_data_bytes(n, q) + 4 * quant_num_blocks(n, q);
}

void quantize_blocks_ref(uint8_t* wire, const float* x, int64_t n, const QuantSpec& q, float* residual) {
  check_quant_spec(q, "quantize_blocks");
  WEFT_CHECK(n >= 0, "quantize_blocks of {} elements", n);
  if (n == 0) return;
  const int qmax = quant_qmax(q.bits);
  const float fq = static_cast<float>(qmax);
  const int64_t data_bytes = quant_data_bytes(n, q), nb = quant_num_blocks(n, q);
  uint8_t* data = wire;
  uint8_t* scales = wire + data_bytes;
  if (q.bits == 4) std::memset(data, 0, static_cast<size_t>(data_bytes));  // nibbles are OR-ed in
  else std::memset(data + n, 0, static_cast<size_t>(data_bytes - n));      // the padding
  std::vector<float> v;  // x + residual of one block
  for (int64_t k = 0; k < nb; ++k) {
    const int64_t i0 = k * q.block, len = std::min(q.block, n - i0);
    const float* xv = x + i0;
    if (residual) {
      v.resize(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) v[i] = x[i0 + i] + residual[i0 + i];
      xv = v.data();
    }
    const float s = block_scale(xv, len, qmax);
    std::memcpy(scales + 4 * k, &s, 4);
    if (q.bits == 8) {
      for (int64_t i = 0; i < len; ++i) data[i0 + i] = static_cast<uint8_t>(static_cast<int8_t>(quant_one(xv[i], s, fq)));
    } else {
      for (int64_t i = 0; i < len; ++i) {
        const int64_t e = i0 + i;
        const uint8_t nib = static_cast<uint8_t>(quant_one(xv[i], s, fq) & 0xf);
        data[e >> 1] |= static_cast<uint8_t>(nib << ((e & 1) * 4));
      }
    }
    if (residual) {
      for (int64_t i = 0; i < len; ++i) {
        const float d = static_cast<float>(quant_one(xv[i], s, fq)) * s;
        residual[i0 + i] = xv[i] - d;
      }
    }
  }
}

void quantize_blocks_ref(uint8_t* wire, const uint16_t* x, DType dt, int64_t n, const QuantSpec& q) {
  if (dt != DType::kBF16 && dt != DType::kF16) {
    throw_input("quantize_blocks: 16-bit input of dtype {} (expected bf16 or f16)", dtype_name(dt));
  }
  WEFT_CHECK(n >= 0, "quantize_blocks of {} elements", n);
  std::vector<float> wide(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) wide[i] = dt == DType::kBF16 ? bf16_to_float(bf16{x[i]}) : f16_to_f32(x[i]);
  quantize_blocks_ref(wire, wide.data(), n, q, nullptr);
}

void dequantize_blocks_ref(float* out, const uint8_t* wire, int64_t n, const QuantSpec& q, bool accumulate) {
  check_quant_spec(q, "dequantize_blocks");
  WEFT_CHECK(n >= 0, "dequantize_blocks of {} elements", n);
  if (n == 0) return;
  const int64_t data_bytes = quant_data_bytes(n, q), nb = quant_num_blocks(n, q);
  const uint8_t* data = wire;
  for (int64_t k = 0; k < nb; ++k) {
    const int64_t i0 = k * q.block, len = std::min(q.block, n - i0);
    float s;
    std::memcpy(&s, wire + data_bytes + 4 * k, 4);
    for (int64_t i = 0; i < len; ++i) {
      const int64_t e = i0 + i;
      int qv;
      if (q.bits == 8) {
        qv = static_cast<int8_t>(data[e]);
      } else {
        const uint8_t byte = data[e >> 1];
        const uint8_t nib = (e & 1) ? byte >> 4 : byte & 0xf;
        qv = nib >= 8 ? nib - 16 : nib;  // two's complement nibble
      }
      const float d = static_cast<float>(qv) * s;
      out[e] = accumulate ? out[e] + d : d;
    }
  }
}

}  // namespace weft
