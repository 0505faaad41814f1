// weft's own memory, in closed form: the bytes one rank of a weft training run allocates per
// category (core/memory.h), predicted from the model shape and the layout without building
// anything. The trainer prints it beside the MemoryTracker's measurement at the end of a run;
// the tests hold the two together (states to 1%, activations to 10%).
//
// Where plan/memory.h models Megatron-LM-style mixed-precision training for the planner, this
// models what weft (fp32, CPU backend) holds. Every count of the model itself (parameters per
// chunk, layer and group; stash and workspace elements per micro-batch; the head chunk) is
// read from the family's description (Family::describe, model/description.h: GPT's
// model/gpt/gpt_description.h, ClimaX's model/climax/climax_description.h), which
// tests/model/gpt_description_test.cc and climax_test.cc hold equal to what ParamLayout and the
// models' reserve allocate; this file adds what lies around the model (ZeRO shards over the
// store's groups, the schedule's micro-batches in flight, communication buffers), the same for
// every family. For a GPT:
// - params / grads / optimizer: the ZeRO formulas (Rajbhandari et al. 2020, sec. 5.1) over
//   each model chunk's parameter count (its layers split over tp, LayerNorms and row-parallel
//   biases replicated; Shoeybi et al. 2019 sec. 3), fp32: 4 bytes of parameters, 4 of
//   gradients and 8 of Adam moments per element, sharded as weft shards (ceil(n / dp) per
//   rank, contiguous; under HSDP ceil(n / dp_shard), by the rank's index in its dp_shard
//   group); plus ZeRO-2/3's transient group buffers.
// - activations: Korthikanti et al. 2022 (sec. 4.1, Table 2) per layer and micro-batch,
//   without dropout (weft has none), in elements: the LayerNorm inputs (2 sbh, / t under
//   sequence parallelism), the inputs of the QKV and first MLP products (2 sbh: weft keeps
//   them gathered under sequence parallelism, where Megatron re-gathers them in backward),
//   Q, K, V (3 sbh / t), the softmax output (a s^2 b / t), the attention-projection input
//   (sbh / t), the GELU input and output (2 f s b / t), plus the LayerNorm row statistics
//   (4 sb, / t with SP). Selective recompute drops the a s^2 b / t term (sec. 4.2), full
//   recompute keeps only the layer's output, sbh (/ t with SP) (sec. 3). Times the
//   micro-batches in flight of each chunk under the pipeline schedule (computed by the
//   schedule code itself, parallel/pp/schedule.h: 1F1B min(p - s, m), GPipe m; Narayanan et
//   al. 2021).
// - workspace: one micro-batch's activation gradients (the residual stream's, and of the
//   C-, 3C/t- and F/t-wide products), the row-parallel partial sums (tp > 1), the head's
//   logits chunk and loss statistics (last stage), and the recompute buffers.
// - comm: ZeRO-1's reduce-scatter output, ZeRO-2/3's receive buffers, the pipeline's receive
//   buffers (posted ahead) and one send buffer per message in flight (at least one), and the transient
//   gather of the embedding gradient rows (dp > 1, ZeRO 0/1).
// A ClimaX model (one stage): the same ZeRO states over its groups (the front, the blocks, the
// back), one micro-batch's stash and workspace as ClimaxDescription counts them, no embedding
// exchange.
#pragma once
#include <cstdint>

#include "model/config.h"
#include "parallel/dp/zeropp.h"
#include "plan/memory.h"
#include "plan/shape.h"

namespace weft::plan {

struct WeftRunShape {
  ModelConfig model;
  int64_t seq = 0;             // T
  int64_t micro_batches = 1;   // m: per pipeline and step
  int64_t head_chunk = 0;      // 0: automatic, as GPT::reserve
  int prefetch = 1;            // ZeRO-3 groups gathered ahead
  Layout layout;               // tp, pp, dp, micro_batch, zero, recompute, sp, schedule, v
  // bf16/fp16 runs: the optimizer keeps fp32 master weights of its range (4 more bytes per
  // element; the CPU backend stores the 16-bit values in fp32 buffers, so params stay 4 bytes).
  bool master_weights = false;
  // The storage precision: a bf16/fp16 run stores its activation tensors in 16 bits (the
  // families' descriptions say which: model/block.h's LayerDtypes for the shared block).
  Precision precision = Precision::kFp32;
  // ZeRO-3 + ZeRO++ (parallel/dp/zeropp.h, resolved): the secondary partition, wires, residual.
  ZeroPPConfig zeropp;
  // The backend's products read 16-bit operands in place (Backend::native_16bit_products: the
  // CPU backend's oneDNN bf16 products with [precision] matmul = "fast"): the staging arena.
  bool native_products = false;
};

// Bytes one rank of pipeline stage `stage` (data-parallel rank `dp_rank`, of the whole dp
// group: its shard index under HSDP is dp_rank % dp_shard) allocates per
// category; `total` is the sum of the categories' peaks.
MemoryBreakdown weft_rank_memory(const WeftRunShape& run, int stage, int dp_rank = 0);

}  // namespace weft::plan
