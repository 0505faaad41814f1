// The engine: one rank's part of a model in any tp x pp x dp layout, as model chunks x
// parameter stores x optimizer shards, driven by the pipeline runtime. It trains one step of
// a global batch, evaluates, gathers and loads layout-free state, and produces logits for
// generation. `weft train`, `weft eval`, `weft bench` and `weft generate` all run on it; it
// knows nothing of run folders, metrics or cadences (src/train/).
//
// Each model chunk is a GPT over a range of layers (one per pipeline stage, or v of them with
// the interleaved schedule) with its own DataParallel store (ZeRO 0..3) and AdamW shard; the
// step runs them all and sums their gradient norms. The first and the last chunk share the
// tied embedding, whose gradient is summed between them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "data/batch.h"
#include "model/config.h"
#include "model/model.h"
#include "model/params.h"
#include "parallel/recompute.h"
#include "optim/loss_scale.h"
#include "optim/optim.h"
#include "comm/codec_spec.h"
#include "engine/engine_config.h"
#include "parallel/dp/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/pp/runtime.h"
#include "parallel/pp/schedule.h"

namespace weft {

class Model;
class CommTensorParallel;
class CompressedComm;

struct StepResult {
  double loss = 0.0;           // mean over the global batch's positions (its weight)
  double grad_norm = 0.0;      // of the unscaled gradients, before clipping
  double loss_scale = 1.0;     // the scale this step used
  bool skipped = false;        // fp16 overflow: no update, the scale halved
  bool non_finite = false;     // loss or norm not finite (and nothing to adjust): stop the run
  bool vetoed = false;         // the update veto (Engine::set_update_veto) refused the update
  double dp_exposed_s = 0.0;   // data-parallel communication not hidden by computation
  int64_t positions = 0;       // the global batch's positions (its weight: tokens, patches, atoms)
  // Load balance: this rank's busy time in the step's micro-batches (their wall time less the
  // data-parallel waits exposed in them), its data-parallel group's largest and mean, and
  // imbalance = largest / mean (1 with dp 1: every rank waits for the busiest).
  double busy_s = 0.0, busy_max_s = 0.0, busy_mean_s = 0.0, imbalance = 1.0;
  PipeStepStats pipeline;      // pp > 1
};

class Engine {
 public:
  // Collective over `world` (builds the grid's communicators). The backend outlives the engine.
  Engine(const EngineConfig& cfg, Communicator& world, Backend& backend);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const { return cfg_; }
  ProcessGrid& grid() { return *grid_; }
  Communicator& comm(Axis a) { return grid_->comm(a); }
  int stage() const { return stage_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }
  int64_t accumulation() const { return accum_; }  // micro-batches per step on this dp rank
  PipelineRuntime* pipeline() { return runtime_.get(); }  // null without pp
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  // "layers 0-1 + embedding, layers 4-5" for the log.
  std::string describe_chunks() const;
  int64_t num_params() const;       // this rank's (its tp part of its chunks)
  int64_t num_unpadded() const;
  // Of this rank's stores: the ZeRO-3 gather buffers and ZeRO-2/3 transient gradients.
  DataParallelMemory store_memory() const;

