// Data parallelism with ZeRO stages 0-3 (Rajbhandari et al. 2020, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models"), as a ParamStore around the
// single-device model.
//
// The flat parameter buffer (n elements) is cut into dp contiguous shards of S = ceil(n/dp)
// elements; rank r owns [r*S, min(n, (r+1)*S)). Every collective works on element ranges of
// the flat buffer, so a bucket or a layer is split among the ranks that own parts of it.
//
//   zero 0  params, grads and AdamW state whole on every rank; gradients summed with
//           all-reduce in buckets, posted as soon as a bucket's layers finish backward in the
//           last micro-batch (earlier micro-batches accumulate locally, no communication).
//   zero 1  AdamW state sharded: buckets are reduce-scattered to their owners, each rank
//           updates its shard, then the parameters are all-gathered.
//   zero 2  gradients sharded as well: each group's gradient lives in a transient buffer for
//           the duration of its backward, is reduce-scattered into the owners' shard
//           gradients and the buffer is reused (so the reduction happens every micro-batch).
//   zero 3  parameters sharded as well: each group is all-gathered into a transient buffer
//           just before use (the next group's gather is prefetched) and dropped after
//           (Zero3Gather, parallel/dp/zero3_gather.h, with ZeRO++'s qwZ and hpZ).
//
// ZeRO++ on zero 3 (parallel/dp/zeropp.h, docs/zeropp.md):
//   qwZ  a gather from the primary shards carries each rank's piece as quantized blocks
//        (core/block_quant.h: int8 + fp32 scales, one buffer per rank in one all-gather of
//        bytes); every rank, the owner included, computes with the dequantized values.
//   hpZ  the first gather of a group after the parameters change (the step's forward) leaves
//        each rank a copy of its 1/alpha slice of the gathered group (the secondary
//        partition, alpha = hpz ranks of consecutive data-parallel ranks); every later gather
//        of that group (backward, recompute, later micro-batches, evaluation) is an
//        unquantized all-gather inside the alpha group from those copies. The copies are
//        dropped by the optimizer step and by any load of parameters (checkpoint, init).
//   qgZ  the gradient reduce-scatter is QuantizedReduceScatter's hops (parallel/dp/qgz.h),
//        one quantized all-to-all per level of the data-parallel group.
//
// HSDP (Hybrid-STOP's dp split, parallel/grid.h; PyTorch's HYBRID_SHARD): with
// DataParallelConfig::dp_replicate R > 1 the dp group of P ranks is R replicas of a dp_shard
// group of S = P / R consecutive dp ranks (dp rank = shard + S * replica). The store splits its
// dp communicator into the two groups itself ("dp-shard": same replica; "dp-replicate": same
// shard index) and every ZeRO mechanism above runs inside the dp_shard group: the flat buffer
// is cut into S shards, reduce-scatters, gathers, hpZ, qwZ and qgZ stay inside it. What the
// replicas add is one all-reduce over the dp_replicate group of each reduction's result, in
// the step's last micro-batch, posted as the shard-group reduction completes:
//   zero 0    the bucket's all-reduce over dp_shard, then the same bucket over dp_replicate
//   zero 1    the bucket's reduce-scatter over dp_shard, then this rank's part of it
//   zero 2/3  each group's reduce-scatter (every micro-batch) over dp_shard; in the last one
//             the group's part of the summed shard gradient over dp_replicate
// so under ZeRO 1-3 the replicas exchange 1/S of the model, once per step. The embedding's
// (token, row) exchange (zero 0/1) gathers every dp rank's rows, as without the split; the
// gradient norm sums the shard group only (the replicas hold the same shard). [compression]'s
// communicators (set_traffic) span the whole dp group and are refused with dp_replicate > 1.
//
// Gradients are sums over ranks of each rank's d(loss_scale * local token losses): with
// loss_scale = 1 / (global batch tokens) the result is the gradient of the global mean loss.
//
// Device memory. Every buffer (parameters, gradients, shard gradients, the zero-2/3 slots,
// receive buffers) is a DeviceBuffer of the backend, every computation on them a backend
// call, and every collective on them goes through the DeviceComm (host-staged MPI or
// NCCL, comm/device_comm.h); the host reads back only what it must (the norm's double
// goes through dp.host()). Each pointer below says whether it is DEVICE memory of the
// backend or HOST memory. On the cpu backend device memory is host memory, so host code may
// still read the device pointers there; on any other backend it must not.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "comm/communicator.h"
#include "comm/device_comm.h"
#include "params/param_store.h"
#include "params/param_layout.h"
#include "parallel/dp/dp_config.h"
#include "parallel/dp/flat_shards.h"
#include "parallel/dp/grad_buckets.h"
#include "parallel/dp/zero3_gather.h"
#include "parallel/dp/zeropp.h"

