// One model description interface (issue 31): what a family says of one rank's part of a run,
// so that the planner's models read counts instead of testing which family a model is. Each
// family's description (GptDescription, ClimaxDescription: model/<family>/*_description.h) is the
// one source of its counts (DESIGN.md principle 4); Family::describe gives it through this
// interface.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/precision.h"
#include "model/config.h"
#include "model/params.h"
#include "model/recompute.h"

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
};

// What the data-parallel store of a part holds, by its ParamLayout groups (DataParallel sizes its
// buffers from them): n elements, group 0 (1 when the part has none), the largest other group
// (ZeRO-2/3's group slots), and the positions whose embedding-gradient rows the store exchanges
// as (token, row) pairs (0: none).
struct StoreGroups {
  int64_t n = 0, g0 = 1, max_other = 1, exchange_tokens = 0;
};

// A tensor-parallel collective of one micro-batch outside the blocks, in fp32 elements.
struct TpCall {
  const char* op;  // "all_reduce", "all_gather", "reduce_scatter"
  int64_t elems;
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
  // --- one micro-batch's buffers (elements of 4 bytes in weft's CPU runs) ---
  virtual int64_t stash_elems() const = 0;      // one activation slot
  virtual int64_t workspace_elems() const = 0;  // shared by every micro-batch in flight
  virtual int64_t residual_elems() const = 0;   // a pipeline message (0: no pipeline stages)
  // --- the blocks' traffic (the planner's communication model) ---
  virtual int64_t tokens() const = 0;             // positions of a micro-batch in the blocks (B T)
  virtual int64_t part_layers() const = 0;        // the part's blocks
  virtual int64_t recomputed_layers() const = 0;  // of them, fully recomputed
  // Its front's and back's tensor-parallel calls of one micro-batch on a rank of tp > 1 (the
  // blocks' are the shared block's): embeddings, a vocabulary-parallel head, a variable
  // aggregation.
  virtual std::vector<TpCall> tp_calls() const = 0;
  // --- compute ---
  virtual double train_flops_per_position() const = 0;
};

}  // namespace weft
