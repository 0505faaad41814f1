// TensorParallelOps over a Communicator (the tp axis group of the ProcessGrid).
#pragma once
#include "comm/communicator.h"
#include "parallel/tp/tp_ops.h"

namespace weft {

class CommTensorParallel final : public TensorParallelOps {
 public:
  explicit CommTensorParallel(Communicator& tp) : tp_(tp) {}
  int size() const override { return tp_.size(); }
  int rank() const override { return tp_.rank(); }
  void all_reduce_sum(float* x, int64_t n) override { tp_.all_reduce(x, n, CommDType::kF32, ReduceOp::kSum); }
  void all_reduce_max(float* x, int64_t n) override { tp_.all_reduce(x, n, CommDType::kF32, ReduceOp::kMax); }
  void all_gather(const float* local, float* whole, int64_t n) override {
    tp_.all_gather(local, whole, n, CommDType::kF32);
  }
  void reduce_scatter(const float* whole, float* local, int64_t n) override {
    tp_.reduce_scatter(whole, local, n, CommDType::kF32, ReduceOp::kSum);
  }

 private:
  Communicator& tp_;
};

}  // namespace weft
