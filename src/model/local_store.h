// The single-process parameter store: parameters and gradients in two whole flat device
// buffers (every model family's, when it runs without data parallelism).
#pragma once
#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "params/param_store.h"
#include "model/params.h"

namespace weft {

class LocalParamStore final : public ParamStore {
 public:
  LocalParamStore(const ParamLayout& layout, Backend& backend)
      : layout_(layout),
        params_(backend, DType::kF32, layout.total(), MemCategory::kParams),
        grads_(backend, DType::kF32, layout.total(), MemCategory::kGrads) {
    grads_.zero();
  }
  CView acquire(int g) override { return params() + layout_.group_range(g).first; }
  void release(int) override {}
  float* grads(int g) override { return grad_buffer() + layout_.group_range(g).first; }
  void ready(int) override {}
  float* params() { return params_.data<float>(); }
  float* grad_buffer() { return grads_.data<float>(); }

 private:
  const ParamLayout& layout_;
  DeviceBuffer params_;
  DeviceBuffer grads_;
};

}  // namespace weft
