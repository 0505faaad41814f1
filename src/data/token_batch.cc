#include "data/token_batch.h"

#include <utility>

#include "core/error.h"

namespace weft {

TokenBatch::TokenBatch(int64_t capacity, int64_t T)
    : capacity_(capacity), T_(T), inputs_(static_cast<size_t>(capacity * T)), targets_(inputs_.size()) {
  WEFT_CHECK(capacity > 0 && T > 0, "TokenBatch of {} sequences of {} tokens", capacity, T);
}

TokenBatch::Rows TokenBatch::grow(int64_t count) {
  WEFT_CHECK(count >= 0 && n_ + count <= capacity_, "TokenBatch: {} more sequences after {} exceed its capacity of {}",
             count, n_, capacity_);
  const auto at = static_cast<size_t>(n_ * T_);
  n_ += count;
  return {inputs_.data() + at, targets_.data() + at};
}

void refuse_batch_kind(const HostBatch& b, const char* wanted) {
  throw_input("a source of {} was given a batch of {}", wanted, b.kind());
}

TokenBatch& TokenBatch::of(HostBatch& b) { return batch_as<TokenBatch>(b, "tokens"); }

const TokenBatch& TokenBatch::of(const HostBatch& b) { return batch_as<TokenBatch>(b, "tokens"); }

BatchFn token_batches(TokenBatchFn rows) {
  return [rows = std::move(rows)](int64_t first, int64_t count, HostBatch& out) {
    const TokenBatch::Rows r = TokenBatch::of(out).grow(count);
    rows(first, count, r.inputs, r.targets);
  };
}

}  // namespace weft
