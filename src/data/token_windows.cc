// token_windows (data/token_batch.h), apart from TokenBatch so that what links the batch alone
// (the fuzz targets' parsers) does not need the token datasets.
#include "data/loader.h"
#include "data/token_batch.h"

namespace weft {

BatchFn token_windows(const TokenDataset& data, int64_t T) {
  return [&data, T](int64_t first, int64_t count, HostBatch& out) {
    const TokenBatch::Rows r = TokenBatch::of(out).grow(count);
    for (int64_t i = 0; i < count; ++i) {
      data.window(first + i, static_cast<int>(T), r.inputs + i * T, r.targets + i * T);
    }
  };
}

}  // namespace weft
