// A ClimaX-style Vision Transformer for gridded weather fields (Nguyen et al. 2023, "ClimaX: A
// foundation model for weather and climate"; microsoft/ClimaX src/climax/arch.py), written once
// for one device against the Backend, with the transformer block shared with the GPT
// (model/block.h, bidirectional). Forward of one micro-batch, x (B,V,H,W) normalised fields:
//   per-variable patch embedding (p x p patches, a Linear(p^2, C) per variable) + var_embed[v]
//     -> tokens (V, N, C), N = B L, L = (H/p)(W/p)
//   variable aggregation: one learned query attends over the V tokens of each patch position
//     (multi-head cross-attention: q from var_query, k|v from the tokens, out_proj) -> (N, C)
//   + pos_embed[l] + lead_time_embed(lead / 100)                 -> the blocks' input (N, C)
//   depth bidirectional pre-LN blocks, final LayerNorm
//   decoder: decoder_depth x (Linear(C, C) + GELU), Linear(C, V p^2) -> unpatchified (B,V,H,W)
//   loss: latitude-weighted MSE, weight cos(lat) / mean(cos(lat)) (ClimaX's lat_weighted_mse).
// GELU is the tanh approximation (the backend's; ClimaX uses the exact erf form): a documented
// deviation, the float64 PyTorch reference (tests/reference/climax_torch.py) does the same.
//
// Tensor parallelism as ORBIT's Hybrid-STOP: the blocks as the GPT's, the aggregation's q and k|v
// column-parallel by heads and its out_proj row-parallel (its backward all-reduces the V N C
// token gradient: V times a block's); the embeddings and the decoder are replicated. No
// pipeline stages and no sequence parallelism yet (the layout rules refuse them).
//
// The host reorders the fields into patch order before the upload (patches (V, N, p^2), the
// targets (N, p^2 V) in the decoder's output order), so the device sees plain products.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "model/block.h"
#include "model/climax/climax_description.h"
#include "model/config.h"
#include "model/model.h"
#include "params/param_store.h"
#include "model/params.h"
#include "parallel/tp/layers.h"

namespace weft {

class LocalParamStore;

// The model's host view of a batch (and the reference tests'): x, y (B,V,H,W; y may be null
// for a forecast), lead (B) hours.
struct ClimaxBatch {
  const float* x = nullptr;
  const float* y = nullptr;
  const float* lead = nullptr;
};

// Cell-centred latitudes of an H-row grid from south to north (WeatherBench's 5.625 degrees:
// -87.1875 ... 87.1875 for H = 32), in degrees.
std::vector<float> default_latitudes(int H);

class ClimaX final : public Model {
 public:
  // local_store: whole parameter and gradient buffers (the single-process store); a
  // data-parallel run passes false and installs its own with set_store().
  ClimaX(const ModelConfig& cfg, Backend& backend, bool local_store = true, int tp_size = 1, int tp_rank = 0);
  ~ClimaX() override;
  ClimaX(const ClimaX&) = delete;
  ClimaX& operator=(const ClimaX&) = delete;

  const ModelConfig& config() const override { return cfg_; }
  const ParamLayout& layout() const override { return layout_; }
  void set_tp(TensorParallelOps* tp, bool sequence_parallel) override;
  void set_store(ParamStore* store) override { store_ = store; }
  void set_recompute(Recompute mode, int full_layers) override;
  void set_precision(Precision p) override {
    prec_ = p;
    tp_.set_precision(p);
  }
  // The latitudes (H, degrees) the loss weights; default_latitudes() until set.
  void set_latitudes(const std::vector<float>& lat_deg) override;
  const std::vector<float>& latitude_weights() const { return lat_w_; }

  // T must be the model's patches (or 0 for them).
  void reserve(int64_t B, int64_t T, bool training, int64_t head_chunk, int slots);
  // The Model interface: a FieldBatch's capacity (data/field_batch.h).
  void reserve(const HostBatch& capacity, bool training, int64_t head_chunk, int slots) override;
  void reserve(int64_t B, bool training) { reserve(B, 0, training, 0, 1); }
  int64_t activation_bytes() const override;
  int64_t workspace_bytes() const override;

  // A FieldBatch (data/field_batch.h).
  double train_micro_batch(const HostBatch& mb, float loss_scale) override;
  double loss_sum(const HostBatch& mb) override;
  void stage_forward(int, const HostBatch&, CView, bool) override;
  double stage_backward(int, const HostBatch&, CView, float) override;
  double stage_loss(int, const HostBatch&) override;
  CView stage_output(int) override;
  CView stage_input_grad() const override;

  // --- the single-process conveniences (reference tests, eval) ---
  float* params();  // the local store's buffers (null without one): device memory
  float* grads();
  void init(uint64_t seed);
  void zero_grads();
  // The mean latitude-weighted MSE over (B,V,H,W); gradients of loss_scale * B L * mean.
  double forward_backward(const ClimaxBatch& b, int64_t B, float loss_scale);
  double forward_loss(const ClimaxBatch& b, int64_t B);
  // Forward only: the predictions (B,V,H,W) in normalised units, host memory.
  void predict(const float* x, const float* lead, int64_t B, float* out);
  // The Model interface's outputs: the predictions of mb's fields and lead times, (B,V,H,W).
  int64_t output_elems() const override {
    return int64_t{config().vars} * config().img_h * config().img_w;
  }
  void forward_outputs(const HostBatch& mb, float* out) override;

 private:
  struct Stash;
  struct Work;
  double train_batch(const ClimaxBatch& mb, int64_t B, float loss_scale);  // the loss sum
  double batch_loss(const ClimaxBatch& mb, int64_t B);                     // the loss sum
  void upload(const ClimaxBatch& mb, int64_t B);
  void check_batch(const ClimaxBatch& mb, int64_t B, bool training) const;
  void forward(int64_t B);
  double backward(int64_t B, float loss_scale);
  double loss(int64_t B, float dloss);  // the predictions against the targets; dloss != 0: dpred in place
  void front_forward(int64_t B, const std::vector<CView>& w);
  void front_backward(int64_t B, const std::vector<CView>& w, const std::vector<float*>& g);
  void back_forward(int64_t B, const std::vector<CView>& w);
  void back_backward(int64_t B, const std::vector<CView>& w, const std::vector<float*>& g);
  void rnd(float* x, int64_t n) const { tp_.round(x, n); }
  bool full_recompute(int i) const {
    return recompute_ == Recompute::kFull && (full_layers_ < 0 || i < full_layers_);
  }

  ModelConfig cfg_;
  ParamLayout layout_;
  Backend& backend_;
  std::unique_ptr<LocalParamStore> local_;
  ParamStore* store_ = nullptr;
  TensorParallel tp_;
  SequenceParallelLayerNorm ln_;
  ColumnParallelLinear column_;
  RowParallelLinear row_;
  TransformerBlock block_;  // bidirectional
  std::unique_ptr<Stash> st_;
  std::unique_ptr<Work> ws_;
  std::vector<float> lat_deg_, lat_w_;  // (H)
  std::vector<float> host_patches_, host_targets_, host_loss_;
  int64_t B_ = 0;  // reserved micro-batch
  bool training_ = false;
  Recompute recompute_ = Recompute::kNone;
  int full_layers_ = -1;
  Precision prec_ = Precision::kFp32;
};

}  // namespace weft