namespace weft {

class QuantizedReduceScatter;
class CompressedComm;

// Bytes held per category by one rank (persistent plus the peak of transient buffers).
struct DataParallelMemory {
  int64_t params = 0;      // parameter buffers (whole or shard, plus zero-3 gather buffers)
  int64_t grads = 0;       // gradient buffers (whole or shard, plus zero-2/3 transient buffers)
  int64_t comm = 0;        // receive buffers of reductions
  int64_t params_transient = 0;  // of params: zero-3 gather buffers
  int64_t grads_transient = 0;   // of grads: zero-2/3 per-group gradient buffers
  int64_t hpz = 0;               // of params: the hpZ secondary partition
  int64_t residual = 0;          // of grads: the error-feedback residual (qgZ's or [compression]'s)
};

class DataParallel final : public ParamStore {
 public:
  // Transient gradient buffers for layers in flight (zero 2/3), besides the embedding's.
  static constexpr int kGradSlots = 2;
  // Transient parameter buffers (zero 3): the embedding's, the layer in use and the next, and
  // `prefetch` more.
  static int param_slots(int prefetch) { return zero3_param_slots(prefetch); }

  // dp: the data-parallel group on device buffers of `backend` (its backend must be `backend`).
  // Both outlive the store.
  DataParallel(const ParamLayout& layout, DeviceComm& dp, const DataParallelConfig& cfg, Backend& backend);
  ~DataParallel() override;

  int zero() const { return cfg_.zero; }
  int dp() const { return dp_.size(); }
  // HSDP: the dp_shard group (ZeRO's; the dp group itself when dp_replicate is 1) and the
  // number of replicas.
  int dp_shard() const { return shard_comm_->size(); }
  int dp_replicate() const { return cfg_.dp_replicate; }
  // The element range whose optimizer state and update this rank owns: the whole buffer for
  // zero 0, this rank's shard (of its dp_shard group) otherwise.
  int64_t opt_begin() const { return cfg_.zero == 0 ? 0 : shard_begin_; }
  int64_t opt_end() const { return cfg_.zero == 0 ? n_ : shard_end_; }
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  // counts[r] = elements of [b, e) that rank r of the dp_shard group owns.
  std::vector<int64_t> owner_counts(int64_t b, int64_t e) const;

  // The working parameters' dtype (DataParallelConfig::param_dtype).
  DType param_dtype() const override { return params_.dtype(); }
  // Parameters of [opt_begin, opt_end) in param_dtype(), written by the optimizer (from its
  // master weights when 16-bit). DEVICE view.
  View opt_params();
  // Summed gradient of [opt_begin, opt_end) (valid after finish_step_gradients). DEVICE pointer.
  float* opt_grads();

  // Sets every rank's parameters from a whole buffer (the same on every rank), rounded to
  // param_dtype(). full: HOST memory, the whole flat layout (n elements).
  void load_full_params(const float* full);
  // zero 3: sets this rank's shard from HOST fp32 values (shard_end - shard_begin), rounded.
  void load_shard_params(const float* shard);
  // Every rank receives the whole parameter buffer, widened to fp32 (collective for zero 3,
  // which gathers it through a transient device buffer counted under comm). out: HOST memory,
  // n elements.
  void gather_full_params(float* out);
  // Whole-buffer copy of optimizer-range data (e.g. AdamW moments) from every rank's range
  // (collective for zero 1-3, through a transient device buffer counted under comm). mine:
  // DEVICE memory, the opt_end - opt_begin elements of this rank's range (f32, or 16-bit
  // parameters); out: HOST memory, n elements, widened to fp32.
  void gather_opt_range(CView mine, float* out);

