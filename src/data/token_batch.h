// The host payload of a token model (data source "tokens"): up to `capacity` sequences of T
// token ids and their targets.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "data/batch.h"

namespace weft {

class TokenDataset;

class TokenBatch final : public HostBatch {
 public:
  TokenBatch(int64_t capacity, int64_t T);
  const char* kind() const override { return "tokens"; }
  void clear() override { n_ = 0; }
  int64_t samples() const override { return n_; }
  int64_t weight() const override { return n_ * T_; }
  int64_t fixed_weight() const override { return T_; }
  int64_t seq() const { return T_; }
  int64_t capacity() const { return capacity_; }
  // Room for `count` more sequences: their inputs and targets, (count, T) each, to be filled.
  struct Rows {
    int32_t* inputs;
    int32_t* targets;
  };
  Rows grow(int64_t count);
  const int32_t* inputs() const { return inputs_.data(); }    // (samples, T)
  const int32_t* targets() const { return targets_.data(); }  // (samples, T)

  // `b` as token rows; an error naming its kind when it holds another payload.
  static TokenBatch& of(HostBatch& b);
  static const TokenBatch& of(const HostBatch& b);

 private:
  int64_t capacity_, T_, n_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

// A source of token rows as plain buffers: rows [first, first + count) into inputs and targets
// (count, T).
using TokenBatchFn = std::function<void(int64_t first, int64_t count, int32_t* inputs, int32_t* targets)>;
// That source as a BatchFn appending to a TokenBatch.
BatchFn token_batches(TokenBatchFn rows);
// Window r of `data` (length T) as row r: the rows of a validation or evaluation pass.
BatchFn token_windows(const TokenDataset& data, int64_t T);

}  // namespace weft
