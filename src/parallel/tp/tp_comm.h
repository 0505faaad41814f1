// TensorParallelOps over a Communicator (the tp axis group of the ProcessGrid): the activation
// traffic over `tp` (a CompressedComm under [compression] tp), the exact sums over `exact`
// (the same group uncompressed; by default `tp` itself).
#pragma once
#include "comm/communicator.h"
#include "core/error.h"
#include "parallel/tp/tp_ops.h"

namespace weft {

class CommTensorParallel final : public TensorParallelOps {
 public:
  explicit CommTensorParallel(Communicator& tp) : tp_(tp), exact_(tp) {}
  CommTensorParallel(Communicator& tp, Communicator& exact) : tp_(tp), exact_(exact) {}
  int size() const override { return tp_.size(); }
  int rank() const override { return tp_.rank(); }
  void all_reduce_sum(View x, int64_t n) override { tp_.all_reduce(x.data, n, comm_dtype_of(x.dtype), ReduceOp::kSum); }
  void all_reduce_max(float* x, int64_t n) override { tp_.all_reduce(x, n, CommDType::kF32, ReduceOp::kMax); }
  void all_reduce_sum_exact(float* x, int64_t n) override {
    exact_.all_reduce(x, n, CommDType::kF32, ReduceOp::kSum);
  }
  void all_gather(CView local, View whole, int64_t n) override {
    WEFT_CHECK(local.dtype == whole.dtype, "tp all_gather: a {} input into a {} output", dtype_name(local.dtype),
               dtype_name(whole.dtype));
    tp_.all_gather(local.data, whole.data, n, comm_dtype_of(local.dtype));
  }
  void reduce_scatter(CView whole, View local, int64_t n) override {
    WEFT_CHECK(whole.dtype == local.dtype, "tp reduce_scatter: a {} input into a {} output", dtype_name(whole.dtype),
               dtype_name(local.dtype));
    tp_.reduce_scatter(whole.data, local.data, n, comm_dtype_of(whole.dtype), ReduceOp::kSum);
  }

 private:
  Communicator& tp_;
  Communicator& exact_;
};

}  // namespace weft
