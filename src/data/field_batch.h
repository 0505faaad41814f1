// The host payload of a gridded-field model (data source "fields", ClimaX): up to `capacity`
// samples of `elems` floats at the input time and as many at the target time (V H W, normalised),
// with their lead times in hours. Each sample weighs `positions` (its patches).
#pragma once
#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace weft {

class FieldBatch final : public HostBatch {
 public:
  FieldBatch(int64_t capacity, int64_t elems, int64_t positions);
  const char* kind() const override { return "fields"; }
  void clear() override { n_ = 0; }
  int64_t samples() const override { return n_; }
  int64_t weight() const override { return n_ * positions_; }
  int64_t fixed_weight() const override { return positions_; }
  int64_t elems() const { return elems_; }
  int64_t capacity() const { return capacity_; }
  // Room for `count` more samples: fields and target fields (count, elems), lead hours (count).
  struct Rows {
    float* fields;
    float* target_fields;
    float* lead_hours;
  };
  Rows grow(int64_t count);
  const float* fields() const { return fields_.data(); }
  const float* target_fields() const { return targets_.data(); }
  const float* lead_hours() const { return lead_.data(); }

  // `b` as field samples; an error naming its kind when it holds another payload.
  static FieldBatch& of(HostBatch& b);
  static const FieldBatch& of(const HostBatch& b);

 private:
  int64_t capacity_, elems_, positions_, n_ = 0;
  std::vector<float> fields_, targets_, lead_;
};

}  // namespace weft
