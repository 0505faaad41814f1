// Closed-form memory per rank, by category, for one pipeline stage of a layout.
//
// Categories (bytes on one rank):
//   params       the working copy of the stage's parameters (ZeRO-3: a 1/dp shard)
//   grads        gradients: 16-bit gradients + the fp32 accumulation buffer in mixed
//                precision, fp32 gradients in fp32 (ZeRO-2/3: a 1/dp shard)
//   optimizer    Adam: fp32 master weights + m + v in mixed precision, m + v in fp32
//                (ZeRO-1/2/3: a 1/dp shard)
//   activations  activations stashed for the backward pass at the peak of the schedule
//                (the micro-batches in flight on this stage x its layers)
//   workspace    transient buffers at the peak: activation gradients of one layer, the layer
//                rematerialised under full recompute, the head's logits on the last stage
//   comm         communication buffers: data-parallel gradient bucket, ZeRO-3 gathered
//                parameters, pipeline send/receive buffers; ZeRO++'s wires (below)
// Under HSDP (Layout::dp_replicate > 1) "dp" in the ZeRO shares above is dp_shard: each
// replica holds a whole ZeRO-sharded copy of the model.
//
// ZeRO++ (Wang et al. 2023, arXiv 2306.10209; the layout's knobs, plan/zeropp.h):
// - hpZ keeps, from each group's forward gather until the optimizer step, 1/alpha of the
//   gathered weights in 16 bits: e Psi / alpha bytes more per rank (DeepSpeed's
//   ds_secondary_tensor, in the parameters' dtype), counted in params (and hpz_secondary).
// - qwZ receives the two gathered layers as int8 + fp32 scales before dequantizing them:
//   2 layers x (1 + 4/G) bytes per element more in comm.
// - qgZ sends and receives a layer's gradient as int4 + scales and keeps the first hop's fp32
//   partial sum: a layer x (2 (0.5 + 4/G) + 4/n_1) bytes more in comm (DeepSpeed reduces one
//   tensor at a time).
//
// Sources:
// - Bytes per parameter in mixed precision with Adam: 2 (fp16/bf16 parameters) + 2 (16-bit
//   gradients) + 12 (fp32 master parameters, momentum, variance) = 16 (Rajbhandari et al.
//   2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", sec. 3.1:
//   K = 12); ZeRO stage 1 partitions the 12 over the dp ranks, stage 2 also the gradients,
//   stage 3 also the parameters (ibid., sec. 5.1, Figure 1). Megatron-LM and the seeds
//   (Dash et al., "Distributed Training of LLMs on Frontier", memory table: 20 bytes per
//   parameter, 440 GB for 22B, 3.5 TB for 175B, 20 TB for 1T) add 4 bytes of fp32 gradient
//   accumulation ("gradients are always kept in fp32"): 20 bytes in total.
// - fp32 training: 4 (parameters) + 4 (gradients) + 8 (Adam m, v) = 16 bytes per parameter.
// - Activations per layer: Korthikanti et al. 2022, "Reducing Activation Recomputation in
//   Large Transformer Models", sec. 4: with 16-bit activations and dropout,
//   s b h (34 + 5 a s / h) bytes; with tensor parallelism t, s b h (10 + 24/t + 5 a s/(h t));
//   with sequence parallelism, s b h / t (34 + 5 a s / h); selective recompute drops the
//   5 a s / h term; full recompute keeps only the layer input, 2 s b h (sec. 5).
//   Without dropout (weft has none) the 1-byte masks and the dropout output disappear:
//   16 s b h + a s^2 b elements per layer for f = 4h (see layer_stash_bytes).
// - Micro-batches in flight: GPipe keeps m (Huang et al. 2019); 1F1B keeps min(p - i, m) on
//   stage i (Narayanan et al. 2021, PipeDream-Flush); interleaved 1F1B keeps Megatron's
//   warm-up + 1 chunks, min(2 (p - i - 1) + (v - 1) p + 1, m v) (all m v when m == p), which
//   on the first stage is L (1 + (p - 1)/(p v)) layer-micro-batches against 1F1B's p x L/p = L
//   (Korthikanti et al. 2022, sec. 4.2.3). These equal max_in_flight(stage_schedule(...)) of parallel/pp/schedule.h.
#pragma once
#include <cstdint>
#include <string>

#include "plan/shape.h"

