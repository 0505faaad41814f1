// The model's description of itself (model/gpt_description.h) against what the model really
// allocates and lays out: the bytes GPT::reserve allocates (activation_bytes,
// stash_bytes_per_slot, workspace_bytes) and ParamLayout's counts, over a table of layouts
// (tiny and small presets; tp 1 and 2, every tp rank; sequence parallelism on and off;
// recompute none, selective, full and full of the first layer only; fp32 and bf16; automatic
// and explicit head chunks; whole model and first, middle and last pipeline parts; training
// and forward only). Plus closed forms from the sources for one case of each count.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/gpt/gpt.h"
#include "model/family.h"
#include "model/gpt/gpt_description.h"

namespace weft {
namespace {

struct Part {
  const char* name;
  StageSpec stage;
};

// Whole model, then first, middle and last pipeline parts of L layers (L >= 4).
std::vector<Part> parts_of(int L) {
  const int a = L / 2, b = a + (L - a) / 2;
  return {{"whole", {}}, {"first", {0, a, true, false}}, {"middle", {a, b - a, false, false}},
          {"last", {b, L - b, false, true}}};
}

struct Mode {
  Recompute recompute;
  int layers;  // recompute_layers
};
constexpr Mode kModes[] = {{Recompute::kNone, -1}, {Recompute::kSelective, -1}, {Recompute::kFull, -1},
                           {Recompute::kFull, 1}};

// Reserves every setting of the table on one GPT (one tp rank of one part) and compares the
// bytes with the description's. Returns the number of settings checked.
int check_reserves(GPT& g, const ModelConfig& mc, int tp, const StageSpec& stage, const std::string& who,
                   std::vector<Precision> precisions = {Precision::kFp32, Precision::kBf16}) {
  const int64_t B = 2, T = 24;  // N = 48: divisible by tp 2, more rows than head chunk 20
  int checked = 0;
  for (bool sp : {false, true}) {
    if (sp && tp == 1) continue;
    g.set_tp(nullptr, sp);  // reserve communicates nothing: no ops needed
    for (const Mode& mode : kModes) {
      for (Precision prec : precisions) {
        for (int64_t chunk : {int64_t{0}, int64_t{20}}) {
          for (bool training : {true, false}) {
            g.set_recompute(mode.recompute, mode.layers);
            g.set_precision(prec);
            g.reserve(B, T, training, chunk);
            const GptDescription d({.model = mc, .B = B, .T = T, .tp = tp, .sequence_parallel = sp,
                                    .recompute = mode.recompute, .recompute_layers = mode.layers, .precision = prec,
                                    .head_chunk = chunk, .stage = stage, .training = training});
            const std::string what = fmt::format("{} sp {} {}({}) {} chunk {} training {}", who, sp,
                                                 recompute_name(mode.recompute), mode.layers, precision_name(prec),
                                                 chunk, training);
            EXPECT_EQ(g.stash_bytes_per_slot(), d.stash_bytes()) << what;
            EXPECT_EQ(g.activation_bytes(), d.stash_bytes()) << what;  // slot 0 only
            EXPECT_EQ(g.workspace_bytes(), d.workspace_bytes()) << what;
            ++checked;
          }
        }
      }
    }
  }
  return checked;
}

// ParamLayout's counts of one tp rank's part against the description's.
void check_params(const ParamLayout& lay, const GptDescription& d, const std::string& who) {
  const ModelConfig& mc = d.spec().model;
  EXPECT_EQ(lay.total(), d.rank_params().part) << who;
  EXPECT_EQ(lay.total_full(), d.full_params().part) << who;
  const int l0 = lay.first_layer();
  for (int l = l0; l < l0 + lay.num_layers(); ++l) {
    const auto [b, e] = lay.layer_range(l);
    EXPECT_EQ(e - b, d.rank_params().layer) << who << " layer " << l;
  }
  if (lay.has_group(0)) {
    const auto [b, e] = lay.group_range(0);
    EXPECT_EQ(e - b, d.rank_params().embedding) << who;
  }
  if (lay.has_group(mc.n_layer + 1)) {
    const auto [b, e] = lay.group_range(mc.n_layer + 1);
    EXPECT_EQ(e - b, d.rank_params().back()) << who;
  }
  const ParamLayout whole = param_layout(mc);
  EXPECT_EQ(whole.total(), d.total_params()) << who;
  EXPECT_EQ(whole.total_full(), d.total_params()) << who;
}

TEST(GptDescription, EqualsWhatTheModelAllocatesAndLaysOut) {
  auto be = make_cpu_backend();
  int settings = 0;
  for (const char* preset : {"tiny", "small"}) {
    const ModelConfig mc = model_preset(preset);
    for (const Part& part : parts_of(mc.n_layer)) {
      for (int tp : {1, 2}) {
        for (int rank = 0; rank < tp; ++rank) {
          const std::string who = fmt::format("{} {} tp {} rank {}", preset, part.name, tp, rank);
          GPT g(mc, *be, true, tp, rank, part.stage);
          check_params(g.layout(), GptDescription({.model = mc, .B = 1, .T = 24, .tp = tp, .stage = part.stage}), who);
          settings += check_reserves(g, mc, tp, g.layout().stage(), who);
        }
      }
    }
  }
  EXPECT_EQ(settings, 2 * 4 * (1 + 2 * 2) * 4 * 2 * 2 * 2);  // presets x parts x (tp, rank, sp) x modes x ...
}

// The decoder variants (model/config.h's BlockOptions; fp32 storage): llama-tiny (rotary positions,
// RMSNorm, no biases, SwiGLU, 2 kv heads of 4, a tied head) and an untied, multi-query variant
// with biases, partial rotary positions and GELU.
TEST(GptDescription, VariantsEqualWhatTheModelAllocates) {
  auto be = make_cpu_backend();
  ModelConfig mqa = model_preset("small");
  mqa = mqa.family->with_settings(mqa, {{"position", "rope"}, {"rope_fraction", "0.5"}, {"norm", "rmsnorm"},
                                        {"n_kv_head", "2"}, {"tie_embeddings", "false"}});
  int settings = 0;
  for (const ModelConfig& mc : {model_preset("llama-tiny"), mqa}) {
    for (const Part& part : parts_of(mc.n_layer)) {
      for (int tp : {1, 2}) {
        for (int rank = 0; rank < tp; ++rank) {
          const std::string who = fmt::format("{} {} tp {} rank {}", mc.name, part.name, tp, rank);
          GPT g(mc, *be, true, tp, rank, part.stage);
          check_params(g.layout(), GptDescription({.model = mc, .B = 1, .T = 24, .tp = tp, .stage = part.stage}), who);
          settings += check_reserves(g, mc, tp, g.layout().stage(), who, {Precision::kFp32});
        }
      }
    }
  }
  EXPECT_EQ(settings, 2 * 4 * (1 + 2 * 2) * 4 * 2 * 2);
}

// Closed forms of llama-tiny's counts (L 4, C 256, 4 heads of 64, 2 kv heads, F 768, Vp 50304).
TEST(GptDescription, VariantClosedForms) {
  const ModelConfig mc = model_preset("llama-tiny");
  const int64_t L = 4, C = 256, KV = 128, F = 768, Vp = 50304, B = 2, T = 32, N = B * T, NH = 4;
  const GptDescription d({.model = mc, .B = B, .T = T});
  // A layer: two RMSNorm weights, q k v (C + 2 KV columns), the projection, gate and up, down.
  EXPECT_EQ(d.rank_params().layer, 2 * C + C * (C + 2 * KV) + C * C + C * 2 * F + F * C);
  EXPECT_EQ(d.rank_params().embedding, Vp * C);  // no positions' table
  EXPECT_EQ(d.rank_params().final_norm, C);
  EXPECT_EQ(d.rank_params().head, 0);  // tied
  const double l = L, c = C, t = T;
  EXPECT_DOUBLE_EQ(d.train_flops_per_token(),
                   6 * (l * (c * (c + 2 * KV) + c * c + c * 2 * F + F * c) + double(Vp) * c) + 12 * l * c * t);
  // The stash: ln1, ln2 (N C each) with rstd alone (N each), q k v expanded (3 N C), the
  // probabilities, atty and res2 (N C each), gate and up (2 N F), their product (N F), res3.
  EXPECT_EQ(d.layer_stash_elems(0), 8 * N * C + 2 * N + NH * T * T * B + 3 * N * F);
  // The workspace's variant pieces: the compact q, k, v (N (C + 2 KV)), the gate and up gradient
  // (N 2F, training), the rotary tables (T x 32, twice).
  EXPECT_EQ(d.qkvc_elems(), N * (C + 2 * KV));
  EXPECT_EQ(d.dfc_elems(), N * 2 * F);
  EXPECT_EQ(GptDescription({.model = mc, .B = B, .T = T, .training = false}).dfc_elems(), 0);
  EXPECT_EQ(d.rope_table_elems(), T * 32);
  // bf16 storage is refused by name (the variants run in fp32 for now).
  EXPECT_THROW(GptDescription({.model = mc, .B = B, .T = T, .precision = Precision::kBf16}).staging_elems(), InputError);
}

// Closed forms from the sources, for the tiny preset (L 4, NH 4, C 256, F 4C, Vp 50304, n_ctx 256).
TEST(GptDescription, ClosedForms) {
  const ModelConfig mc = model_preset("tiny");
  const int64_t L = 4, C = 256, NH = 4, Vp = 50304, ctx = 256;
  const int64_t B = 2, T = 32, N = B * T;
  const GptDescription d({.model = mc, .B = B, .T = T});
  // Parameters: 12 C^2 + 13 C per layer (4C^2 + 2CF + F + 9C at F = 4C), the embedding group
  // (Vp + n_ctx) C, ln_f 2C.
  EXPECT_EQ(d.rank_params().layer, 12 * C * C + 13 * C);
  EXPECT_EQ(d.rank_params().embedding, (Vp + ctx) * C);
  EXPECT_EQ(d.total_params(), L * (12 * C * C + 13 * C) + (Vp + ctx) * C + 2 * C);
  // tp 2 (Shoeybi et al. 2019 sec. 3): 6C replicated + (12 C^2 + 7 C)/2 split; wte Vp/2 rows.
  const GptDescription d2({.model = mc, .B = B, .T = T, .tp = 2});
  EXPECT_EQ(d2.rank_params().layer, 6 * C + (12 * C * C + 7 * C) / 2);
  EXPECT_EQ(d2.rank_params().embedding, (Vp / 2 + ctx) * C);
  // FLOPs (PaLM appendix B): 6 (L 12 C^2 + Vp C) + 12 L C T; a layer's forward 24 C^2 + 4 C T.
  const double l = L, c = C, v = Vp, t = T;
  EXPECT_DOUBLE_EQ(d.train_flops_per_token(), 6 * (l * 12 * c * c + v * c) + 12 * l * c * t);
  EXPECT_DOUBLE_EQ(GPT::train_flops_per_token(mc, T), d.train_flops_per_token());
  EXPECT_DOUBLE_EQ(d.layer_forward_flops_per_token(), 24 * c * c + 4 * c * t);
  EXPECT_DOUBLE_EQ(d.recompute_flops_per_token(), 0.0);
  const GptDescription full1({.model = mc, .B = B, .T = T, .recompute = Recompute::kFull, .recompute_layers = 1});
  EXPECT_DOUBLE_EQ(full1.recompute_flops_per_token(), 24 * c * c + 4 * c * t);
  const GptDescription sel({.model = mc, .B = B, .T = T, .recompute = Recompute::kSelective});
  EXPECT_DOUBLE_EQ(sel.recompute_flops_per_token(), l * 4 * c * t);
  // A layer's stash without dropout (Korthikanti et al. 2022 sec. 4.1 at f = 4h, in elements):
  // 16 N C + NH T^2 B, plus 4 N LayerNorm statistics; selective drops NH T^2 B; full keeps N C.
  EXPECT_EQ(d.layer_stash_elems(0), 16 * N * C + 4 * N + NH * T * T * B);
  EXPECT_EQ(sel.layer_stash_elems(0), 16 * N * C + 4 * N);
  EXPECT_EQ(full1.layer_stash_elems(0), N * C);
  EXPECT_EQ(full1.layer_stash_elems(1), d.layer_stash_elems(1));
  EXPECT_EQ(full1.recomputed_layers(), 1);
  // GPT::reserve's automatic head chunk: 2^25 / 50304 = 667 -> 512 rows, at most N.
  EXPECT_EQ(d.head_chunk(), N);
  EXPECT_EQ(GptDescription({.model = mc, .B = 32, .T = 32}).head_chunk(), 512);
}

TEST(GptDescription, RefusesWhatTheModelRefuses) {
  const ModelConfig mc = model_preset("tiny");
  try {
    GptDescription({.model = mc, .B = 1, .T = 32, .tp = 3});
    FAIL() << "tp 3 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "4 attention heads are not divisible by tp 3");
  }
  try {
    GptDescription({.model = mc, .B = 1, .T = 33, .tp = 2, .sequence_parallel = true});
    FAIL() << "33 tokens over tp 2 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "sequence parallelism: micro-batch 1 x sequence 33 = 33 tokens are not divisible by tp 2");
  }
  EXPECT_THROW(GptDescription({.model = mc, .B = 1, .T = 8, .stage = {3, 2, false, true}}), InputError);
}

}  // namespace
}  // namespace weft
