// ZeRO 0/1's gradient buckets, in one place: DataParallel reduces them and the communication model
// (plan/comm_model.cc) counts them. The parameter groups a part of the model holds, taken in the
// order backward completes them (L+1, L, ..., 1, 0; adjacent in the flat buffer), are packed into
// buckets of at least `bucket_bytes` of fp32 gradients; the embedding group (0) is a bucket of its
// own (it is reduced early, or at the end of the step when tied), so the bucket before it closes
// there, and the last group closes the last bucket.
#pragma once
#include <cstdint>
#include <vector>

#include "params/param_layout.h"

namespace weft {

// The groups `layout` holds, in backward order (L+1 ... 0).
inline std::vector<int> groups_in_backward_order(const ParamLayout& layout) {
  std::vector<int> owned;
  for (int g = layout.num_groups() - 1; g >= 0; --g) {
    if (layout.has_group(g)) owned.push_back(g);
  }
  return owned;
}

struct GradBucket {
  int64_t begin = 0, end = 0;  // its element range of the flat buffer
  std::vector<int> groups;     // in backward order
};

inline std::vector<GradBucket> gradient_buckets(const ParamLayout& layout, int64_t bucket_bytes) {
  const std::vector<int> owned = groups_in_backward_order(layout);
  std::vector<GradBucket> out;
  GradBucket cur;
  for (size_t i = 0; i < owned.size(); ++i) {
    const int g = owned[i];
    auto [b, e] = layout.group_range(g);
    if (cur.groups.empty()) cur.end = e;
    cur.begin = b;
    cur.groups.push_back(g);
    const bool before_embedding = i + 1 < owned.size() && owned[i + 1] == 0;
    if ((cur.end - cur.begin) * 4 >= bucket_bytes || g == 0 || before_embedding || i + 1 == owned.size()) {
      out.push_back(cur);
      cur = GradBucket{};
    }
  }
  return out;
}

}  // namespace weft
