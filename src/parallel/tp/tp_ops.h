// The collectives of the tensor-parallel group (Megatron-LM, Shoeybi et al. 2019), the
// transport under the mappings and layers of this folder (mappings.h, layers.h): the model
// never calls these; its parallel layers do. CommTensorParallel (tp_comm.h) implements them
// over the tp axis's Communicator.
#pragma once
#include <cstdint>

#include "core/view.h"

namespace weft {

class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // x (n) summed over the ranks in its dtype (a 16-bit partial sum moves and sums in 16 bits).
  virtual void all_reduce_sum(View x, int64_t n) = 0;
  virtual void all_reduce_max(float* x, int64_t n) = 0;
  // A sum that must stay exact whatever [compression] says of tp traffic: the loss statistics
  // of the vocabulary-parallel cross-entropy, a LayerNorm weight gradient, generation's logits.
  // Default: all_reduce_sum.
  virtual void all_reduce_sum_exact(float* x, int64_t n) { all_reduce_sum(View(x, DType::kF32), n); }
  // Sequence parallelism (Korthikanti et al. 2022): rank r holds rows [r*n, (r+1)*n) of a
  // row-sharded activation. all_gather: local (n) -> whole (size()*n), in the views' dtype (a
  // 16-bit activation moves as stored); reduce_scatter: whole partial sums (size()*n) -> this
  // rank's rows of the sum (n), summed in their dtype.
  virtual void all_gather(CView local, View whole, int64_t n) = 0;
  virtual void reduce_scatter(CView whole, View local, int64_t n) = 0;
};

}  // namespace weft
