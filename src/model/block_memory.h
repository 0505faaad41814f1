// What the shared transformer block (model/block.h) keeps on an accelerator with 16-bit
// storage, per micro-batch on one rank: Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", sec. 4-5 (the planner's GPU memory model,
// plan/memory.h, for the families that describe their blocks this way).
//
// With 16-bit activations and dropout a block keeps s b h (34 + 5 a s / h) bytes; with tensor
// parallelism t, s b h (10 + 24/t + 5 a s/(h t)); with sequence parallelism s b h / t (34 + 5 a
// s / h); without the attention scores (selective recompute, flash attention) the 5 a s / h term
// goes; full recompute keeps only the block's input, 2 s b h (sec. 5). Without dropout (weft has
// none) the 1-byte masks and the dropout output go: 16 s b h + a s^2 b elements for f = 4h.
#pragma once

namespace weft {

struct BlockShape {
  double s = 0;  // positions of a sample
  double b = 0;  // samples of a micro-batch
  double h = 0;  // hidden size
  double f = 0;  // MLP hidden size
  double a = 0;  // attention heads
  double t = 1;  // tensor-parallel size
  bool sequence_parallel = false;
  double kv = -1;      // key/value width (grouped-query attention: kv heads x head size); < 0: h
  bool gated = false;  // SwiGLU: the first MLP product's output is gate and up (2 s b f)
};

// Bytes a block stashes at `e` bytes per element: LayerNorm inputs and the inputs of the QKV and
// first MLP products replicated over tp unless sequence parallel, the rest divided by tp; the
// attention scores (and with dropout their mask and output) when keep_scores.
double block_stash_bytes(const BlockShape& k, double e, bool keep_scores, bool dropout);
// Bytes a fully recomputed block keeps: its input (2 s b h in 16 bits; / t with sp).
double block_checkpoint_bytes(const BlockShape& k, double e);

}  // namespace weft
