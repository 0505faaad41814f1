// Error-feedback residuals in checkpoints (feedback.safetensors, docs/formats-checkpoint.md).
//
// qgZ's and [compression]'s error feedback keep, on every rank, the part of its gradients the
// codec has not delivered yet (Engine::feedback_residuals). That is per-rank state of one
// layout, unlike the rest of a checkpoint: each data-parallel rank's residual is its own
// (different data), and where a residual element sits depends on the rank's tp part and
// pipeline chunks. The file holds one F32 tensor per rank and chunk, named by grid
// coordinates ("tp1.pp0.dp1.chunk0"), and metadata naming the layout and the source
// ("compression.dp int4").
//
// A resume in the same layout (tp, pp, dp, virtual stages) restores every residual exactly,
// so the run continues bit for bit. In another layout the residuals restart from zero (what
// is lost: one step's worth of undelivered gradient, which error feedback is built to absorb)
// and the log says so with both layouts. The codec may change between runs: a residual is
// gradient not yet delivered, whatever coded it.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"

namespace weft {

class Communicator;
class Engine;

struct FeedbackTensors {
  std::vector<std::vector<float>> data;  // owns what refs point at
  std::vector<TensorRef> refs;           // one per rank and chunk, in world-rank order
  std::map<std::string, std::string> meta;
};

// Collective over `world` (the engine's world): every rank's residuals onto rank 0 (refs empty
// on the other ranks and when the run has no error feedback). Holds them all on rank 0, as the
// checkpoint holds the whole model there.
FeedbackTensors gather_feedback(Engine& engine, Communicator& world);

// Every rank: this rank's residuals from checkpoint `dir` when it holds them for this layout,
// else zero. Returns what happened, for the log ("" when neither the checkpoint nor the run
// has error feedback). Throws InputError naming the file and the tensor when the file claims
// this layout but lacks a tensor or holds one of another size.
std::string restore_feedback(Engine& engine, const std::string& dir);

}  // namespace weft
