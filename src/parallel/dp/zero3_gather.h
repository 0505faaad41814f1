// ZeRO-3's gathered parameters (Rajbhandari et al. 2020 sec. 5.3), one part of DataParallel:
// each parameter group is all-gathered from the dp_shard group's shards into a transient buffer
// (a "slot", policy in parallel/dp/param_slots.h: slot 0 the embedding group's, the others the
// least recently used) just before use, the next group's gather is prefetched, and a group's
// buffer is reused once its users release it. With ZeRO++ (parallel/dp/zeropp.h, docs/zeropp.md):
//   qwZ  a gather from the primary shards carries each rank's piece as quantized blocks
//        (int8/int4 + an fp32 scale per block, one buffer per rank in one all-gather of bytes);
//        every rank, the owner included, computes with the dequantized values;
//   hpZ  the first gather of a group after the parameters change leaves each rank a copy of its
//        1/alpha slice of the group (the secondary partition, alpha consecutive ranks); every
//        later gather of that group until the next change is an unquantized all-gather inside
//        the alpha group from those copies.
// Device memory: every slot, wire and the secondary partition are DeviceBuffers of the backend.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "comm/device_comm.h"
#include "params/param_layout.h"
#include "parallel/dp/flat_shards.h"
#include "parallel/dp/zeropp.h"

namespace weft {

class Zero3Gather {
 public:
  // shard: the dp_shard group (its backend is `backend`); params: this rank's shard of the flat
  // buffer (DEVICE, shards.end() - shards.begin() floats), owned by the store, outliving this;
  // owned: the groups this part of the model holds, in backward order (L+1 ... 0); slots: how
  // many gather buffers (DataParallel::param_slots). Collective over `shard` when hpZ is on (it
  // splits the hpZ groups).
  Zero3Gather(const ParamLayout& layout, DeviceComm& shard, Backend& backend, const FlatShards& shards,
              const DeviceBuffer& params, const ZeroPPConfig& zeropp, int prefetch, int slots, bool training,
              const std::vector<int>& owned);
  ~Zero3Gather();  // waits for the gathers in flight
  Zero3Gather(const Zero3Gather&) = delete;
  Zero3Gather& operator=(const Zero3Gather&) = delete;

  // The communicator of unquantized primary gathers ([compression]'s params traffic; null: the
  // dp_shard group).
  void set_params_comm(DeviceComm* c) { params_comm_ = c; }
  // Group g's whole parameters, a DEVICE view of the store's dtype valid until release(g);
  // posts the prefetch of the next group in forward order, or in backward order once `backward`.
  CView acquire(int g, bool backward);
  void release(int g);
  // The parameters changed (an optimizer step, a load): every gathered slot and hpZ copy is stale.
  void invalidate();

  // Bytes: the slots (params), their qwZ wires and, with 16-bit parameters, qwZ's fp32 staging
  // of one rank's piece (comm) and the secondary partition (params).
  int64_t slot_bytes() const;
  int64_t wire_bytes() const;
  int64_t hpz_bytes() const { return static_cast<int64_t>(hpz_.bytes()); }
  // Seconds blocked on gathers since the last call; resets.
  double take_exposed_seconds();
  // qwZ's relative RMS error of this rank's pieces since the last call, measured while the group
  // is traced (-1: nothing measured); resets.
  double take_weight_error();

 private:
  struct Slot {
    int group = -1;
    int refs = 0;
    bool valid = false;
    uint64_t last_use = 0;
    DeviceBuffer data;
    DeviceBuffer wire_send, wire_recv;  // qwZ: this rank's quantized piece, every rank's pieces
    bool dequantize = false;            // qwZ: wire_recv -> data once the gather completes
    bool fill_hpz = false;              // hpZ: keep this rank's slice once the gather completes
    CommHandle pending;  // gather in flight (into data: destroyed, i.e. waited for, first)
  };

  int find(int g) const;
  int gather(int g);  // returns the slot (-1: none free); posts the gather (non-blocking)
  void post_quantized(Slot& p, int g, CView send);
  // qwZ with 16-bit parameters: fp32 scratch of n elements (the quantizer's input and the
  // dequantizer's output; the largest piece of any owned group, sized at construction).
  float* qwz_stage(int64_t n);
  void prefetch_after(int g, bool backward);
  void finish(Slot& p);  // after the wait: qwZ's dequantize, hpZ's copy
  std::vector<int64_t> hpz_counts(int g) const;  // the alpha slices of group g
  void setup_hpz(const std::vector<int>& owned);
  void setup_qwz(const std::vector<int>& owned);
  DeviceComm& params_comm() { return params_comm_ ? *params_comm_ : shard_; }

  const ParamLayout& layout_;
  DeviceComm& shard_;
  Backend& backend_;
  FlatShards shards_;
  const DeviceBuffer& params_;
  ZeroPPConfig zeropp_;
  int prefetch_ = 1;
  int L_ = 0;
  bool training_ = true;
  DeviceComm* params_comm_ = nullptr;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
  double exposed_s_ = 0.0;
  // hpZ: the alpha group, this rank's slice of every group, where each group's slice starts,
  // whether it holds the current parameters.
  std::unique_ptr<DeviceComm> hpz_comm_;
  DeviceBuffer hpz_;
  std::vector<int64_t> hpz_offset_;
  std::vector<char> hpz_valid_;
  // qwZ's error measurement (traced runs only).
  double qwz_err2_ = 0.0, qwz_ref2_ = 0.0;
  DeviceBuffer qwz_scratch_;
  DeviceBuffer qwz_stage_;  // qwZ of 16-bit parameters: see qwz_stage
  DType dt_ = DType::kF32;  // the parameters' dtype (params_'s)
};

}  // namespace weft
