#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace weft {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI8: return "i8";
    case DType::kI4: return "i4";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (int i = 0; i < kDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (name == dtype_name(t)) return t;
  }
  if (name == "fp32") return DType::kF32;
  if (name == "fp16") return DType::kF16;
  throw_input("unknown dtype '{}', expected one of: f32 (fp32), bf16, f16 (fp16), i32, i8, i4", name);
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::kF32: return 32;
    case DType::kBF16: return 16;
    case DType::kF16: return 16;
    case DType::kI32: return 32;
    case DType::kI8: return 8;
    case DType::kI4: return 4;
  }
  return 0;
}

DType dtype_of(Precision p) {
  switch (p) {
    case Precision::kFp32: return DType::kF32;
    case Precision::kBf16: return DType::kBF16;
    case Precision::kFp16: return DType::kF16;
  }
  return DType::kF32;
}

Precision precision_of(DType t) {
  switch (t) {
    case DType::kF32: return Precision::kFp32;
    case DType::kBF16: return Precision::kBf16;
    case DType::kF16: return Precision::kFp16;
    default: break;
  }
  throw_input("dtype {} is not a training precision (expected f32, bf16 or f16)", dtype_name(t));
}

namespace {

// value as an integer in [lo, hi], or InputError naming the dtype.
int32_t integral_in(DType t, float value, double lo, double hi) {
  if (!(value >= lo && value <= hi) || std::trunc(value) != value) {
    throw_input("value {} does not fit dtype {} (an integer in [{}, {}])", value, dtype_name(t), lo, hi);
  }
  return static_cast<int32_t>(value);
}

}  // namespace

int encode_element(DType t, float value, uint8_t out[4]) {
  switch (t) {
    case DType::kF32:
      std::memcpy(out, &value, 4);
      return 4;
    case DType::kBF16: {
      const bf16 b = float_to_bf16(value);
      std::memcpy(out, &b.bits, 2);
      return 2;
    }
    case DType::kF16: {
#if defined(__FLT16_MAX__)  // the compiler's binary16, else the same rounding in software (core/precision.h)
      const _Float16 h = static_cast<_Float16>(value);
#else
      const uint16_t h = f32_to_f16(value);
#endif
      std::memcpy(out, &h, 2);
      return 2;
    }
    case DType::kI32: {
      const int32_t v = integral_in(t, value, -2147483648.0, 2147483520.0);  // largest float below 2^31
      std::memcpy(out, &v, 4);
      return 4;
    }
    case DType::kI8:
      out[0] = static_cast<uint8_t>(static_cast<int8_t>(integral_in(t, value, -128, 127)));
      return 1;
    case DType::kI4: {
      const uint8_t nibble = static_cast<uint8_t>(integral_in(t, value, -8, 7)) & 0x0fu;
      out[0] = static_cast<uint8_t>(nibble | (nibble << 4));
      return 1;
    }
  }
  return 0;
}

}  // namespace weft
