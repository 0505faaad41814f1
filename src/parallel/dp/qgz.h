// qgZ: ZeRO-3's gradient reduce-scatter as quantized all-to-all hops, one per level of the
// data-parallel group (Wang et al. 2023, sec. 3.3, "hierarchical all-to-all"; Xu et al. 2025
// for the third level). Where the plain reduce-scatter sends 32-bit values through a ring, each
// hop here quantizes what the rank holds (ZeroPPConfig::gradients, block absmax, int4 by
// default), exchanges it once with the hop's peers, dequantizes and sums in fp32. After hop k
// a rank holds its level-k domain's sum of the chunks that travel on with it (zeropp.h:
// grad_hops); after the last hop, its own chunk summed over every rank. So the innermost
// (cheapest) level carries the whole gradient, and each level above only the part the levels
// below have already reduced: the network sees 1/levels.back() of it, quantized.
//
// The result is a sum, as the plain reduce-scatter's: weft's gradients are each rank's
// d(loss / global batch tokens), so no averaging over ranks is needed (or done) here.
//
// Chunks: the flat range [b, e) of a parameter group is split among the ranks as ZeRO shards
// it (rank q owns [q*S, (q+1)*S) of the flat buffer); a hop sends to each peer the chunks that
// peer's position selects, gathered into one block per peer (the swizzle), quantized as one
// piece per peer (quant_wire_bytes), all blocks in one all-to-all.
//
// Error feedback (optional): the first hop quantizes the local gradient plus the residual the
// rank kept from its previous step's first hop and keeps the new residual (Seide et al. 2014,
// "1-bit SGD"; Karimireddy et al. 2019, "Error feedback fixes SignSGD"): one float per element
// of the flat buffer, this rank's own state. Later hops requantize partial sums without it.
//
// Device memory: every buffer is a DeviceBuffer of the backend; the hops are blocking calls.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "comm/device_comm.h"
#include "parallel/dp/zeropp.h"

namespace weft {

class QuantizedReduceScatter {
 public:
  // dp: the data-parallel group (splits its hop groups from it: collective over dp). n: the
  // flat buffer's elements, shard: ZeRO's shard size S; groups: the [b, e) ranges this store
  // reduces (to size the buffers).
  QuantizedReduceScatter(DeviceComm& dp, const ZeroPPConfig& cfg, Backend& be, int64_t n, int64_t shard,
                         const std::vector<std::pair<int64_t, int64_t>>& groups);
  ~QuantizedReduceScatter();

  // Sums the local gradient `grad` (DEVICE, e - b elements of flat range [b, e)) over the
  // data-parallel group and adds this rank's part of the sum into `shard_out` (DEVICE, the
  // elements of [b, e) this rank owns, in order).
  void reduce_add(const float* grad, int64_t b, int64_t e, float* shard_out);

  // Error feedback residual (null when off): n floats, DEVICE; what checkpoints hold.
  DeviceBuffer* residual() { return residual_ ? &residual_ : nullptr; }
  // Bytes held: the wire and staging buffers (comm) and the residual (grads).
  int64_t comm_bytes() const;
  int64_t residual_bytes() const { return static_cast<int64_t>(residual_.bytes()); }
  int hops() const { return static_cast<int>(hops_.size()); }
  // Relative RMS error of each hop's quantization (||x - Q(x)|| / ||x|| over everything the
  // hop sent since the last call), measured only while the dp group is traced; -1: none.
  std::vector<double> take_rel_errors();

 private:
  struct Hop {
    GradHop h;
    std::vector<std::vector<int>> to;  // per member: the chunks this rank sends it (fixed by the ranks)
    std::unique_ptr<DeviceComm> comm;
    double err2 = 0.0, ref2 = 0.0;  // sums of squares for the relative error
  };
  // Element ranges (relative to b) of rank q's chunk of [b, e).
  std::pair<int64_t, int64_t> chunk(int q, int64_t b, int64_t e) const;
  bool measuring() const;

  DeviceComm& dp_;
  ZeroPPConfig cfg_;
  Backend& be_;
  int64_t n_ = 0, shard_ = 0;
  std::vector<Hop> hops_;
  DeviceBuffer staging_, cur_, next_, wire_send_, wire_recv_, scratch_, residual_;
};

}  // namespace weft
