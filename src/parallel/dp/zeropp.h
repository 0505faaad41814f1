// ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant
// Model Training"; DeepSpeed's zero_quantized_weights, zero_hpz_partition_size,
// zero_quantized_gradients) and the hierarchical partitioning of Xu et al. 2025 ("Scaling
// Large Language Model Training on Frontier with Low-Bandwidth Partitioning"), on top of
// ZeRO-3: the settings, the data-parallel group's levels, and the arithmetic of the gradient
// hops. The mechanisms live in DataParallel (parallel/dp/data_parallel.h) and
// QuantizedReduceScatter (parallel/dp/qgz.h); docs/zeropp.md says which collective runs on
// which level and why.
//
// Levels. The data-parallel group of P ranks is seen as nested domains: `levels` lists the
// data-parallel ranks of one domain at each level below the whole group, innermost first,
// each dividing the next and P, e.g. {2, 8} on Frontier (the two GCDs of one MI250X inside a
// node of 8) or {8} on a DGX. A domain is a run of consecutive data-parallel ranks (with tp
// innermost, consecutive data-parallel ranks sit on neighbouring devices):
//   domain of dp rank r at level k = r / levels[k].
#pragma once
#include <string>
#include <vector>

#include "comm/topology.h"
#include "core/block_quant.h"
#include "core/dtype.h"
#include "parallel/grid.h"

namespace weft {

struct ZeroPPConfig {
  bool quantized_weights = false;    // qwZ: gathers carry `weights`-quantized blocks
  int hpz = 1;                       // hpZ: ranks holding the secondary partition (1: off)
  bool quantized_gradients = false;  // qgZ: one all-to-all hop per level, `gradients`-quantized
  std::vector<int> levels;           // data-parallel ranks per domain, innermost first (below the whole group)
  std::vector<std::string> level_names;  // one per level ("pair", "node"); the whole group is "net"
  QuantSpec weights{8, 2048};
  QuantSpec gradients{4, 2048};
  bool error_feedback = false;  // qgZ: residual of the first hop's quantization, per rank
  std::vector<std::string> notes;  // what resolve_zeropp found a user should know (logged at start)

  bool active() const { return quantized_weights || hpz > 1 || quantized_gradients; }
  // "qwZ int8 + hpZ 2 + qgZ int4 (levels pair 2, node 4, net 8)"
  std::string describe(int dp) const;
};

// The hops of the quantized gradient reduce-scatter for data-parallel rank r of P: hop k runs
// over the ranks of r's level-k domain that share r's position inside its level-(k-1) domain
// (size levels[k] / levels[k-1]; levels[-1] = 1, the whole group last). After hop k, rank r
// holds, summed over its level-k domain, the chunks of the ranks q with q % levels[k] ==
// r % levels[k]; after the last hop, its own chunk summed over every rank.
struct GradHop {
  int color = 0;   // the hop group's colour for Communicator::split (the same for its members)
  int size = 1;    // ranks in the hop group
  int index = 0;   // r's rank in it
  int inner = 1;   // levels[k-1]: chunks q travel with q % inner fixed
  int outer = 1;   // levels[k]
};
std::vector<GradHop> grad_hops(int dp_rank, int dp, const std::vector<int>& levels);
// The chunks (data-parallel ranks q, ascending) that rank r holds before hop k (all of them
// before hop 0) and, of those, the ones it sends to member m of the hop group.
std::vector<int> chunks_before_hop(int dp_rank, int dp, const std::vector<int>& levels, int k);
std::vector<int> chunks_to_member(int dp_rank, int dp, const std::vector<int>& levels, int k, int m);

// The data-parallel ranks that share one node, for data-parallel group `dp_group` (world ranks
// in group order) under `nodes`: 0 when the group's ranks do not split into runs of equal
// size, one run per node.
int dp_peers_per_node(const std::vector<int>& dp_group, const NodeMap& nodes);

// What ZeRO++ adds to one rank's ZeRO-3 store (DataParallel + QuantizedReduceScatter allocate
// exactly these; the planner's weft_memory predicts with it). groups: the store's [b, e)
// ranges, group 0 (the embedding, its own gather slot) first; n: the flat size; slots: the
// gather slots (DataParallel::param_slots). Traced runs add a scratch buffer to measure the
// quantization error (not counted here).
struct ZeroPPBuffers {
  int64_t hpz_elems = 0;  // params: the secondary partition
  std::vector<std::pair<int64_t, int64_t>> qwz_slot_wires;  // comm: per gather slot, send and receive bytes
  // comm: qwZ of 16-bit parameters, the fp32 staging of the largest rank's piece of a group
  // (the quantizer reads and the dequantizer writes fp32); 0 for fp32 parameters.
  int64_t qwz_stage_elems = 0;
  int64_t qgz_group_elems = 0;  // comm: floats of each of qgZ's staging and two partial-sum buffers
  int64_t qgz_send_bytes = 0, qgz_recv_bytes = 0;  // comm: qgZ's hop wires
  int64_t residual_elems = 0;   // grads: error feedback
  // Everything above counted under comm, in bytes.
  int64_t comm_bytes() const;
};
// param_dtype: the working parameters' storage (DataParallelConfig::param_dtype).
ZeroPPBuffers zeropp_buffers(const ZeroPPConfig& z, const std::vector<std::pair<int64_t, int64_t>>& groups, int64_t n,
                             int dp_rank, int dp, int slots, bool training, DType param_dtype = DType::kF32);

// The data-parallel ranks per node common to every dp_shard group of `grid` (ZeRO's group: the
// dp group without HSDP) under `nodes`
// (0: they differ, or a group is not one run per node).
int dp_peers_per_node(const GridLayout& grid, const NodeMap& nodes);

// The settings a run asks for, resolved against its layout. `peers_per_node`: the data-parallel
// ranks per node (dp_peers_per_node of every group; 0: unknown). `hierarchy`: the user's level
// list (empty: one level, the node, when 1 < peers_per_node < dp). InputError naming the values
// for: any ZeRO++ setting without ZeRO-3, an hpZ size that does not divide the data-parallel
// group, a level list whose levels do not divide it or that leaves out the node level, a bad
// quantizer setting. `notes` receives what a user should know (an empty node level).
ZeroPPConfig resolve_zeropp(ZeroPPConfig want, int zero, int dp, int peers_per_node,
                            const std::vector<int>& hierarchy);

}  // namespace weft