namespace weft::plan {

struct MemoryOptions {
  Precision precision = Precision::kBf16;
  int64_t global_batch = 1;
  // Mixed precision: keep an fp32 gradient accumulation buffer (Megatron's main_grad; the
  // seeds' 20 bytes per parameter). Ignored for fp32.
  bool fp32_grad_accumulation = true;
  bool dropout = false;          // Korthikanti's dropout masks and outputs (weft: no dropout)
  bool flash_attention = false;  // the a s^2 b attention scores are never stored (Dao et al. 2022)
  // Data-parallel gradient bucket (Megatron DDP: 40M elements), in elements; 0: none.
  double dp_bucket_elements = 40e6;
  // "megatron": the formulas below; "fsdp": the same with PyTorch FSDP's states in mixed
  // precision (bytes_per_param); "weft": weft's own buffers (plan/weft_memory.h), used for
  // systems written by `weft calibrate`.
  std::string memory_model = "megatron";
  // "weft" only: the run's products read bf16 tensors in place (WeftRunShape::native_products).
  bool native_products = false;
};

// Bytes per category on one rank. `total` is their sum.
struct MemoryBreakdown {
  double params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, comm = 0, total = 0;
  // Of params: ZeRO++'s hpZ secondary copy (e Psi / alpha; Wang et al. 2023 sec. 3.2).
  double hpz_secondary = 0;
  int stage = 0;  // the pipeline stage these bytes are for
  void sum() { total = params + grads + optimizer + activations + workspace + comm; }
};

// Parameters (elements) held by one rank of pipeline stage `stage`: its layers split over
// tp (LayerNorms and row-parallel biases replicated), the token embedding (split over tp)
// and positions on stage 0, the final LayerNorm and the tied head (a copy of the embedding
// group when pp > 1, as weft's StageSpec keeps it) on the last stage.
double stage_params_per_rank(const ModelShape& m, const Layout& l, int stage);

// Bytes per parameter of each category before ZeRO partitioning.
// Bytes per parameter a rank stores before ZeRO shards them. fp32: 4 + 4 + 8 (Adam's m, v).
// 16-bit, "megatron": 2 + 2 (+ 4: the fp32 gradient accumulation buffer) + 12 (fp32 master, m,
// v; Rajbhandari et al. 2020 K = 12). 16-bit, "fsdp": 4 + 4 + 8 = 16 (PyTorch FSDP with
// MixedPrecision(param_dtype = 16-bit), as Composer's DEFAULT and torchtitan run it: the sharded
// flat parameters stay fp32 and are the optimizer's, their gradients are fp32, the 16-bit
// parameters exist only gathered, for the unit being computed; Zhao et al. 2023 sec. 3.3-4).
struct BytesPerParam {
  double params, grads, optimizer;
};
BytesPerParam bytes_per_param(const MemoryOptions& o);

// What every family's rank holds around its model, in the 16-bit model of GPU systems: the ZeRO
// states of its n_params parameters over dp_shard (params, grads, optimizer: Rajbhandari et al.
// 2020 sec. 5.1; HSDP: each replica a whole sharded copy).
void add_zero_states(MemoryBreakdown& r, double n_params, const Layout& l, const MemoryOptions& o);
// Its communication buffers: the dp gradient bucket (ZeRO 0-2); ZeRO-3's gathered groups (`front`
// elements held through the step, 0 when group 0 is gathered like the others, and two `slot`s:
// the group in use and the prefetched one), their ZeRO++ wires and the hpZ copy (added to
// r.params); `pipeline` bytes of pipeline buffers; the error-feedback residual.
double comm_buffers(MemoryBreakdown& r, double n_params, double front, double slot, double pipeline, const Layout& l,
                    const MemoryOptions& o);

// Bytes one transformer layer stashes for the backward pass for one micro-batch on one
// rank, without recompute (Korthikanti et al. 2022 sec. 4.1; see the header comment). Split
// as Korthikanti's terms split: LayerNorm inputs and the inputs of the QKV and first MLP
// products are replicated over tp unless sequence parallel; the rest is divided by tp.
// With recompute selective or flash attention, the attention-score terms are left out.
double layer_stash_bytes(const ModelShape& m, const Layout& l, const MemoryOptions& o);
// Bytes a layer keeps under full recompute: its input (2 s b h in 16 bits; / t with sp).
double layer_checkpoint_bytes(const ModelShape& m, const Layout& l, const MemoryOptions& o);

// Micro-batches in flight on `stage`, counted in units of the stage's layers: the stash
// peak is in_flight_layers(...) layer-micro-batches (see the header comment for sources).
double in_flight_layers(const ModelShape& m, const Layout& l, int64_t micro_batches, int stage);

// Memory on one rank of pipeline stage `stage` (0..pp-1).
MemoryBreakdown stage_memory(const ModelShape& m, const Layout& l, const MemoryOptions& o, int stage);
// The stage with the largest total (ties: the first).
MemoryBreakdown worst_stage_memory(const ModelShape& m, const Layout& l, const MemoryOptions& o);

}  // namespace weft::plan
