#include "comm/p2p_queue.h"

#include <algorithm>

namespace weft {

uint64_t P2pQueue::post(bool is_send) {
  pending_.push_back({next_, is_send});
  return next_++;
}

bool P2pQueue::pending(uint64_t id) const {
  return std::any_of(pending_.begin(), pending_.end(), [&](const Op& o) { return o.id == id; });
}

std::vector<uint64_t> P2pQueue::start_for(uint64_t id) {
  std::vector<uint64_t> start;
  const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Op& o) { return o.id == id; });
  if (it == pending_.end()) return start;
  // Receives up to a waited receive; a waited send needs no receive.
  const bool receive = !it->is_send;
  std::deque<Op> keep;
  for (const Op& o : pending_) {
    if (o.is_send || (receive && o.id <= id)) {
      start.push_back(o.id);
    } else {
      keep.push_back(o);
    }
  }
  pending_ = std::move(keep);
  return start;
}

std::vector<uint64_t> P2pQueue::start_all() {
  std::vector<uint64_t> start;
  for (const Op& o : pending_) start.push_back(o.id);
  pending_.clear();
  return start;
}

}  // namespace weft