  // --- state ---
  // The whole model's layout (tp = 1, every layer): what checkpoints hold.
  const ParamLayout& whole_layout() const { return *whole_; }
  void init_params(uint64_t seed);
  // Loads whole-model parameters (fp32; with 16-bit storage they become the master weights)
  // and, if not null, the AdamW moments. Every rank passes the same buffers.
  void load_state(const float* params, const float* exp_avg, const float* exp_avg_sq);
  // Gathers the whole model's parameters (the fp32 master weights under mixed precision) and
  // moments onto every rank (collective). Buffers of whole_layout().total() floats.
  void gather_state(float* params, float* exp_avg, float* exp_avg_sq);
  int64_t optimizer_steps() const { return opt_steps_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  // Error feedback (qgZ's or [compression]'s, on the dp gradient path): this rank's residuals,
  // one per chunk in chunk order (empty: none). They hold the part of each step's (loss-scaled)
  // gradients the codec did not deliver; a step that is not applied drops them, a new loss
  // scale rescales them (carry_feedback).
  std::vector<DeviceBuffer*> feedback_residuals();
  // What the residuals belong to: "compression.dp int4", "zero.quantized_gradients int4"; "": none.
  std::string feedback_source() const;
  // Continues a run: the updates done so far and the dynamic loss-scale state.
  void restore_counters(int64_t optimizer_steps, double loss_scale, int64_t good_steps);
  // Optional: asked before each update with the step's loss and gradient norm (finite, reduced:
  // the same bits on every rank, so every rank that installs the same rule decides alike);
  // true skips the update as an fp16 overflow does, without touching the loss scale (the
  // divergence detector's skip-step, train/divergence.h).
  using UpdateVeto = std::function<bool(double loss, double grad_norm)>;
  void set_update_veto(UpdateVeto veto) { veto_ = std::move(veto); }

  // --- work ---
  // One optimizer step at learning rate lr over the global batch that `batch` yields, into
  // host batches of the family's kind (Family::make_batch; a GPT's: data/token_batch.h's
  // token_batches). The loss is the sum of the position losses over the sum of the global
  // batch's weights (HostBatch::weight, summed exactly over dp). Collective.
  StepResult step(float lr, const BatchFn& batch);
  // Mean loss over the `count` rows that `batch` yields (rows [0, count)), dealt round-robin
  // over dp ranks, micro-batch by micro-batch, weighted by their positions: any family (a GPT's
  // validation windows: data/token_batch.h's token_windows). Collective.
  double evaluate_rows(const BatchFn& batch, int64_t count);
  // The model's outputs (Model::output_elems() floats a row, e.g. ClimaX's forecasts) of the
  // `count` rows that `batch` yields, into `out` on every rank: the rows dealt over the dp ranks
  // as by evaluate_rows, each output summed over dp from the rank that made it (exact: zeros
  // elsewhere). Without pipeline stages. Collective.
  void outputs_rows(const BatchFn& batch, int64_t count, float* out);
  // The model of chunk c on this rank (the whole model without pipeline stages).
  Model& model(int c = 0);
  // Generation: sizes the activations for one sequence of up to n_ctx tokens (the training
  // buffers are released), without sequence parallelism; any layout.
  void begin_generation();
  // Back to training after a generation or scoring (weft train's [eval] tasks): the training
  // engine's activations and sequence parallelism again.
  void end_generation();
  // Logits (V real entries) after the last position of one sequence of T tokens, after
  // begin_generation(), on every rank; collective over the grid (pipeline, tp, ZeRO-3 gathers).
  void last_logits(const int32_t* tokens, int64_t T, float* logits);
  // Logits of positions [from, T) of one sequence of T tokens, (T - from) rows of V, after
  // begin_generation(); on every rank, collective like last_logits (a GPT's scoring and
  // weft eval --logits).
  void logits(const int32_t* tokens, int64_t T, int64_t from, float* logits);

 private:
  struct Chunk;
  class PipeAdapter;
  void build_chunks();
  void set_norm_skip(Chunk& ch);
  // Chunk c's activations and workspace for the engine's micro-batch (at construction, and after
  // a generation: end_generation).
  void reserve_training(Chunk& ch, int c);
  double forward_loss(const HostBatch& mb);
  // Floats of a pipeline message (a stage's activations, or their gradient) for `rows` samples on
  // this rank: rows x T x C, over tp with sequence parallelism.
  int64_t pipe_message(int64_t rows) const;
  // Rows mine[i0, i0 + nb) of `batch` into batch_, one at a time (row 0 when nb is 0).
  void fill_rows(const BatchFn& batch, const std::vector<int64_t>& mine, int64_t i0, int64_t nb);
  // Rows [first, first + count) of `batch` into batch_.
  void fill_batch(const BatchFn& batch, int64_t first, int64_t count);
  // The sum of the weights of the step's global batch (over every dp rank's micro-batches).
  int64_t global_weight(const BatchFn& batch);
  // Term totals (HostBatch::term_weights, summed here and over dp) to every chunk's model when
  // the loss has more than one term; InputError when a term's total is not positive.
  void give_term_totals(std::vector<double> totals, const char* what);
  Model& generator(int c);         // generation: the model of chunk c (InputError for a family without)
  // Whole-model buffer (tp = 1 layout) <-> one chunk's part on this rank, through tp.
  void to_local(const Chunk& ch, const float* whole, float* local) const;
  void to_whole(const Chunk& ch, const float* local, float* whole);
  void to_whole_model(const std::function<void(Chunk&, float*)>& local, float* whole);
  void load_params(Chunk& ch, const float* fp32);
  double run_micro_batches(const BatchFn& batch, float loss_scale, PipeStepStats& pipe);
  double grad_norm_sq();
  void carry_feedback(bool applied, double step_scale);

  EngineConfig cfg_;
  Communicator& world_;
  Backend& backend_;
  std::unique_ptr<ProcessGrid> grid_;
  // The tp and pp groups on device buffers of backend_ (cfg_.comm's kind): the tensor-parallel
  // layers' and the pipeline runtime's collectives (declared before their users, which they
  // outlive).
  std::unique_ptr<DeviceComm> tp_device_, pp_device_;
  std::unique_ptr<CommTensorParallel> tp_ops_;
  std::unique_ptr<Communicator> tied_;  // first and last stage: the tied embedding
  // The stores' dp and tied-embedding groups on device buffers of backend_ (before chunks_:
  // they outlive the stores). tied_device_ only on the first and the last stage with pp > 1.
  std::unique_ptr<DeviceComm> dp_device_, tied_device_;
  // [compression]: the compressing communicators over tp_device_, pp_device_ and dp_device_
  // (null where that traffic's codec is off or its axis has one rank).
  std::unique_ptr<CompressedComm> tp_traffic_, pp_traffic_, dp_grad_traffic_, dp_param_traffic_;
  void build_compression();
  std::unique_ptr<ParamLayout> whole_;
  std::unique_ptr<PipelineRuntime> runtime_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  int stage_ = 0, tp_rank_ = 0, dp_rank_ = 0;
  int64_t per_rank_ = 0, accum_ = 0;
  std::unique_ptr<HostBatch> batch_;  // one micro-batch of the family's payload (Family::make_batch)
  LossScaler scaler_;
  int64_t opt_steps_ = 0;  // updates done (fp16 overflow steps are skipped)
  UpdateVeto veto_;
};

}  // namespace weft
