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

FieldBatch& FieldBatch::of(HostBatch& b) {
  auto* f = dynamic_cast<FieldBatch*>(&b);
  if (f == nullptr) throw_input("a field source was given a batch of {}, not fields", b.kind());
  return *f;
}

const FieldBatch& FieldBatch::of(const HostBatch& b) { return of(const_cast<HostBatch&>(b)); }

}  // namespace weft
