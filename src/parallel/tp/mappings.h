// The tensor-parallel group as the parallel layers (layers.h) see it, and its communication
// as Megatron-LM core writes it (megatron/core/tensor_parallel/mappings.py): pairs of
// collectives, each the conjugate of the other between forward and backward.
//
//   mapping                             forward          backward
//   copy_to_region                      identity         all-reduce (sum)
//   reduce_from_region                  all-reduce       identity
//   gather_from_sequence_region         all-gather       reduce-scatter
//   reduce_scatter_to_sequence_region   reduce-scatter   all-gather
//
// There is no autograd here: the layer that runs a mapping's forward runs its conjugate in its
// own backward. The layers meet the mappings through two regions, each picking its pair by
// sequence parallelism (Korthikanti et al. 2022: the LayerNorm/residual stretch between the
// tensor-parallel blocks holds only Nl = N/tp of the N = B*T token rows on each rank):
//   the input of a column-parallel layer   copy_to_region,     or gather_from_sequence_region
//   the output of a row-parallel layer     reduce_from_region, or reduce_scatter_to_sequence_region
// With tp = 1 every mapping is the identity and no collective is called.
//
// The group also holds what its layers share: the storage precision of the run, the dtype of its
// sums, and the scratch of one micro-batch (counted as workspace, see reserve()). The layers'
// tensors are typed views (core/view.h): a 16-bit tensor holds its rounding itself (every op
// rounds what it writes there); an f32 tensor of a 16-bit run is rounded where the layers write
// it (round()), which emulates 16-bit storage for the tensors the run still keeps in fp32.
//
// The sums (the partial products of a row-parallel layer and of the vocabulary-parallel lookup,
// the partial input gradients of a column-parallel layer) are tensors of the sum dtype, reduced
// as stored: fp32, or where the family keeps its residual stream in 16 bits (GPT) the 16-bit
// storage dtype, as Megatron-LM reduces its bf16 activations (each rank's partial rounded to 16
// bits, the collective summing in 16 bits: NCCL's bf16 sum, weft's MPI bf16 op).

#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "core/precision.h"
#include "parallel/tp/tp_ops.h"

namespace weft {

class TensorParallel {
 public:
  // This process holds part `rank` of `size` of every split tensor.
  TensorParallel(Backend& backend, int size, int rank);
  // The group's collectives (needed when size > 1) and whether the regions between the
  // tensor-parallel blocks are sequence-parallel (only with size > 1).
  void set_ops(TensorParallelOps* ops, bool sequence_parallel);
  void set_precision(Precision p) { prec_ = p; }
  Precision precision() const { return prec_; }

  Backend& backend() const { return be_; }
  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sequence_parallel() const { return sp_; }
  // This rank's share of a split dimension (heads, channels, MLP width, vocabulary).
  int64_t part(int64_t n) const { return n / size_; }
  // Rows of an N-row activation held here between the tensor-parallel blocks.
  int64_t local_rows(int64_t N) const { return sp_ ? N / size_ : N; }
  // InputError unless N = B*T rows split evenly over the ranks (sequence parallelism).
  void check_rows(int64_t B, int64_t T) const;
  // Fails unless the collectives are there when size > 1.
  void check_ready() const;
  // x (n) rounded in place to the storage precision (what every layer does to what it writes):
  // an f32 tensor of a 16-bit run is rounded; a 16-bit tensor is already (no-op).
  void round(View x, int64_t n) const {
    if (prec_ != Precision::kFp32 && x.f32()) be_.round_to(static_cast<float*>(x.data), n, prec_);
  }

  // Scratch of one micro-batch of up to N rows of C channels, shared by the layers: the
  // partial sums of a row-parallel product (N,C; tp > 1), this rank's rows of a region
  // (Nl,C; sequence parallel), and a LayerNorm's weight gradient (2C). release() frees it
  // (so that a caller re-sizing several buffers frees them all before allocating any). The
  // partial sums and the rows are in `sum` (the group's sum dtype, above); the LayerNorm's
  // weight gradient in f32.
  void reserve(int64_t N, int64_t C, DType sum = DType::kF32);
  // The scratch's elements and bytes for a group of `size` ranks (sequence parallel or not): what
  // reserve() allocates, and what the model's description counts.
  static int64_t scratch_elems(int size, bool sequence_parallel, int64_t N, int64_t C);
  static int64_t scratch_bytes(int size, bool sequence_parallel, int64_t N, int64_t C, DType sum);
  void release();
  int64_t scratch_bytes() const { return static_cast<int64_t>(scratch_.bytes() + scratch32_.bytes()); }
  DType sum_dtype() const { return sum_; }
  View partial() const { return {partial_, sum_}; }
  View rows() const { return {rows_, sum_}; }
  float* ln_grads() const { return ln_grads_; }

