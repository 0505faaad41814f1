// How `weft ensemble` shares a world's ranks among its members (apps/ensemble_cmd.cc): each
// member trains on its own group of ranks (its data-parallel group), concurrently with the others.
#pragma once
#include <functional>
#include <vector>

namespace weft::tune {

// Ranks per member. Equal (HydraGNN's way): world / K each (InputError naming the values when K
// does not divide the world or a member cannot run on that many). By cost (predicted work, any
// positive unit): one rank each, then every further rank goes to the member whose predicted
// finish (cost / ranks) is latest and that can grow (`fits(member, ranks)`: the next size its
// batch divides over, within the ranks left), so that the members finish together; ranks no
// member can take stay out (the sizes may sum to less than the world). InputError for more
// members than ranks.
std::vector<int> ensemble_group_sizes(const std::vector<double>& cost, const std::function<bool(int, int)>& fits,
                                      int world, bool equal);

}  // namespace weft::tune
