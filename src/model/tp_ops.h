// The communication a tensor-parallel model needs (Megatron-LM, Shoeybi et al. 2019): the
// model calls these at the seams of its split layers, and they undo each other between
// forward and backward:
//   column-parallel input:  identity in forward, all_reduce of the input gradient in backward
//   row-parallel output:    all_reduce of the partial outputs in forward, identity in backward
//   vocabulary-parallel embedding and cross-entropy: all_reduce (sum / max) of per-row values.
// The model is unaware of the transport; src/parallel/tp implements this over a Communicator.
#pragma once
#include <cstdint>

namespace weft {

class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  virtual void all_reduce_max(float* x, int64_t n) = 0;
  // Sequence parallelism (Korthikanti et al. 2022): rank r holds rows [r*n, (r+1)*n) of a
  // row-sharded activation. all_gather: local (n) -> whole (size()*n); reduce_scatter:
  // whole partial sums (size()*n) -> this rank's rows of the sum (n).
  virtual void all_gather(const float* local, float* whole, int64_t n) = 0;
  virtual void reduce_scatter(const float* whole, float* local, int64_t n) = 0;
};

}  // namespace weft
