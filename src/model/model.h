// What the engine needs of a model family (DESIGN.md: "the model is written once, for one
// device"): a stack of transformer blocks over one flat parameter layout, fed by the family's
// front (GPT: the token embedding; ClimaX: patch embeddings and the variable aggregation) and
// read by its back (GPT: the tied vocabulary head and cross-entropy; ClimaX: the decoder and the
// latitude-weighted MSE). Data parallelism comes in through the ParamStore, tensor parallelism
// through the TensorParallelOps, the device through the Backend: no family knows its layout.
//
// A micro-batch reaches the model as host memory (MicroBatch: each family reads its own fields);
// the model checks it and uploads it. Losses are sums over the micro-batch's B*T positions
// (tokens, or patches), so that the engine's mean over the global batch is the same whatever
// the layout: a GPT position's loss is its token's cross-entropy, a ClimaX position's the mean
// weighted squared error over the V p^2 values of its patch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/precision.h"
#include "model/params.h"
#include "model/param_store.h"
#include "model/recompute.h"

namespace weft {

class TensorParallelOps;

struct MicroBatch {
  // GPT: token ids (B,T) and their targets.
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  // ClimaX: normalised fields (B,V,H,W) at the input time and at the target time, and the lead
  // times (B) in hours.
  const float* fields = nullptr;
  const float* target_fields = nullptr;
  const float* lead_hours = nullptr;
};

// The host payload of one sample as its family lays it out (Family::sample_size): the engine sizes
// its micro-batch buffers by it and steps through them one sample at a time, without knowing
// what the values are.
struct SampleSize {
  int64_t tokens = 0;   // int32 inputs, and as many int32 targets (GPT: T)
  int64_t fields = 0;   // floats of the input, and as many of the target (ClimaX: V H W)
  int64_t scalars = 0;  // floats of per-sample conditioning (ClimaX: the lead time)
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ParamLayout& layout() const = 0;
  const ModelConfig& config() const { return layout().config(); }
  int64_t num_params() const { return layout().total(); }

  // --- set before reserve() ---
  virtual void set_tp(TensorParallelOps* tp, bool sequence_parallel) = 0;
  virtual void set_store(ParamStore* store) = 0;
  virtual void set_recompute(Recompute mode, int full_layers) = 0;
  virtual void set_precision(Precision p) = 0;
  // Buffers for micro-batches of up to B sequences of T positions (ClimaX: T is its patches);
  // slots: activation sets for micro-batches in flight (pipeline schedules).
  virtual void reserve(int64_t B, int64_t T, bool training, int64_t head_chunk, int slots) = 0;
  virtual int64_t activation_bytes() const = 0;
  // The latitudes (degrees, one per grid row, south to north) of gridded data, for a family
  // whose loss weights the rows by them (ClimaX); the default refuses (the model reads no grid).
  virtual void set_latitudes(const std::vector<float>& lat_deg);
  virtual int64_t workspace_bytes() const = 0;

  // --- the whole model (no pipeline) ---
  // Forward and backward of one micro-batch: returns the sum of its B*T position losses and
  // accumulates d(loss_scale * that sum)/d(params) into the store's gradients.
  virtual double train_micro_batch(const MicroBatch& mb, int64_t B, int64_t T, float loss_scale) = 0;
  // The sum of the position losses, no gradients.
  virtual double loss_sum(const MicroBatch& mb, int64_t B, int64_t T) = 0;

  // --- pipeline stages (a family that cannot be cut into stages refuses pp > 1 in the layout
  // rules; these then fail) ---
  virtual void stage_forward(int slot, const MicroBatch& mb, const float* x_in, int64_t B, int64_t T,
                             bool for_backward) = 0;
  virtual double stage_backward(int slot, const MicroBatch& mb, const float* dy, int64_t B, int64_t T,
                                float loss_scale) = 0;
  virtual double stage_loss(int slot, const MicroBatch& mb, int64_t B, int64_t T) = 0;
  virtual const float* stage_output(int slot) = 0;
  virtual const float* stage_input_grad() const = 0;

  // --- the model's outputs, for a family scored on them beyond its loss (ClimaX's forecasts; the
  // defaults: none) ---
  // Floats of one sample's output (0: the family has none to give).
  virtual int64_t output_elems() const { return 0; }
  // Forward only: the outputs of the B samples of `mb` into host `out` (B * output_elems()).
  virtual void forward_outputs(const MicroBatch& mb, int64_t B, float* out);

  // --- token logits, for a family that generates (ModelCapabilities::generation; the defaults
  // refuse with the family's name) ---
  // Logits (V real entries per row) of positions [from, T) of one sequence of T host tokens.
  virtual void forward_logits(const int32_t* tokens, int64_t T, int64_t from, float* logits_out);
  // The last stage, after stage_forward(slot, ..., 1, T, false) of one sequence: the same rows.
  virtual void stage_logits(int slot, int64_t T, int64_t from, float* logits_out);
};

}  // namespace weft

namespace weft {
// Model FLOPs per position (token or patch) of a training step at sequence length T, the
// family's own count (GptDescription, ClimaxDescription).
double train_flops_per_position(const ModelConfig& m, int64_t T);
}  // namespace weft
