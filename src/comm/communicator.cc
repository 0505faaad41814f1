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

}  // namespace weft
