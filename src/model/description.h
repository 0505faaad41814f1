// One model description interface (issue 31): what a family says of one rank's part of a run,
// so that the planner's models read counts instead of testing which family a model is. Each
// family's description (GptDescription, ClimaxDescription: model/<family>/*_description.h) is the
// one source of its counts (DESIGN.md principle 4); Family::describe gives it through this
// interface.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/staging.h"
#include "core/precision.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/recompute.h"

namespace weft {

// What one rank runs: the model, the micro-batch and the rank's part of the layout.
struct RunSpec {
  ModelConfig model{};
  int64_t B = 1;                   // samples (sequences) per micro-batch
  int64_t T = 0;                   // positions of a sample (a family that fixes them ignores it)
  int tp = 1;                      // tensor-parallel size t (ParamLayout's tp_size)
  bool sequence_parallel = false;  // takes effect with tp > 1 only
  Recompute recompute = Recompute::kNone;
  int recompute_layers = -1;       // kFull: the part's first layers recomputed; -1: all
  Precision precision = Precision::kFp32;
  int64_t head_chunk = 0;          // rows of logits materialised at once; 0: automatic
  StageSpec stage{};               // the pipeline part (default: the whole model)
  bool training = true;            // false: forward only (no gradient scratch, no recompute)
  // The backend offers flash attention: a layer stashes the log-sum-exp instead of the
  // probabilities. The planner, which has no backend, leaves it false.
  bool attention_lse = false;
  // The working parameters' storage (the data-parallel store's: the 16-bit type of a bf16/fp16
  // engine run; a model on its own local store keeps f32). The typed ops stage 16-bit weights.
  DType param_dtype = DType::kF32;
  // The backend's typed defaults (backend.h): the rows a row-chunked op stages at a time
  // (Backend::staging_chunk), and whether its products read 16-bit operands in place
  // (Backend::native_16bit_products: the CPU backend's oneDNN bf16 products with matmul = fast).
  int64_t staging_chunk = kStagingChunk;
  bool native_products = false;
};

// What the data-parallel store of a part holds, by its ParamLayout groups (DataParallel sizes its
// buffers from them): n elements, group 0 (1 when the part has none), the largest other group
// (ZeRO-2/3's group slots), and the positions whose embedding-gradient rows the store exchanges
// as (token, row) pairs (0: none).
struct StoreGroups {
  int64_t n = 0, g0 = 1, max_other = 1, exchange_tokens = 0;
};

// A tensor-parallel collective of one micro-batch outside the blocks: elements, and bytes each.
struct TpCall {
  const char* op;  // "all_reduce", "all_gather", "reduce_scatter"
  int64_t elems;
  int64_t elem_bytes = 4;  // as moved: a 16-bit activation all-gathered as stored is 2
};

// --- the planner's accelerator model (plan/predict.cc, plan/memory.cc: GPU systems, 16-bit
// storage): what a part runs and keeps, which the planner prices; weft's own CPU buffers are the
// element counts above ---

// One kernel of a micro-batch outside the shared blocks: a matrix product (m x k) @ (k x n),
// `batch` of them, when k > 0; else a memory-bound kernel moving `elems` elements (read +
// written) of the compute precision's bytes, or of 4 bytes when `fp32`, whose arithmetic
// (`flops`, counted as hardware FLOPs) does not set its time, unless it evaluates the named
// elementwise `function` (an activation, "ssp" or "ssp_backward": backend.h's names) on
// `functions` elements, which a device with a measured rate for it (plan/system.h's
// Device::function_rates: a CPU's libm) prices when they take longer than its bytes. `times`
// identical kernels.
struct Kernel {
  double m = 0, n = 0, k = 0, batch = 1;
  int trans = 0;  // a product's operand layout: 0 C = A B, 1 C = A B^T, 2 C = A^T B (plan/gemm_table.h)
  double elems = 0;
  bool fp32 = false;
  double flops = 0;
  std::string function;
  double functions = 0;
  double times = 1;
  static Kernel product(double m, double n, double k, double batch = 1, double times = 1, int trans = 0) {
    Kernel r;
    r.m = m, r.n = n, r.k = k, r.batch = batch, r.times = times, r.trans = trans;
    return r;
  }
  // C = A B^T (a linear layer y = x W's input gradient dX = dY W^T as the backends run it; the
  // GPT head's logits x wte^T) and C = A^T B (a weight gradient dW = X^T dY).
  static Kernel product_abt(double m, double n, double k, double batch = 1, double times = 1) {
    return product(m, n, k, batch, times, 1);
  }
  static Kernel product_atb(double m, double n, double k, double batch = 1, double times = 1) {
    return product(m, n, k, batch, times, 2);
  }
  static Kernel memory(double elems, double times = 1) {
    Kernel r;
    r.elems = elems, r.times = times;
    return r;
  }
};

// A tensor-parallel collective of such a pass: `elems` elements at the compute precision (4
// bytes when `fp32`); `exact` ones (statistics, small weight gradients) never carry a codec.
struct EndCollective {
  const char* op;  // "all_reduce", "all_gather", "reduce_scatter"
  double elems;
  bool fp32 = false;
  bool exact = false;
};

struct EndPass {
  std::vector<Kernel> kernels;     // in order
  std::vector<EndCollective> tp;   // on a rank of tp > 1
};

// The front (the stage that reads the data) and the back (the stage with the loss) of one
// micro-batch, forward and backward; a backward product lists its two products, dX = dY W^T
// (m x k, inner n) and dW = X^T dY (k x n, inner m).
struct EndsWork {
  EndPass front_forward, front_backward, back_forward, back_backward;
};

// How an accelerator run stores what a part keeps: `e` bytes per element (2 for 16-bit
// storage), dropout masks, flash attention (Dao et al. 2022: no attention probabilities kept).
struct AcceleratorOptions {
  double e = 2;
  bool dropout = false;
  bool flash_attention = false;
};

// Bytes one rank of the part keeps on an accelerator per micro-batch, and the group sizes the
// ZeRO-3 buffers hold (elements).
struct AcceleratorMemory {
  double layer = 0;            // one block's stash, averaged over the part's blocks (recompute)
  double per_micro_batch = 0;  // stashed outside the blocks, per micro-batch in flight
  double workspace = 0;        // transient, at the peak
  double pipeline = 0;         // a pipeline stage's send and receive buffers
  double front_gathered = 0;   // ZeRO-3: group 0 held through the step (0: gathered like the others)
  double slot = 0;             // ZeRO-3: a gathered group (the planner holds two: in use, prefetched)
};

class ModelDescription {
 public:
  virtual ~ModelDescription() = default;
  // --- parameters (elements) ---
  virtual int64_t rank_params() const = 0;           // the part on this tp rank
  virtual int64_t total_params() const = 0;          // the whole model, tp 1, each tensor once
  virtual int64_t layer_params() const = 0;          // one transformer block on this tp rank
  virtual int64_t front_params() const = 0;          // group 0 (the embeddings) on this tp rank
  virtual StoreGroups store_groups() const = 0;
  // --- one micro-batch's buffers ---
  virtual int64_t stash_elems() const = 0;      // one activation slot (elements)
  virtual int64_t workspace_elems() const = 0;  // shared by every micro-batch in flight (elements)
  // Their bytes: a family whose buffers hold 16-bit tensors overrides these. Default: 4 bytes an
  // element (fp32 buffers).
  virtual int64_t stash_bytes() const { return 4 * stash_elems(); }
  virtual int64_t workspace_bytes() const { return 4 * workspace_elems(); }
  // The backend's staging arena the part reserves for its 16-bit tensors (backend.h's typed
  // ops): one per backend, so a rank holds the largest of its chunks'. Default: 0.
  virtual int64_t staging_bytes() const { return 0; }
  virtual int64_t residual_elems() const = 0;   // a pipeline message (0: no pipeline stages)
  virtual DType residual_dtype() const { return DType::kF32; }  // its dtype (the residual stream's)
  // --- the blocks' traffic (the planner's communication model) ---
  virtual int64_t tokens() const = 0;             // positions of a micro-batch in the blocks (B T)
  // Positions a micro-batch trains on average (the planner's positions per second): tokens(),
  // or for a family of variable-size samples (graphs) the data's mean.
  virtual double mean_positions() const { return static_cast<double>(tokens()); }
  virtual int64_t part_layers() const = 0;        // the part's blocks
  virtual int64_t recomputed_layers() const = 0;  // of them, fully recomputed
  // Its front's and back's tensor-parallel calls of one micro-batch on a rank of tp > 1 (the
  // blocks' are the shared block's): embeddings, a vocabulary-parallel head, a variable
  // aggregation.
  virtual std::vector<TpCall> tp_calls() const = 0;
  // --- compute ---
  virtual double train_flops_per_position() const = 0;
  // --- the accelerator model (above) ---
  virtual EndsWork ends_work() const = 0;
  virtual AcceleratorMemory accelerator_memory(const AcceleratorOptions& o) const = 0;
};

}  // namespace weft
