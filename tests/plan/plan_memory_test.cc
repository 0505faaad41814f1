// The planner's memory model against closed forms from its sources (the seeds' memory table,
// Rajbhandari et al. 2020, Korthikanti et al. 2022), the model's own parameter layout and the
// pipeline schedules' stash counts.
#include <gtest/gtest.h>

#include "model/params.h"
#include "parallel/pp/partition.h"
#include "parallel/pp/schedule.h"
#include "plan/memory.h"

namespace weft::plan {
namespace {

ModelShape shape_of(const std::string& preset, int64_t seq = 0) { return ModelShape::from_config(model_preset(preset), seq); }

// Seed 004 (Dash et al., "Distributed Training of LLMs on Frontier"): 20 bytes per parameter
// in mixed precision: 440 GB for 22B, 3.5 TB for 175B, 20 TB for 1T.
TEST(PlanMemory, SeedTable) {
  struct Case {
    const char* model;
    double table_bytes;
  };
  for (const Case& c : {Case{"gpt-22b", 440e9}, Case{"gpt-175b", 3.5e12}, Case{"gpt-1t", 20e12}}) {
    const ModelShape m = shape_of(c.model);
    MemoryOptions o;
    o.precision = Precision::kFp16;
    o.global_batch = 1;
    const MemoryBreakdown b = stage_memory(m, Layout{}, o, 0);
    const double states = b.params + b.grads + b.optimizer;
    EXPECT_DOUBLE_EQ(states, 20.0 * m.total_params()) << c.model;
    // The table rounds the parameter count (22B, 175B, 1T); the presets hold 22.05B, 174.6B, 1008B.
    EXPECT_NEAR(states / c.table_bytes, 1.0, 0.01) << c.model << ": " << states / 1e9 << " GB";
  }
  // fp32: 4 + 4 + 8 bytes per parameter; 16-bit without the fp32 accumulation: 2 + 2 + 12.
  const ModelShape m = shape_of("gpt-22b");
  MemoryOptions o;
  o.precision = Precision::kFp32;
  MemoryBreakdown b = stage_memory(m, Layout{}, o, 0);
  EXPECT_DOUBLE_EQ(b.params + b.grads + b.optimizer, 16.0 * m.total_params());
  EXPECT_DOUBLE_EQ(b.optimizer, 8.0 * m.total_params());
  o.precision = Precision::kBf16;
  o.fp32_grad_accumulation = false;
  b = stage_memory(m, Layout{}, o, 0);
  EXPECT_DOUBLE_EQ(b.params + b.grads + b.optimizer, 16.0 * m.total_params());
}

// The planner's parameter counts (read from the model's description, model/gpt_description.h)
// equal what model/params lays out.
TEST(PlanMemory, ParamCountMatchesTheModelLayout) {
  for (const char* name : {"tiny", "gpt2-124m", "gpt2-350m"}) {
    const ModelConfig cfg = model_preset(name);
    const ParamLayout layout = param_layout(cfg);
    EXPECT_DOUBLE_EQ(ModelShape::from_config(cfg).total_params(), static_cast<double>(layout.total_full())) << name;
    // Per tp rank and pipeline stage: the rank's part of ParamLayout.
    for (int tp : {1, 2, 4}) {
      if (cfg.n_head % tp) continue;
      Layout l;
      l.tp = tp;
      l.pp = 2;
      const ModelShape m = ModelShape::from_config(cfg);
      // The trainer's split: the head counts as Vp / (12 C) layers (tiny: 3 + 1 layers).
      const auto parts = partition_layers(cfg.n_layer, 2, 1, {}, pipeline_head_cost(cfg));
      StageSpec first{0, parts[0].num_layers, true, false}, last{parts[1].first_layer, parts[1].num_layers, false, true};
      EXPECT_DOUBLE_EQ(stage_params_per_rank(m, l, 0), static_cast<double>(param_layout(cfg, tp, 0, first).total()))
          << name << " tp " << tp;
      EXPECT_DOUBLE_EQ(stage_params_per_rank(m, l, 1), static_cast<double>(param_layout(cfg, tp, 0, last).total()))
          << name << " tp " << tp;
    }
  }
}

// Mixed precision (bf16) with a global batch of 8 sequences.
MemoryOptions bf16_batch8() {
  MemoryOptions o;
  o.precision = Precision::kBf16;
  o.global_batch = 8;
  return o;
}

TEST(PlanMemory, ZeroPartitionsTheRightCategories) {
  const ModelShape m = shape_of("gpt2-350m");
  MemoryOptions o = bf16_batch8();
  Layout l;
  l.dp = 8;
  const MemoryBreakdown z0 = stage_memory(m, l, o, 0);
  l.zero = 1;
  const MemoryBreakdown z1 = stage_memory(m, l, o, 0);
  l.zero = 2;
  const MemoryBreakdown z2 = stage_memory(m, l, o, 0);
  l.zero = 3;
  const MemoryBreakdown z3 = stage_memory(m, l, o, 0);
  const double n = m.total_params();
  EXPECT_DOUBLE_EQ(z0.optimizer, 12 * n);
  EXPECT_DOUBLE_EQ(z1.optimizer, 12 * n / 8);
  EXPECT_DOUBLE_EQ(z1.grads, 6 * n);
  EXPECT_DOUBLE_EQ(z2.grads, 6 * n / 8);
  EXPECT_DOUBLE_EQ(z2.params, 2 * n);
  EXPECT_DOUBLE_EQ(z3.params, 2 * n / 8);
  // Rajbhandari et al. 2020 Figure 1 (Psi = 7.5B, N_d = 64, K = 12, 2 + 2 + K bytes):
  // 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
  const double psi = 7.5e9, nd = 64;
  EXPECT_NEAR((2 + 2 + 12) * psi / 1e9, 120, 0.1);
  EXPECT_NEAR((2 + 2 + 12 / nd) * psi / 1e9, 31.4, 0.1);
  EXPECT_NEAR((2 + (2 + 12) / nd) * psi / 1e9, 16.6, 0.1);
  EXPECT_NEAR((2 + 2 + 12) / nd * psi / 1e9, 1.9, 0.1);
}

// PyTorch FSDP in mixed precision (memory_model "fsdp"): the sharded fp32 parameters are the
// optimizer's, their gradients fp32, Adam's m and v: 4 + 4 + 8 = 16 bytes per parameter, all
// three sharded by FULL_SHARD (zero 3) and the last two by SHARD_GRAD_OP (zero 2); the gathered
// units stay 16-bit (the comm buffers are Megatron's model's, byte for byte).
TEST(PlanMemory, FsdpStatesAreFp32Shards) {
  const ModelShape m = shape_of("gpt2-350m");
  MemoryOptions o = bf16_batch8();
  Layout l;
  l.dp = 8;
  l.zero = 3;
  const MemoryBreakdown megatron = stage_memory(m, l, o, 0);
  o.memory_model = "fsdp";
  const MemoryBreakdown fsdp = stage_memory(m, l, o, 0);
  const double n = m.total_params();
  EXPECT_DOUBLE_EQ(fsdp.params, 4 * n / 8);
  EXPECT_DOUBLE_EQ(fsdp.grads, 4 * n / 8);
  EXPECT_DOUBLE_EQ(fsdp.optimizer, 8 * n / 8);
  EXPECT_DOUBLE_EQ(fsdp.params + fsdp.grads + fsdp.optimizer, 16 * n / 8);
  EXPECT_DOUBLE_EQ(megatron.params + megatron.grads + megatron.optimizer, 20 * n / 8);
  EXPECT_DOUBLE_EQ(fsdp.comm, megatron.comm);
  EXPECT_DOUBLE_EQ(fsdp.activations, megatron.activations);
  l.zero = 2;
  const MemoryBreakdown grad_op = stage_memory(m, l, o, 0);
  EXPECT_DOUBLE_EQ(grad_op.params, 4 * n);
  EXPECT_DOUBLE_EQ(grad_op.grads, 4 * n / 8);
  // fp32 runs store the same under either model.
  o.precision = Precision::kFp32;
  const MemoryBreakdown f32 = stage_memory(m, l, o, 0);
  o.memory_model = "megatron";
  EXPECT_DOUBLE_EQ(stage_memory(m, l, o, 0).total, f32.total);
}

// Korthikanti et al. 2022, sec. 4: bytes per layer with 16-bit activations and dropout.
TEST(PlanMemory, KorthikantiActivationsPerLayer) {
  ModelShape m = shape_of("gpt-175b");  // s 2048, h 12288, a 96
  const double s = 2048, h = 12288, a = 96, b = 1;
  MemoryOptions o;
  o.precision = Precision::kFp16;
  o.dropout = true;
  Layout l;
  l.micro_batch = 1;
  const double sbh = s * b * h;
  EXPECT_DOUBLE_EQ(layer_stash_bytes(m, l, o), sbh * (34 + 5 * a * s / h));
  for (int t : {2, 8}) {
    l.tp = t;
    l.sequence_parallel = false;
    EXPECT_DOUBLE_EQ(layer_stash_bytes(m, l, o), sbh * (10 + 24.0 / t + 5 * a * s / (h * t))) << "t " << t;
    l.sequence_parallel = true;
    EXPECT_DOUBLE_EQ(layer_stash_bytes(m, l, o), sbh / t * (34 + 5 * a * s / h)) << "t " << t;
    l.recompute = Recompute::kSelective;
    EXPECT_DOUBLE_EQ(layer_stash_bytes(m, l, o), sbh / t * 34) << "t " << t;
    l.recompute = Recompute::kFull;
    EXPECT_DOUBLE_EQ(layer_checkpoint_bytes(m, l, o), 2 * sbh / t);
    l.sequence_parallel = false;
    EXPECT_DOUBLE_EQ(layer_checkpoint_bytes(m, l, o), 2 * sbh);
    l.recompute = Recompute::kNone;
  }
  // weft: no dropout, fp32: 16 s b h + a s^2 b elements of 4 bytes.
  o.dropout = false;
  o.precision = Precision::kFp32;
  l = Layout{};
  l.micro_batch = 4;
  m = shape_of("gpt2-124m");  // s 1024, h 768, a 12
  const double S = 1024, H = 768, A = 12, B = 4;
  EXPECT_DOUBLE_EQ(layer_stash_bytes(m, l, o), 4 * (16 * S * B * H + A * S * S * B));
  // FlashAttention never stores the scores.
  o.flash_attention = true;
  EXPECT_DOUBLE_EQ(layer_stash_bytes(m, l, o), 4 * 16 * S * B * H);
}

// The closed-form stash counts equal the peak in flight of the real schedules.
TEST(PlanMemory, InFlightMatchesTheSchedules) {
  ModelShape m = shape_of("gpt2-124m");  // 12 layers
  m.vocab = 128;  // a head of ~0 layers: the partition is the even split (12 / (p v) per chunk)
  for (int p : {2, 3, 4}) {
    for (int64_t mb : {1, 2, 4, 6, 8, 12}) {
      for (PipeSchedule s : {PipeSchedule::kGpipe, PipeSchedule::k1F1B, PipeSchedule::kInterleaved}) {
        for (int v : {1, 2, 3}) {
          if ((s == PipeSchedule::kInterleaved) != (v > 1)) continue;
          if (s == PipeSchedule::kInterleaved && mb % p != 0) continue;
          if (12 % (p * v) != 0) continue;
          Layout l;
          l.pp = p;
          l.schedule = s;
          l.virtual_stages = v;
          for (int st = 0; st < p; ++st) {
            const int chunks = max_in_flight(stage_schedule(s, p, st, static_cast<int>(mb), v));
            const double expect = chunks * 12.0 / (p * v);  // layers per chunk
            EXPECT_DOUBLE_EQ(in_flight_layers(m, l, mb, st), expect)
                << schedule_name(s) << " p " << p << " m " << mb << " v " << v << " stage " << st;
          }
        }
      }
    }
  }
  // Korthikanti et al. 2022 sec. 4.2.3: the first stage of interleaved 1F1B stashes
  // L (1 + (p - 1)/(p v)) layer-micro-batches (1F1B: p micro-batches of L/p layers = L) (m > p).
  Layout l;
  l.pp = 4;
  l.virtual_stages = 3;
  l.schedule = PipeSchedule::kInterleaved;
  EXPECT_DOUBLE_EQ(in_flight_layers(m, l, 8, 0), 12.0 * (1 + 3.0 / 12));
}

TEST(PlanMemory, RecomputeAndPipelineStages) {
  const ModelShape m = shape_of("gpt2-350m");  // 24 layers
  MemoryOptions o;
  o.precision = Precision::kBf16;
  o.global_batch = 16;
  Layout l;
  l.pp = 4;
  l.micro_batch = 2;
  l.recompute = Recompute::kFull;
  const MemoryBreakdown first = stage_memory(m, l, o, 0), last = stage_memory(m, l, o, 3);
  // The trainer's partition: the head counts as 50304 / (12 x 1024) = 4.1 layers, so the 24
  // layers split 7, 7, 7, 3. 1F1B: stage 0 keeps p = 4 micro-batches of 7 layer inputs, the
  // last stage 1 of 3 (+ the final LayerNorm's input and output).
  EXPECT_EQ(stage_layer_counts(m, l), (std::vector<int64_t>{7, 7, 7, 3}));
  const double ckpt = layer_checkpoint_bytes(m, l, o);
  EXPECT_DOUBLE_EQ(first.activations, 4 * 7 * ckpt);
  EXPECT_DOUBLE_EQ(last.activations, 3 * ckpt + 2 * ckpt);
  // recompute_layers = 2: two layers keep their input, five keep everything.
  l.recompute_layers = 2;
  Layout none = l;
  none.recompute = Recompute::kNone;
  EXPECT_DOUBLE_EQ(stage_memory(m, l, o, 0).activations, 4 * (2 * ckpt + 5 * layer_stash_bytes(m, none, o)));
  EXPECT_GE(worst_stage_memory(m, l, o).total, first.total);
}

}  // namespace
}  // namespace weft::plan
