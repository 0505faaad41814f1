#include "parallel/grid.h"

#include <fmt/format.h>

#include "core/error.h"

namespace weft {

namespace {

// The axis table: one row per axis, indexed by static_cast<int>(Axis).
struct AxisInfo {
  Axis axis;
  std::string name;
};
const std::array<AxisInfo, kNumAxes>& axis_table() {
  static const std::array<AxisInfo, kNumAxes> table = {{
      {Axis::kTp, "tp"},
      {Axis::kPp, "pp"},
      {Axis::kDp, "dp"},
  }};
  return table;
}

size_t idx(Axis a) { return static_cast<size_t>(a); }

std::string axis_list() {
  std::string out;
  for (const AxisInfo& a : axis_table()) {
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

// Parses and checks the order string; returns the axes fastest-varying first.
std::array<Axis, kNumAxes> parse_order(const std::string& order) {
  std::vector<std::string> names;
  size_t start = 0;
  for (;;) {
    const size_t dash = order.find('-', start);
    names.push_back(order.substr(start, dash == std::string::npos ? std::string::npos : dash - start));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  std::array<bool, kNumAxes> seen{};
  std::vector<Axis> axes;
  for (const std::string& n : names) {
    const AxisInfo* found = nullptr;
    for (const AxisInfo& a : axis_table()) {
      if (a.name == n) found = &a;
    }
    if (found == nullptr) throw_input("unknown axis '{}' in order '{}' (axes: {})", n, order, axis_list());
    if (seen[idx(found->axis)]) throw_input("axis '{}' appears twice in order '{}'", n, order);
    seen[idx(found->axis)] = true;
    axes.push_back(found->axis);
  }
  for (const AxisInfo& a : axis_table()) {
    if (!seen[idx(a.axis)]) {
      throw_input("order '{}' does not name axis {} (it must list each of {} once)", order, a.name, axis_list());
    }
  }
  std::array<Axis, kNumAxes> out{};
  for (int i = 0; i < kNumAxes; ++i) out[static_cast<size_t>(i)] = axes[static_cast<size_t>(i)];
  return out;
}

}  // namespace

const std::string& axis_name(Axis a) { return axis_table()[idx(a)].name; }

int GridSpec::size_of(Axis a) const {
  switch (a) {
    case Axis::kTp: return tp;
    case Axis::kPp: return pp;
    case Axis::kDp: return dp;
  }
  throw_runtime("unknown Axis {}", static_cast<int>(a));
}

std::string axis_size_error(const GridSpec& spec) {
  for (const AxisInfo& a : axis_table()) {
    const int s = spec.size_of(a.axis);
    if (s < 1) return fmt::format("{} size {} must be at least 1", a.name, s);
  }
  return {};
}

std::string world_size_error(const GridSpec& spec, int64_t world_size) {
  const int64_t product = int64_t{spec.tp} * spec.pp * spec.dp;
  if (product == world_size) return {};
  return fmt::format("world size {} does not equal tp {} x pp {} x dp {} = {}", world_size, spec.tp, spec.pp, spec.dp,
                     product);
}

std::string dp_split_error(const GridSpec& spec) {
  if (spec.dp_replicate < 1) return fmt::format("dp_replicate {} must be at least 1", spec.dp_replicate);
  if (spec.dp % spec.dp_replicate != 0) {
    return fmt::format("dp_replicate {} does not divide dp {} (dp = dp_shard x dp_replicate)", spec.dp_replicate,
                       spec.dp);
  }
  return {};
}

std::string dp_split_text(const GridSpec& spec) {
  if (spec.dp_replicate == 1) return fmt::format("dp {}", spec.dp);
  return fmt::format("dp {} = dp_shard {} x dp_replicate {}", spec.dp, spec.dp_shard(), spec.dp_replicate);
}

void validate_layout(const GridSpec& spec, int world_size) {
  if (std::string e = axis_size_error(spec); !e.empty()) throw InputError(e);
  if (std::string e = dp_split_error(spec); !e.empty()) throw InputError(e);
  parse_order(spec.order);
  if (std::string e = world_size_error(spec, world_size); !e.empty()) throw InputError(e);
}

GridLayout::GridLayout(const GridSpec& spec) : spec_(spec) {
  if (std::string e = axis_size_error(spec); !e.empty()) throw InputError(e);
  if (std::string e = dp_split_error(spec); !e.empty()) throw InputError(e);
  order_ = parse_order(spec.order);
  for (Axis a : kAllAxes) sizes_[idx(a)] = spec.size_of(a);
  int stride = 1;
  for (Axis a : order_) {
    strides_[idx(a)] = stride;
    stride *= sizes_[idx(a)];
  }
}

GridCoords GridLayout::coords_of(int world_rank) const {
  WEFT_CHECK(world_rank >= 0 && world_rank < world_size(), "world rank {} outside a grid of {}", world_rank,
             world_size());
  GridCoords c{};
  for (Axis a : kAllAxes) c[idx(a)] = (world_rank / strides_[idx(a)]) % sizes_[idx(a)];
  return c;
}

int GridLayout::world_rank_of(const GridCoords& coords) const {
  int r = 0;
  for (Axis a : kAllAxes) {
    WEFT_CHECK(coords[idx(a)] >= 0 && coords[idx(a)] < sizes_[idx(a)], "{} coordinate {} outside size {}", axis_name(a),
               coords[idx(a)], sizes_[idx(a)]);
    r += coords[idx(a)] * strides_[idx(a)];
  }
  return r;
}

std::vector<int> GridLayout::group_of(Axis a, int world_rank) const {
  GridCoords c = coords_of(world_rank);
  std::vector<int> ranks;
  for (int i = 0; i < sizes_[idx(a)]; ++i) {
    c[idx(a)] = i;
    ranks.push_back(world_rank_of(c));
  }
  return ranks;
}

int GridLayout::dp_shard_index(int world_rank) const { return coords_of(world_rank)[idx(Axis::kDp)] % dp_shard(); }

int GridLayout::dp_replicate_index(int world_rank) const {
  return coords_of(world_rank)[idx(Axis::kDp)] / dp_shard();
}

std::vector<int> GridLayout::dp_shard_group(int world_rank) const {
  GridCoords c = coords_of(world_rank);
  const int base = dp_replicate_index(world_rank) * dp_shard();
  std::vector<int> ranks;
  for (int i = 0; i < dp_shard(); ++i) {
    c[idx(Axis::kDp)] = base + i;
    ranks.push_back(world_rank_of(c));
  }
  return ranks;
}

std::vector<int> GridLayout::dp_replicate_group(int world_rank) const {
  GridCoords c = coords_of(world_rank);
  const int shard = dp_shard_index(world_rank);
  std::vector<int> ranks;
  for (int i = 0; i < dp_replicate(); ++i) {
    c[idx(Axis::kDp)] = shard + dp_shard() * i;
    ranks.push_back(world_rank_of(c));
  }
  return ranks;
}

std::string GridLayout::describe() const {
  std::string factors;
  for (Axis a : order_) factors += fmt::format("{}{} {}", factors.empty() ? "" : " x ", axis_name(a), size(a));
  if (spec_.dp_replicate == 1) return fmt::format("world {} = {} (order {})", world_size(), factors, spec_.order);
  return fmt::format("world {} = {} (order {}; {})", world_size(), factors, spec_.order, dp_split_text(spec_));
}

ProcessGrid::ProcessGrid(Communicator& world, const GridSpec& spec) : world_(&world), layout_(spec) {
  validate_layout(spec, world.size());
  coords_ = layout_.coords_of(world.rank());
  // Every rank splits the axes in the same (table) order. The color names the group by its
  // member with coordinate 0 on the axis; the key orders the group by coordinate.
  for (Axis a : kAllAxes) {
    GridCoords base = coords_;
    base[idx(a)] = 0;
    comms_[idx(a)] = world.split(layout_.world_rank_of(base), coords_[idx(a)], axis_name(a));
    WEFT_CHECK(comms_[idx(a)]->size() == layout_.size(a) && comms_[idx(a)]->rank() == coords_[idx(a)],
               "axis {} group has size {} rank {}, expected size {} rank {}", axis_name(a), comms_[idx(a)]->size(),
               comms_[idx(a)]->rank(), layout_.size(a), coords_[idx(a)]);
  }
}

void ProcessGrid::set_tracer(Tracer* tracer) {
  for (auto& c : comms_) c->set_tracer(tracer);
}

void ProcessGrid::set_timeout(std::chrono::milliseconds t) {
  for (auto& c : comms_) c->set_timeout(t);
}

std::string ProcessGrid::describe() const {
  std::string coords;
  for (Axis a : layout_.order()) {
    coords += fmt::format("{}{} {}", coords.empty() ? "" : ", ", axis_name(a), coord(a));
    if (a == Axis::kDp && layout_.dp_replicate() > 1) {
      coords += fmt::format(" (shard {}, replica {})", dp_shard_coord(), dp_replicate_coord());
    }
  }
  return fmt::format("{}; rank {}: {}", layout_.describe(), world_->rank(), coords);
}

}  // namespace weft
