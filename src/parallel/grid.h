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

  int size_of(Axis a) const;
  int world_size() const { return tp * pp * dp; }
};

// What the grid itself needs, non-throwing ("" when fine), for the layout rules
// (parallel/layout_rules.h), which hold every other check of a layout:
//   "tp size 0 must be at least 1"
std::string axis_size_error(const GridSpec& spec);
//   "world size 6 does not equal tp 2 x pp 2 x dp 2 = 8"
std::string world_size_error(const GridSpec& spec, int64_t world_size);

// The grid's checks: sizes, rank order and the world product. Throws InputError naming the
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
  // "world 8 = tp 2 x dp 2 x pp 2 (order tp-dp-pp)"
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

  // Applies to every axis communicator (not to world, which belongs to the caller).
  void set_tracer(Tracer* tracer);
  void set_timeout(std::chrono::milliseconds t);

  // "world 8 = tp 2 x dp 2 x pp 2 (order tp-dp-pp); rank 5: tp 1, dp 0, pp 1"
  std::string describe() const;

 private:
  Communicator* world_;
  GridLayout layout_;
  GridCoords coords_{};
  std::array<std::unique_ptr<Communicator>, kNumAxes> comms_;
};

}  // namespace weft
