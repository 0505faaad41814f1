// The process grid: world ranks arranged on named axes (tp, pp, dp; cp later), one
// communicator per axis. Built once from the world communicator and passed explicitly; there
// is no global parallel state.
//
// Rank layout. The order string lists the axes from fastest- to slowest-varying across
// consecutive world ranks. The default "tp-dp-pp" (Megatron's) puts tp innermost, so a
// tensor-parallel group is a run of consecutive ranks (one node), then dp, then pp:
//   world_rank = c[o0] + s[o0] * (c[o1] + s[o1] * c[o2])      o = the axes in order
// e.g. tp 2 x dp 2 x pp 2: rank 5 = tp 1 + 2 * (dp 0 + 2 * pp 1).
// An axis group is the set of ranks whose coordinates differ only on that axis; its ranks
// are ordered by their coordinate on the axis (group rank == coordinate).
//
// Hybrid sharded data parallelism (HSDP, Hybrid-STOP's dp split): the dp axis of dp ranks is
// itself dp_shard x dp_replicate, dp_shard varying fastest inside it:
//   dp rank = shard + dp_shard * replica
// so a dp_shard group (ZeRO's sharding group) is a run of consecutive dp ranks and a
// dp_replicate group (the replicas of one shard) is dp_shard dp ranks apart. With the default
// order "tp-dp-pp" that is ORBIT's order, tp innermost, then dp_shard, then dp_replicate:
//   world rank = tp + tp_size * (shard + dp_shard * replica)      (pp 1)
// The data order and everything else keyed by dp rank do not see the split; only the
// data-parallel store (parallel/dp/data_parallel.h) does, and splits its dp communicator into
// the two groups itself. dp_replicate 1 (the default) is plain dp: dp_shard = dp.
//
// Adding an axis (cp): a value in Axis, a row in the table in grid.cc, a field in GridSpec
// (and its case in GridSpec::size_of) and a rule in parallel/layout_rules.h if it constrains
// the model.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"

namespace weft {

class Tracer;

enum class Axis { kTp = 0, kPp = 1, kDp = 2 };
constexpr int kNumAxes = 3;
constexpr std::array<Axis, kNumAxes> kAllAxes = {Axis::kTp, Axis::kPp, Axis::kDp};

// "tp", "pp", "dp".
const std::string& axis_name(Axis a);
// Coordinates (or sizes) indexed by static_cast<int>(Axis).
using GridCoords = std::array<int, kNumAxes>;

struct GridSpec {
  int tp = 1, pp = 1, dp = 1;
  std::string order = "tp-dp-pp";  // fastest-varying axis first
  int dp_replicate = 1;            // HSDP: replicas of the dp_shard groups (1: plain dp)

  int size_of(Axis a) const;
  int world_size() const { return tp * pp * dp; }
  // dp / dp_replicate (valid once dp_split_error passes).
  int dp_shard() const { return dp_replicate > 0 ? dp / dp_replicate : dp; }
};

// "dp 4 = dp_shard 2 x dp_replicate 2", or "dp 4" when dp_replicate is 1.
std::string dp_split_text(const GridSpec& spec);

// What the grid itself needs, non-throwing ("" when fine), for the layout rules
// (parallel/layout_rules.h), which hold every other check of a layout:
//   "tp size 0 must be at least 1"
std::string axis_size_error(const GridSpec& spec);
//   "world size 6 does not equal tp 2 x pp 2 x dp 2 = 8"
std::string world_size_error(const GridSpec& spec, int64_t world_size);
// The dp split (dp >= 1 assumed):
//   "dp_replicate 0 must be at least 1"
//   "dp_replicate 3 does not divide dp 4 (dp = dp_shard x dp_replicate)"
std::string dp_split_error(const GridSpec& spec);

// The grid's checks: sizes, the dp split, rank order and the world product. Throws InputError naming the
// numbers (the two above, and for the order):
//   "unknown axis 'xp' in order 'tp-xp-pp' (axes: tp, pp, dp)"
//   "axis 'tp' appears twice in order 'tp-tp-pp'"
//   "order 'tp-dp' does not name axis pp (it must list each of tp, pp, dp once)"
// What the model and the batch require of a layout (heads % tp, layers, batch) is checked by
// the layout rules, not here.
void validate_layout(const GridSpec& spec, int world_size);

// The arithmetic of a validated layout, without communicators (the planner and the tests
// use it on its own).
class GridLayout {
 public:
  explicit GridLayout(const GridSpec& spec);  // validates sizes and order (not a world size)

