#include "core/precision.h"

#include "core/dtype.h"
#include "core/error.h"

namespace weft {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw_input("unknown precision '{}', expected one of: fp32, bf16, fp16", name);
}

MatmulMode parse_matmul_mode(const std::string& name) {
  if (name == "exact") return MatmulMode::kExact;
  if (name == "fast") return MatmulMode::kFast;
  throw_input("unknown matmul mode '{}', expected one of: exact, fast", name);
}

const char* matmul_mode_name(MatmulMode m) { return m == MatmulMode::kFast ? "fast" : "exact"; }

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

void cast_to_16_ref(uint16_t* wire, const float* x, int64_t n, DType dt) {
  WEFT_CHECK(n >= 0, "encode_16 of {} elements", n);
  if (dt == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) wire[i] = f32_to_bf16(x[i]);
  } else if (dt == DType::kF16) {
    for (int64_t i = 0; i < n; ++i) wire[i] = f32_to_f16(x[i]);
  } else {
    throw_input("encode_16: dtype {} is not a 16-bit float (bf16 or f16)", dtype_name(dt));
  }
}

void cast_from_16_ref(float* out, const uint16_t* wire, int64_t n, DType dt, bool accumulate) {
  WEFT_CHECK(n >= 0, "decode_16 of {} elements", n);
  if (dt != DType::kBF16 && dt != DType::kF16) {
    throw_input("decode_16: dtype {} is not a 16-bit float (bf16 or f16)", dtype_name(dt));
  }
  const bool bf = dt == DType::kBF16;
  for (int64_t i = 0; i < n; ++i) {
    const float v = bf ? bf16_to_f32(wire[i]) : f16_to_f32(wire[i]);
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace weft
