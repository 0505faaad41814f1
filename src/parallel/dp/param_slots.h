// ZeRO-3's policy for its gathered-parameter buffers ("slots"), in one place: DataParallel
// follows it when it gathers, and the communication model (plan/comm_model.cc) replays it to
// count the gathers a step makes. A Slot has `group` (the parameter group it holds), `valid`,
// `refs` (users of the gathered values), `pending` (a gather in flight; anything testable as
// bool) and `last_use` (a clock).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "params/param_layout.h"

namespace weft {

// The elements a transient group buffer holds (ZeRO-2/3's gradient slots, ZeRO-3's gather slots):
// slot 0 group 0's (the embedding's), every other slot the largest other group of `owned` (the
// groups this part of the model holds); 1 where there is none.
struct SlotSizes {
  int64_t group0 = 1, other = 1;
};
inline SlotSizes slot_sizes(const ParamLayout& layout, const std::vector<int>& owned) {
  SlotSizes s;
  for (int g : owned) {
    if (g == 0) continue;
    auto [b, e] = layout.group_range(g);
    s.other = std::max(s.other, e - b);
  }
  if (layout.has_group(0)) s.group0 = layout.group_range(0).second - layout.group_range(0).first;
  return s;
}

// The slot holding a valid gather of group g, or -1.
template <typename Slot>
int find_gathered_slot(const std::vector<Slot>& slots, int g) {
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].group == g && slots[s].valid) return static_cast<int>(s);
  }
  return -1;
}

// The slot a new gather of group g goes to: slot 0 is group 0's own (the embedding); the
// others take any slot from 1 on that nobody uses and no gather fills, an empty one first,
// then the least recently used. -1 when every such slot is busy.
template <typename Slot>
int choose_gather_slot(const std::vector<Slot>& slots, int g) {
  if (g == 0) return 0;
  int slot = -1;
  uint64_t best = UINT64_MAX;
  for (size_t s = 1; s < slots.size(); ++s) {
    const Slot& p = slots[s];
    if (p.refs > 0 || static_cast<bool>(p.pending)) continue;
    const uint64_t age = p.valid ? p.last_use + 1 : 0;  // empty slots first, then least recently used
    if (age < best) {
      best = age;
      slot = static_cast<int>(s);
    }
  }
  return slot;
}

}  // namespace weft
