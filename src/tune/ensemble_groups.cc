#include "tune/ensemble_groups.h"

#include "core/error.h"

namespace weft::tune {

std::vector<int> ensemble_group_sizes(const std::vector<double>& cost, const std::function<bool(int, int)>& fits,
                                      int world, bool equal) {
  const int K = static_cast<int>(cost.size());
  if (K < 1 || K > world) throw_input("--top {} members need at least {} ranks; this world has {}", K, K, world);
  std::vector<int> n(static_cast<size_t>(K), 1);
  if (equal) {
    if (world % K != 0) throw_input("--groups equal: {} ranks do not divide into {} equal groups", world, K);
    for (int k = 0; k < K; ++k) {
      n[static_cast<size_t>(k)] = world / K;
      if (!fits(k, world / K)) throw_input("--groups equal: member {} cannot run on {} ranks (its global batch does not divide over them)", k, world / K);
    }
    return n;
  }
  int left = world - K;
  while (left > 0) {
    int pick = -1, grow = 0;
    double latest = 0;
    for (int k = 0; k < K; ++k) {
      const int now = n[static_cast<size_t>(k)];
      int next = now + 1;
      while (next - now <= left && !fits(k, next)) ++next;
      if (next - now > left) continue;
      const double finish = cost[static_cast<size_t>(k)] / now;
      if (pick < 0 || finish > latest) pick = k, grow = next - now, latest = finish;
    }
    if (pick < 0) break;
    n[static_cast<size_t>(pick)] += grow;
    left -= grow;
  }
  return n;
}

}  // namespace weft::tune
