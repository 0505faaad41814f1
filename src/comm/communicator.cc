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
  }
  throw_runtime("comm_dtype_size: unknown CommDType {}", static_cast<int>(t));
}

}  // namespace weft
