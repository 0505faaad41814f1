#include "data/field_batch.h"

#include "core/error.h"

namespace weft {

FieldBatch::FieldBatch(int64_t capacity, int64_t elems, int64_t positions)
    : capacity_(capacity),
      elems_(elems),
      positions_(positions),
      fields_(static_cast<size_t>(capacity * elems)),
      targets_(fields_.size()),
      lead_(static_cast<size_t>(capacity)) {
  WEFT_CHECK(capacity > 0 && elems > 0 && positions > 0, "FieldBatch of {} samples of {} values, {} positions",
             capacity, elems, positions);
}

FieldBatch::Rows FieldBatch::grow(int64_t count) {
  WEFT_CHECK(count >= 0 && n_ + count <= capacity_, "FieldBatch: {} more samples after {} exceed its capacity of {}",
             count, n_, capacity_);
  const auto at = static_cast<size_t>(n_ * elems_);
  float* lead = lead_.data() + n_;
  n_ += count;
  return {fields_.data() + at, targets_.data() + at, lead};
}

FieldBatch& FieldBatch::of(HostBatch& b) { return batch_as<FieldBatch>(b, "fields"); }

const FieldBatch& FieldBatch::of(const HostBatch& b) { return batch_as<FieldBatch>(b, "fields"); }

}  // namespace weft
