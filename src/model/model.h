// What the engine needs of a model family (DESIGN.md: "the model is written once, for one
// device"): a stack of transformer blocks over one flat parameter layout, fed by the family's
// front (GPT: the token embedding; ClimaX: patch embeddings and the variable aggregation) and
// read by its back (GPT: the tied vocabulary head and cross-entropy; ClimaX: the decoder and the
// latitude-weighted MSE). Data parallelism comes in through the ParamStore, tensor parallelism
// through the TensorParallelOps, the device through the Backend: no family knows its layout.
//
// A micro-batch reaches the model as host memory (data/batch.h's HostBatch, of the kind its
// family's make_batch creates: each family reads its own payload); the model checks it and
// uploads it. Losses are sums over the micro-batch's positions (its weight(): tokens, patches),
// so that the engine's mean over the global batch is the same whatever the layout: a GPT
// position's loss is its token's cross-entropy, a ClimaX position's the mean weighted squared
// error over the V p^2 values of its patch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/precision.h"
#include "core/view.h"
#include "data/batch.h"
#include "model/params.h"
#include "params/param_store.h"
#include "parallel/recompute.h"

namespace weft {

class TensorParallelOps;

class Model {
 public:
  virtual ~Model() = default;
  virtual const ParamLayout& layout() const = 0;
  virtual const ModelConfig& config() const = 0;
  int64_t num_params() const { return layout().total(); }

  // --- set before reserve() ---
  virtual void set_tp(TensorParallelOps* tp, bool sequence_parallel) = 0;
  virtual void set_store(ParamStore* store) = 0;
  virtual void set_recompute(Recompute mode, int full_layers) = 0;
  virtual void set_precision(Precision p) = 0;
  // Buffers for micro-batches of up to what `capacity` holds: an empty batch of the family's
  // kind (Family::make_batch) that says the family's own capacity (a GPT's B sequences of T
  // tokens, ClimaX's B samples); slots: activation sets for micro-batches in flight (pipeline
  // schedules).
  virtual void reserve(const HostBatch& capacity, bool training, int64_t head_chunk, int slots) = 0;
  // Generation: buffers for one sequence of up to T tokens, no gradients (a family that does
  // not generate refuses, the default).
  virtual void reserve_generation(int64_t T);
  virtual int64_t activation_bytes() const = 0;
  // The latitudes (degrees, one per grid row, south to north) of gridded data, for a family
  // whose loss weights the rows by them (ClimaX); the default refuses (the model reads no grid).
  virtual void set_latitudes(const std::vector<float>& lat_deg);
  virtual int64_t workspace_bytes() const = 0;

  // A loss of several terms (HostBatch::term_weights): before each step's micro-batches, and
  // before an evaluation's, the engine gives the terms' counts summed over the whole global batch
  // (every dp rank), term 0's first. The model scales term t's sums, and their gradients, by
  // totals[0] / totals[t], so that the engine's division by totals[0] averages each term over its
  // own count, whatever the layout. The default (one term) ignores them.
  virtual void set_term_totals(const std::vector<int64_t>& totals) { (void)totals; }

  // --- the whole model (no pipeline) ---
  // Forward and backward of one micro-batch: returns the sum of its position losses (over its
  // weight() positions) and accumulates d(loss_scale * that sum)/d(params) into the store's
  // gradients.
  virtual double train_micro_batch(const HostBatch& mb, float loss_scale) = 0;
  // The sum of the position losses, no gradients.
  virtual double loss_sum(const HostBatch& mb) = 0;

  // --- pipeline stages (a family that cannot be cut into stages refuses pp > 1 in the layout
  // rules; these then fail) ---
  // The messages between stages (x_in, dy, stage_output, stage_input_grad) are the residual
  // stream's rows in its storage dtype (ModelCapabilities::stream_16bit).
  virtual void stage_forward(int slot, const HostBatch& mb, CView x_in, bool for_backward) = 0;
  virtual double stage_backward(int slot, const HostBatch& mb, CView dy, float loss_scale) = 0;
  virtual double stage_loss(int slot, const HostBatch& mb) = 0;
  virtual CView stage_output(int slot) = 0;
  virtual CView stage_input_grad() const = 0;

  // --- the model's outputs, for a family scored on them beyond its loss (ClimaX's forecasts; the
  // defaults: none) ---
  // Floats of one sample's output (0: the family has none to give).
  virtual int64_t output_elems() const { return 0; }
  // Forward only: the outputs of the samples of `mb` into host `out` (samples * output_elems()).
  // A family whose samples differ in size (output_elems() 0) writes outputs_of(mb) floats in
  // its own order (a graph network: each graph's energy, then each atom's force components).
  virtual void forward_outputs(const HostBatch& mb, float* out);
  virtual int64_t outputs_of(const HostBatch& mb) const { return mb.samples() * output_elems(); }

  // --- token logits, for a family that generates (ModelCapabilities::generation; the defaults
  // refuse with the family's name) ---
  // Logits (V real entries per row) of positions [from, T) of one sequence of T host tokens.
  virtual void forward_logits(const int32_t* tokens, int64_t T, int64_t from, float* logits_out);
  // A stage's forward of one sequence of T host tokens (the first stage reads them, a later one
  // x_in), without keeping anything for a backward: generation through a pipeline.
  virtual void stage_forward_tokens(int slot, const int32_t* tokens, CView x_in, int64_t T);
  // The last stage, after stage_forward_tokens(slot, ...) of one sequence: the same rows.
  virtual void stage_logits(int slot, int64_t T, int64_t from, float* logits_out);
};

}  // namespace weft

namespace weft {
// Model FLOPs per position (token or patch) of a training step at sequence length T, the
// family's own count (GptDescription, ClimaxDescription).
double train_flops_per_position(const ModelConfig& m, int64_t T);
}  // namespace weft