  // --- the mappings (each call is the identity when tp = 1) ---
  // copy_to_region backward = reduce_from_region forward: x (n) summed over the ranks, in x's
  // dtype (the sum dtype).
  void all_reduce(View x, int64_t n);
  // Row maxima of a vocabulary-parallel cross-entropy: x (n) max over the ranks.
  void all_reduce_max(float* x, int64_t n);
  // A sum kept exact under tp compression (TensorParallelOps::all_reduce_sum_exact).
  void all_reduce_exact(float* x, int64_t n);
  // gather_from_sequence_region forward = reduce_scatter_to_sequence_region backward:
  // local (Nl,C) -> whole (N,C).
  void all_gather(CView local, View whole, int64_t N, int64_t C);
  // gather_from_sequence_region backward = reduce_scatter_to_sequence_region forward:
  // partial sums whole (N,C) -> this rank's rows of the sum, local (Nl,C), both of one dtype.
  void reduce_scatter(CView whole, View local, int64_t N, int64_t C);

  // --- the input region of a column-parallel layer: every rank needs all N rows ---
  // Forward: local (Nl,C) -> whole (N,C); local == whole without sequence parallelism.
  void column_input_forward(CView local, View whole, int64_t N, int64_t C);
  // Backward, in two phases so that a layer computed chunk by chunk (the output head) can
  // reduce each chunk as soon as it is complete. The rows phase: a complete block of rows of
  // the partial input gradient d (rows,C) summed over the ranks (all-reduce) and rounded; under
  // sequence parallelism nothing (the reduce-scatter needs every row).
  void column_input_backward_rows(View d, int64_t rows, int64_t C);
  // The scatter phase, after the rows phase covered all N rows: returns this rank's rows
  // (Nl,C) of the input gradient; under sequence parallelism the reduce-scatter of d (N,C)
  // into scratch, rounded; otherwise d itself. At tp > 1 d is of the sum dtype.
  View column_input_backward_scatter(View d, int64_t N, int64_t C);

  // --- the output region of a row-parallel layer (and of the vocabulary-parallel lookup) ---
  // Forward: the partial sums (N,C) of every rank -> the rows held here (Nl,C) of their sum:
  // all-reduce in place (returns partial), or under sequence parallelism reduce-scatter into
  // `local` (returns local); both of one dtype.
  View row_output_forward(View partial, View local, int64_t N, int64_t C);
  // Backward: the gradient of the rows held here d (Nl,C) -> of all N rows: d itself, or
  // under sequence parallelism its all-gather into scratch (in d's dtype: a 16-bit gradient
  // moves as stored, the scratch then holds 16-bit rows).
  CView row_output_backward(CView d, int64_t N, int64_t C);

  // --- gradients of columns replicated over the ranks ---
  // Grouped-query attention with fewer kv heads than ranks (Megatron-LM's replication): columns
  // [c0, c0 + w) of a column-parallel weight's gradient dw (rows x ld, row-major, f32) and of its
  // bias's db (null: none) belong to a block held by `replicas` consecutive ranks, each of which
  // computes only its own query heads' part. begin_replica_grads sets aside what they hold (the
  // step's earlier micro-batches) and zeroes them; after the layer's backward has accumulated
  // this micro-batch's part there, end_replica_grads sums that part over the replicas (one exact
  // all-reduce over the group, each replica set in its own slot, the others' slots zero) and
  // adds back what was set aside: every replica then holds the same whole gradient.
  struct ReplicaCols {
    float* dw = nullptr;
    float* db = nullptr;
    int64_t rows = 0, ld = 0, c0 = 0, w = 0;
    int replicas = 1;
  };
  // The f32 DEVICE scratch both calls work in: what was set aside, and the all-reduce's slots.
  static int64_t replica_scratch_elems(int size, int replicas, int64_t rows, bool bias, int64_t w);
  // The elements of the all-reduce (each rank's slots), for the communication model.
  static int64_t replica_sum_elems(int size, int replicas, int64_t rows, bool bias, int64_t w);
  void begin_replica_grads(const ReplicaCols& r, float* scratch);
  void end_replica_grads(const ReplicaCols& r, float* scratch);

 private:
  Backend& be_;
  TensorParallelOps* ops_ = nullptr;
  int size_ = 1, rank_ = 0;
  bool sp_ = false;
  Precision prec_ = Precision::kFp32;
  DType sum_ = DType::kF32;
  DeviceBuffer scratch_, scratch32_;  // device memory of be_, under kWorkspace: sum_ and f32 pieces
  void *partial_ = nullptr, *rows_ = nullptr;
  float* ln_grads_ = nullptr;
};

}  // namespace weft