  // --- one optimizer step ---
  void begin_step();                       // clears the gradient accumulators
  void begin_micro_batch(bool last);       // `last`: reduce during this micro-batch's backward
  void finish_step_gradients();            // waits for every reduction of the step
  // Pipeline parallelism: the first and the last stage both hold the tied embedding; its
  // gradient is summed between them (over `tied`) at the end of the step, before its
  // data-parallel reduction. zero 0/1 only.
  // tied: the two stages' group on device buffers of the same backend (null: none); it
  // outlives the store.
  void set_tied_embedding(DeviceComm* tied);
  // [compression] (comm/compressed_comm.h): the communicators the gradient reductions (zero
  // 0-3, the embedding's row exchange) and the parameter all-gathers (zero 1-3) go through;
  // either may be null (the dp communicator itself). Same group as dp; both outlive the store.
  // InputError when one is given with dp_replicate > 1 (they would span the whole dp group).
  // error_feedback: `grads` is a CompressedComm whose codec's error each rank carries to the
  // next step in a residual of n floats (DEVICE, kGrads; this rank's own state). Call before
  // the first step.
  void set_traffic(DeviceComm* grads, DeviceComm* params, bool error_feedback);
  // The compressed gradient path's error-feedback residual (null: none).
  DeviceBuffer* compression_residual() { return ef_residual_ ? &ef_residual_ : nullptr; }
  // Squared L2 norm of the summed gradient over the data-parallel ranks (the dp_shard group's
  // shards: the replicas hold the same), leaving out the
  // element ranges set with set_norm_skip (tensor-parallel replicas counted on one rank only):
  // the sum, in element order, of backend sum_squares over each kept sub-range of this rank's
  // optimizer range.
  double grad_norm_sq();
  void set_norm_skip(std::vector<std::pair<int64_t, int64_t>> ranges);
  void after_optimizer_step();             // zero 1/2: all-gather the updated shards

  DataParallelMemory memory() const;
  // Seconds this rank spent blocked on data-parallel communication (waits that computation
  // did not hide) since the last call; resets the counter.
  double take_exposed_seconds();
  // ZeRO++: the settings in force, qgZ's error-feedback residual (null: none; n floats,
  // DEVICE, this rank's own state), and the relative RMS error of the quantized gathers (qwZ,
  // of this rank's pieces) and of each qgZ hop since the last call, measured only while the dp
  // group is traced (-1: nothing measured).
  const ZeroPPConfig& zeropp() const { return cfg_.zeropp; }
  DeviceBuffer* qgz_residual();
  struct QuantErrors {
    double weights = -1.0;
    std::vector<double> gradient_hops;
  };
  QuantErrors take_quant_errors();

  // ParamStore
  // acquire: the group's parameters, a DEVICE pointer (valid until release).
  CView acquire(int g) override;
  void release(int g) override;
  // grads: the group's gradient accumulator, a DEVICE pointer.
  float* grads(int g) override;
  void ready(int g) override;
  // zero 0/1: the tied embedding's gradient is reduced in two parts. The head's dense part is
  // all-reduced (zero 1: reduce-scattered) right after the head, hidden behind the whole layer
  // backward; the lookup's part is exchanged as (token, gradient row) pairs (B*T*C floats per
  // rank instead of Vp*C) and every rank applies all of them in rank order (zero 1: to its
  // shard). tokens (B,T) int32 and dres (B,T,C) are DEVICE pointers.
  void head_done() override;
  bool embedding_backward(const int32_t* tokens, CView dres, int64_t B, int64_t T, int64_t v0,
                          int64_t vrows) override;