  const GridSpec& spec() const { return spec_; }
  int world_size() const { return spec_.world_size(); }
  int size(Axis a) const { return sizes_[static_cast<size_t>(a)]; }
  // Axes from fastest- to slowest-varying.
  const std::array<Axis, kNumAxes>& order() const { return order_; }

  GridCoords coords_of(int world_rank) const;
  int world_rank_of(const GridCoords& coords) const;
  // World ranks of the `a` group that `world_rank` belongs to, in group-rank order.
  std::vector<int> group_of(Axis a, int world_rank) const;
  // HSDP: the sizes of the dp split, a rank's shard index (its rank in its dp_shard group) and
  // replica index (its rank in its dp_replicate group), and the world ranks of those groups
  // in group-rank order. With dp_replicate 1 the dp_shard group is the dp group.
  int dp_shard() const { return spec_.dp_shard(); }
  int dp_replicate() const { return spec_.dp_replicate; }
  int dp_shard_index(int world_rank) const;
  int dp_replicate_index(int world_rank) const;
  std::vector<int> dp_shard_group(int world_rank) const;
  std::vector<int> dp_replicate_group(int world_rank) const;
  // "world 8 = tp 2 x dp 2 x pp 2 (order tp-dp-pp)";
  // "world 8 = tp 2 x dp 4 x pp 1 (order tp-dp-pp; dp 4 = dp_shard 2 x dp_replicate 2)"
  std::string describe() const;

 private:
  GridSpec spec_;
  GridCoords sizes_{};
  GridCoords strides_{};  // world-rank step of one coordinate step on each axis
  std::array<Axis, kNumAxes> order_{};
};

class ProcessGrid {
 public:
  // Validates the spec against world.size() and builds one communicator per axis with
  // world.split() (collective: every rank of `world` constructs the grid with the same spec).
  // The axis communicators inherit world's timeout and tracer. `world` must outlive the grid.
  ProcessGrid(Communicator& world, const GridSpec& spec);

  const GridLayout& layout() const { return layout_; }
  int size(Axis a) const { return layout_.size(a); }
  int coord(Axis a) const { return coords_[static_cast<size_t>(a)]; }
  const GridCoords& coords() const { return coords_; }
  Communicator& comm(Axis a) { return *comms_[static_cast<size_t>(a)]; }
  Communicator& world() { return *world_; }
  int world_rank() const { return world_->rank(); }

  int world_rank_of(const GridCoords& coords) const { return layout_.world_rank_of(coords); }
  GridCoords coords_of(int world_rank) const { return layout_.coords_of(world_rank); }
  // HSDP: this rank's index in its dp_shard group and in its dp_replicate group.
  int dp_shard_coord() const { return coord(Axis::kDp) % layout_.dp_shard(); }
  int dp_replicate_coord() const { return coord(Axis::kDp) / layout_.dp_shard(); }

  // Applies to every axis communicator (not to world, which belongs to the caller).
  void set_tracer(Tracer* tracer);
  void set_timeout(std::chrono::milliseconds t);

  // "world 8 = tp 2 x dp 2 x pp 2 (order tp-dp-pp); rank 5: tp 1, dp 0, pp 1"
  // (HSDP adds the rank's dp_shard and dp_replicate indices: "dp 3 (shard 1, replica 1)").
  std::string describe() const;

 private:
  Communicator* world_;
  GridLayout layout_;
  GridCoords coords_{};
  std::array<std::unique_ptr<Communicator>, kNumAxes> comms_;
};

}  // namespace weft
