// How ZeRO cuts the flat parameter buffer (n elements) over the P ranks of its group
// (DataParallel's dp_shard group): contiguous shards of S = ceil(n / P) elements, rank r owning
// [min(n, r S), min(n, (r + 1) S)). The store, its ZeRO-3 gathers and its reductions all count
// element ranges with it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace weft {

struct FlatShards {
  int64_t n = 0;      // elements of the flat buffer
  int64_t shard = 0;  // S
  int ranks = 1;      // P
  int rank = 0;       // this rank's index in the group

  FlatShards() = default;
  FlatShards(int64_t n_elems, int p, int me) : n(n_elems), shard((n_elems + p - 1) / p), ranks(p), rank(me) {}
  int64_t begin_of(int r) const { return std::min(n, r * shard); }
  int64_t end_of(int r) const { return std::min(n, (r + 1) * shard); }
  int64_t begin() const { return begin_of(rank); }
  int64_t end() const { return end_of(rank); }
  // counts[r] = elements of [b, e) that rank r owns.
  std::vector<int64_t> counts(int64_t b, int64_t e) const {
    std::vector<int64_t> c(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      c[static_cast<size_t>(r)] = std::max<int64_t>(0, std::min(e, end_of(r)) - std::max(b, begin_of(r)));
    }
    return c;
  }
  // Where [b, e) starts inside this rank's shard (its first owned element, or the shard's end).
  int64_t offset_in_shard(int64_t b) const { return std::clamp(b, begin(), end()) - begin(); }
};

}  // namespace weft