 private:
  struct Bucket : GradBucket {  // parallel/dp/grad_buckets.h
    int pending = 0;  // groups not ready yet in this micro-batch
  };
  struct InFlight {
    CommHandle handle;
    int slot = -1;           // gradient slot to free on completion (zero 2/3)
    float* recv = nullptr;   // reduce-scatter output to add into shard grads (zero 2/3); device
    int64_t recv_count = 0;
    int64_t shard_offset = 0;
    // HSDP: once this completes, all-reduce [replicate, replicate + replicate_count) (device)
    // over the dp_replicate group.
    float* replicate = nullptr;
    int64_t replicate_count = 0;
  };
  struct GradSlot {
    int group = -1;
    bool busy = false;
    DeviceBuffer data;
    DeviceBuffer recv;
  };

  void post_bucket(Bucket& b);
  // Waits for the oldest reduction; `follow`: posts its dp_replicate all-reduce (not while
  // tearing down).
  void complete_oldest(bool follow = true);

  const ParamLayout& layout_;
  DeviceComm& dp_;                          // the whole dp group (the embedding's row exchange)
  // HSDP: the dp_shard group (&dp_ without replicas) and the dp_replicate group (null without).
  std::unique_ptr<DeviceComm> shard_owned_, replicate_owned_;
  DeviceComm* shard_comm_ = nullptr;
  DeviceComm* replicate_comm_ = nullptr;
  DeviceComm& shard() { return *shard_comm_; }
  // Drives the outstanding operations of every group the store posts on.
  void progress();
  // The all-reduce over dp_replicate that follows a reduction of [p, p + count) (none without
  // replicas or elements).
  void post_replicate(float* p, int64_t count);
  DeviceComm* grad_comm_ = nullptr;         // gradient reductions (null: the dp_shard group)
  DeviceComm* param_comm_ = nullptr;        // parameter all-gathers (null: the dp_shard group)
  CompressedComm* grad_codec_ = nullptr;    // grad_comm_ when error feedback is on
  DeviceBuffer ef_residual_;                // its residual (n floats)
  DeviceComm& grads_comm() { return grad_comm_ ? *grad_comm_ : shard(); }
  DeviceComm& params_comm() { return param_comm_ ? *param_comm_ : shard(); }
  DeviceComm& rows_comm() { return grad_comm_ ? *grad_comm_ : dp_; }  // the embedding's rows: every dp rank
  // Error feedback for the reduction of flat range [b, e) about to be posted.
  void feedback_for(int64_t b);
  Backend& backend_;
  bool split_embedding_ = false;  // zero 0/1 with dp > 1: see head_done()
  DeviceComm* tied_ = nullptr;  // see set_tied_embedding
  bool embedding_posted_ = false;
  DataParallelConfig cfg_;
  FlatShards shards_;  // the flat buffer's cut over the dp_shard group (n_, shard_, ... below are its values)
  int64_t n_ = 0, shard_ = 0, shard_begin_ = 0, shard_end_ = 0;
  int L_ = 0;

  // HOST fp32 values -> the first n elements of params_, rounded to its dtype.
  void upload_params(const float* host, int64_t n);
  // n DEVICE elements of src (f32 or 16-bit) -> HOST fp32 out, widened.
  void download_f32(CView src, int64_t n, float* out) const;

  // Device buffers (float elements; params_ of param_dtype).
  DeviceBuffer params_;       // zero 0-2: whole; zero 3: shard
  DeviceBuffer grads_;        // zero 0/1: whole accumulator
  DeviceBuffer shard_grads_;  // zero 1-3: summed gradient of the shard
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_group_;
  bool last_micro_ = true;
  bool backward_ = false;
  std::vector<GradSlot> grad_slots_;    // zero 2/3
  std::deque<InFlight> inflight_;       // after the slots: destroyed (waited for) before them
  std::vector<int> grad_slot_of_group_;
  double exposed_s_ = 0.0;
  std::vector<std::pair<int64_t, int64_t>> norm_skip_;

  // zero 3: the gathered parameters (with ZeRO++'s qwZ and hpZ); after params_ and the HSDP
  // groups, so destroyed (its gathers waited for) before them.
  std::unique_ptr<Zero3Gather> gather_;
  std::unique_ptr<QuantizedReduceScatter> qgz_;  // ZeRO++'s qgZ
};

}  // namespace weft
