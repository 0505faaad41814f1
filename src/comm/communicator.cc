#include "comm/communicator.h"

#include "core/error.h"

namespace weft {

size_t comm_dtype_size(CommDType t) {
  switch (t) {
    case CommDType::kF32: return 4;
    case CommDType::kF64: return 8;
    case CommDType::kI32: return 4;
    case CommDType::kI64: return 8;
    case CommDType::kU8: return 1;
    case CommDType::kBF16: return 2;
    case CommDType::kF16: return 2;
  }
  throw_runtime("comm_dtype_size: unknown CommDType {}", static_cast<int>(t));
}

const char* comm_dtype_name(CommDType t) {
  switch (t) {
    case CommDType::kF32: return "f32";
    case CommDType::kF64: return "f64";
    case CommDType::kI32: return "i32";
    case CommDType::kI64: return "i64";
    case CommDType::kU8: return "u8";
    case CommDType::kBF16: return "bf16";
    case CommDType::kF16: return "f16";
  }
  throw_runtime("comm_dtype_name: unknown CommDType {}", static_cast<int>(t));
}

CommDType comm_dtype_of(DType t) {
  switch (t) {
    case DType::kF32: return CommDType::kF32;
    case DType::kBF16: return CommDType::kBF16;
    case DType::kF16: return CommDType::kF16;
    default: break;
  }
  throw_input("no wire type for a {} tensor (f32, bf16 and f16 only)", dtype_name(t));
}

DType float_dtype_of(CommDType t) {
  switch (t) {
    case CommDType::kF32: return DType::kF32;
    case CommDType::kBF16: return DType::kBF16;
    case CommDType::kF16: return DType::kF16;
    default: break;
  }
  throw_input("no float tensor dtype for a {} wire type (f32, bf16 and f16 only)", comm_dtype_name(t));
}

}  // namespace weft
