// The ClimaX family (model/family.h): the ClimaX and ORBIT presets, its config.json (ClimaX's
// names, microsoft/ClimaX arch.py), the model and its counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/field_batch.h"
#include "model/climax/climax.h"
#include "model/climax/climax_config.h"
#include "model/climax/climax_description.h"
#include "model/config_json.h"
#include "model/family.h"

namespace weft {

namespace {

// ParamSpec tags of the tensors with their own initial values (sincos_embedding).
enum ClimaxTensor : int { kClimaxVarEmbed = 1, kClimaxPosEmbed = 2 };

// ClimaX-style presets. climax: the ClimaX paper's 5.625-degree model (Nguyen et al. 2023,
// microsoft/ClimaX configs: 32x64 grid, patch 2, embedding 1024, 8 blocks, 16 heads, 48
// variables). orbit-*: the ORBIT classes (Wang et al. 2024, SC24: 115M, 1B, 10B, 113B) on
// ORBIT's 1.40625-degree grid (128x256, patch 4, 91 CMIP6 variables). ORBIT's size table is not
// public: orbit-115m is ClimaX's base shape at 91 variables (112M parameters), the larger ones
// keep 64-dimensional heads and are deepened to their class (docs/climax.md lists the counts).
// climax-tiny: the test preset (5 variables of the synthetic data at 5.625 degrees).
struct ClimaxPreset {
  const char* name;
  int layers, heads, hidden, vars, h, w, patch;
};
constexpr ClimaxPreset kClimaxPresets[] = {
    {"climax-tiny", 2, 4, 64, 5, 32, 64, 4},
    {"climax", 8, 16, 1024, 48, 32, 64, 2},
    {"orbit-115m", 8, 16, 1024, 91, 128, 256, 4},
    {"orbit-1b", 20, 32, 2048, 91, 128, 256, 4},
    {"orbit-10b", 32, 80, 5120, 91, 128, 256, 4},
    {"orbit-113b", 62, 192, 12288, 91, 128, 256, 4},
};

nlohmann::ordered_json climax_config_json(const ModelConfig& cfg) {
  nlohmann::ordered_json j;
  j["architectures"] = {"ClimaX"};
  j["model_type"] = "climax";
  j["depth"] = cfg.n_layer;
  j["num_heads"] = cfg.n_head;
  j["embed_dim"] = cfg.n_embd;
  j["mlp_hidden"] = cfg.ffn;
  j["num_vars"] = cfg.vars;
  j["img_size"] = {cfg.img_h, cfg.img_w};
  j["patch_size"] = climax_fields(cfg).patch;
  j["decoder_depth"] = climax_fields(cfg).decoder_depth;
  j["activation_function"] = "gelu_tanh";
  j["layer_norm_epsilon"] = float_for_json(cfg.ln_eps);
  j["initializer_range"] = float_for_json(cfg.init_std);
  j["torch_dtype"] = "float32";
  j["weft"] = {{"name", cfg.name}};
  return j;
}

ModelConfig climax_from_config_json(const nlohmann::json& j, const std::string& source) {
  const int depth = json_int(j, "depth", source, kMaxJsonLayers);
  const int heads = json_int(j, "num_heads", source, kMaxJsonHeads);
  const int embd = json_int(j, "embed_dim", source, kMaxJsonWidth);
  const int ffn = json_int(j, "mlp_hidden", source, kMaxJsonWidth);
  const int vars = json_int(j, "num_vars", source, kMaxJsonWidth);
  const int patch = json_int(j, "patch_size", source, kMaxJsonWidth);
  const int decoder = json_int(j, "decoder_depth", source, kMaxJsonLayers);
  if (!j.contains("img_size") || !j.at("img_size").is_array() || j.at("img_size").size() != 2) {
    throw_input("{}: key 'img_size' must be [height, width]", source);
  }
  const nlohmann::json hw = {{"h", j.at("img_size")[0]}, {"w", j.at("img_size")[1]}};
  const int h = json_int(hw, "h", source + ": img_size", kMaxJsonWidth);
  const int w = json_int(hw, "w", source + ": img_size", kMaxJsonWidth);
  std::string name = "climax";
  if (j.contains("weft") && j.at("weft").is_object() && j.at("weft").contains("name") &&
      j.at("weft").at("name").is_string()) {
    name = j.at("weft").at("name").get<std::string>();
  }
  try {
    ModelConfig cfg = make_climax_config(name, depth, heads, embd, vars, h, w, patch, ffn);
    cfg = with_climax_fields(cfg, patch, decoder);
    if (j.contains("layer_norm_epsilon") && j.at("layer_norm_epsilon").is_number()) {
      cfg.ln_eps = static_cast<float>(j.at("layer_norm_epsilon").get<double>());
    }
    cfg.validate();
    return cfg;
  } catch (const InputError& e) {
    throw_input("{}: {}", source, e.what());
  }
}

// ClimaX (Nguyen et al. 2023, microsoft/ClimaX src/climax/arch.py), names as there. Tensor
// parallelism as ORBIT's Hybrid-STOP: the blocks and the variable aggregation's projections are
// split (q and k|v by heads, the output projection by rows); the patch, variable, position and
// lead-time embeddings and the decoder head are replicated. Weights normal(0, init_std) without
// GPT-2's residual scaling (timm), the query and biases 0, var_embed and pos_embed sine-cosine.
ParamTable climax_param_table(const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd, V = cfg.vars, P2 = patch_area(cfg), L = num_patches(cfg);
  using S = TpSplit;
  using I = ParamInit;
  ParamTable t;
  t.front = {{"token_embeds.weight", 0, {V, P2, C}, S::kReplicated, true, I::kNormal},
             {"token_embeds.bias", 0, {V, C}, S::kReplicated, false, I::kZeros},
             {"var_embed", kClimaxVarEmbed, {V, C}, S::kReplicated, true, I::kFamily},
             {"var_query", 0, {C}, S::kReplicated, false, I::kZeros},
             {"var_agg.q.weight", 0, {C, C}, S::kCols, true, I::kNormal},
             {"var_agg.q.bias", 0, {C}, S::kCols, false, I::kZeros},
             {"var_agg.kv.weight", 0, {C, 2 * C}, S::kKvCols, true, I::kNormal},
             {"var_agg.kv.bias", 0, {2 * C}, S::kKvCols, false, I::kZeros},
             {"var_agg.out_proj.weight", 0, {C, C}, S::kRows, true, I::kNormal},
             {"var_agg.out_proj.bias", 0, {C}, S::kReplicated, false, I::kZeros},
             {"pos_embed", kClimaxPosEmbed, {L, C}, S::kReplicated, true, I::kFamily},
             {"lead_time_embed.weight", 0, {1, C}, S::kReplicated, true, I::kNormal},
             {"lead_time_embed.bias", 0, {C}, S::kReplicated, false, I::kZeros}};
  static const char* const kNames[kParamsPerLayer] = {
      "norm1.weight",     "norm1.bias",     "attn.qkv.weight", "attn.qkv.bias",
      "attn.proj.weight", "attn.proj.bias", "norm2.weight",    "norm2.bias",
      "mlp.fc1.weight",   "mlp.fc1.bias",   "mlp.fc2.weight",  "mlp.fc2.bias"};
  for (int l = 0; l < cfg.n_layer; ++l) {
    t.layers.push_back(block_param_specs(cfg, fmt::format("blocks.{}.", l), kNames, /*residual_scaled=*/false));
  }
  t.back = {{"norm.weight", 0, {C}, S::kReplicated, false, I::kOnes},
            {"norm.bias", 0, {C}, S::kReplicated, false, I::kZeros}};
  const int D = climax_fields(cfg).decoder_depth;
  for (int d = 0; d < D; ++d) {
    t.back.push_back({fmt::format("head.{}.weight", 2 * d), 0, {C, C}, S::kReplicated, true, I::kNormal});
    t.back.push_back({fmt::format("head.{}.bias", 2 * d), 0, {C}, S::kReplicated, false, I::kZeros});
  }
  t.back.push_back({fmt::format("head.{}.weight", 2 * D), 0, {C, V * P2}, S::kReplicated, true, I::kNormal});
  t.back.push_back({fmt::format("head.{}.bias", 2 * D), 0, {V * P2}, S::kReplicated, false, I::kZeros});
  return t;
}

// Element `index` of var_embed (1-D sine-cosine of the variable) or pos_embed (2-D of the patch),
// MAE's functions, as ClimaX initialises them.
float sincos_embedding(const ModelConfig& cfg, int kind, int64_t index) {
  const int64_t C = cfg.n_embd, row = index / C, col = index % C;
  // MAE's get_1d_sincos_pos_embed_from_grid(D, pos): [sin(pos w_k), cos(pos w_k)], k < D/2,
  // w_k = 1 / 10000^(k / (D/2)).
  auto one_d = [](int64_t D, double pos, int64_t c) {
    const int64_t half = D / 2, k = c % half;
    const double w = 1.0 / std::pow(10000.0, static_cast<double>(k) / static_cast<double>(half));
    return static_cast<float>(c < half ? std::sin(pos * w) : std::cos(pos * w));
  };
  if (kind == kClimaxVarEmbed) return one_d(C, static_cast<double>(row), col);
  // get_2d_sincos_pos_embed(D, h, w): the first D/2 columns encode the patch's column index,
  // the last D/2 its row index (MAE's meshgrid(w, h) order).
  const int64_t w = cfg.img_w / climax_fields(cfg).patch, hi = row / w, wi = row % w;
  return col < C / 2 ? one_d(C / 2, static_cast<double>(wi), col) : one_d(C / 2, static_cast<double>(hi), col - C / 2);
}

// ClimaxDescription through the family-neutral interface (one stage: the whole model; its
// sequence is its patches).
class ClimaxModelDescription final : public ModelDescription {
 public:
  explicit ClimaxModelDescription(const RunSpec& s)
      : d_(ClimaxRunSpec{.model = s.model, .B = s.B, .tp = s.tp, .recompute = s.recompute,
                         .recompute_layers = s.recompute_layers, .precision = s.precision, .training = s.training,
                         .param_dtype = s.param_dtype, .staging_chunk = s.staging_chunk,
                         .native_products = s.native_products}) {}
  int64_t rank_params() const override { return d_.rank_params(); }
  int64_t total_params() const override { return d_.total_params(); }
  int64_t layer_params() const override { return d_.layer_params(d_.spec().tp); }
  int64_t front_params() const override { return d_.front_params(d_.spec().tp); }
  // The front, the blocks, the back; no embedding rows exchanged.
  StoreGroups store_groups() const override {
    const int t = d_.spec().tp;
    return {d_.rank_params(), d_.front_params(t),
            std::max<int64_t>({1, d_.spec().model.n_layer > 0 ? d_.layer_params(t) : 0, d_.back_params()}), 0};
  }
  int64_t stash_elems() const override { return d_.stash_elems(); }
  int64_t workspace_elems() const override { return d_.workspace_elems(); }
  int64_t stash_bytes() const override { return d_.stash_bytes(); }
  int64_t workspace_bytes() const override { return d_.workspace_bytes(); }
  int64_t staging_bytes() const override { return d_.staging_bytes(); }
  int64_t residual_elems() const override { return 0; }
  int64_t tokens() const override { return d_.tokens(); }
  int64_t part_layers() const override { return d_.spec().model.n_layer; }
  int64_t recomputed_layers() const override { return d_.recomputed_layers(); }
  // The variable aggregation (model/climax/climax.cc): forward out_proj's row-parallel
  // all-reduce of N C; backward the column-parallel k|v product's input gradient, the V N C
  // variable tokens, and the query product's, C. Its embeddings and decoder are replicated.
  std::vector<TpCall> tp_calls() const override {
    const int64_t C = d_.spec().model.n_embd;
    return {{"all_reduce", d_.tokens() * C}, {"all_reduce", d_.aggregation_grad_elems()}, {"all_reduce", C}};
  }
  double train_flops_per_position() const override { return ClimaxDescription::train_flops_per_token(d_.spec().model); }
  EndsWork ends_work() const override { return d_.ends_work(); }
  AcceleratorMemory accelerator_memory(const AcceleratorOptions& o) const override { return d_.accelerator_memory(o); }

 private:
  ClimaxDescription d_;
};

class ClimaxFamily final : public Family {
 public:
  const char* name() const override { return "climax"; }
  // ClimaX's front (patch embeddings, variable aggregation) and back (decoder) are not cut into
  // stages, its tokens are patches of one grid (no sequence split), its attention is the
  // bidirectional reference (no selective recompute), its embeddings are reduced whole, and it
  // forecasts fields instead of sampling text.
  const ModelCapabilities& capabilities() const override {
    static const ModelCapabilities caps{
        .family = "ClimaX",
        .pipeline_stages = false,
        .sequence_parallel = false,
        .selective_recompute = false,
        .causal_attention = false,
        .sparse_embedding_grads = false,
        .tied_head = false,
        .generation = false,
        .residual_stream_16 = false,  // its residual stream stays fp32 (climax.cc)
        .block_variants = false,
        .data_source = "fields",
        .generation_note = "it forecasts weather; weft eval --checkpoint with --data WEATHER_DIR --map OUT.png draws "
                           "a forecast beside the truth (docs/climax.md)",
        .front_ops = "front (patch embeddings, variable aggregation)",
        .back_ops = "back (decoder, weighted MSE)",
        .plan_legend = "times in seconds per step; tokens are patches; memory in GB per device; MFU = model FLOPs (3 x "
                       "the forward's products per patch, ClimaxDescription) / peak, HFU counts recomputation and the "
                       "replicated embeddings and decoder on every tp rank"};
    return caps;
  }

  std::vector<std::string> preset_names() const override { return climax_preset_names(); }
  std::optional<ModelConfig> preset(const std::string& name) const override {
    for (const auto& p : kClimaxPresets) {
      if (name == p.name) return make_climax_config(p.name, p.layers, p.heads, p.hidden, p.vars, p.h, p.w, p.patch);
    }
    return std::nullopt;
  }
  void validate(const ModelConfig& c) const override {
    const ClimaxFields& f = climax_fields(c);
    if (c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 || c.ffn <= 0 || c.vars <= 0 || c.img_h <= 0 ||
        c.img_w <= 0 || f.patch <= 0 || f.decoder_depth < 0) {
      throw_input(
          "model '{}': every size must be positive (layers {}, heads {}, hidden {}, ffn {}, variables {}, grid {}x{}, "
          "patch {}, decoder depth {})",
          c.name, c.n_layer, c.n_head, c.n_embd, c.ffn, c.vars, c.img_h, c.img_w, f.patch, f.decoder_depth);
    }
    if (c.img_h % f.patch != 0 || c.img_w % f.patch != 0) {
      throw_input("model '{}': the grid {}x{} is not divisible by the patch size {}", c.name, c.img_h, c.img_w,
                  f.patch);
    }
    if (c.n_embd % c.n_head != 0) {
      throw_input("model '{}': hidden size {} is not divisible by the number of heads {}", c.name, c.n_embd, c.n_head);
    }
    if (c.n_embd % 4 != 0) {
      throw_input("model '{}': hidden size {} must be a multiple of 4 (the 2-D sine-cosine position embedding)",
                  c.name, c.n_embd);
    }
    if (c.n_ctx != num_patches(c)) {
      throw_input("model '{}': n_ctx {} must equal the {} patches of a {}x{} grid in {}x{} patches", c.name, c.n_ctx,
                  num_patches(c), c.img_h, c.img_w, f.patch, f.patch);
    }
  }
  // The block sizes may change; the sequence is the grid's patches and there is no vocabulary.
  ModelConfig with_overrides(const ModelConfig& base, const ShapeOverrides& o) const override {
    if (!o.any()) return base;
    if (o.n_ctx != 0 || o.vocab_size != 0) {
      throw_input("n_ctx {} and vocab_size {} do not apply to the ClimaX model '{}': its sequence is its {} patches "
                  "and it has no vocabulary",
                  o.n_ctx, o.vocab_size, base.name, num_patches(base));
    }
    const auto pick = ShapeOverrides::pick;
    const int C = pick(o.n_embd, base.n_embd);
    ModelConfig c = make_climax_config(base.name, pick(o.n_layer, base.n_layer), pick(o.n_head, base.n_head), C,
                                       base.vars, base.img_h, base.img_w, climax_fields(base).patch, o.mlp(base, C));
    c = with_climax_fields(c, climax_fields(base).patch, climax_fields(base).decoder_depth);
    c.ln_eps = base.ln_eps;
    c.init_std = base.init_std;
    return c;
  }
  int64_t fixed_positions(const ModelConfig& cfg) const override { return num_patches(cfg); }

  bool reads_config_json(const nlohmann::json& j) const override {
    return j.contains("model_type") && j.at("model_type") == "climax";
  }
  ModelConfig from_config_json(const nlohmann::json& j, const std::string& source) const override {
    return climax_from_config_json(j, source);
  }
  nlohmann::ordered_json to_config_json(const ModelConfig& cfg) const override { return climax_config_json(cfg); }

  ParamTable param_table(const ModelConfig& cfg) const override { return climax_param_table(cfg); }
  float init_value(const ModelConfig& cfg, const ParamTensor& t, int64_t index) const override {
    return sincos_embedding(cfg, t.tag, index);
  }

  std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size,
                                    int tp_rank, const StageSpec&) const override {
    return std::make_unique<ClimaX>(cfg, backend, local_store, tp_size, tp_rank);
  }
  // The fields (V,H,W) at the input and target times, and the lead time; a sample weighs its
  // patches.
  std::unique_ptr<HostBatch> make_batch(const ModelConfig& cfg, int64_t capacity, int64_t) const override {
    return std::make_unique<FieldBatch>(capacity, int64_t{cfg.vars} * cfg.img_h * cfg.img_w, fixed_positions(cfg));
  }
  std::unique_ptr<ModelDescription> describe(const RunSpec& spec) const override {
    return std::make_unique<ClimaxModelDescription>(spec);
  }
  double train_flops_per_position(const ModelConfig& cfg, int64_t) const override {
    return ClimaxDescription::train_flops_per_token(cfg);
  }
};

}  // namespace

const Family& climax_family() {
  static const ClimaxFamily family;
  return family;
}

std::vector<std::string> climax_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kClimaxPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig with_climax_fields(ModelConfig cfg, int patch, int decoder_depth) {
  auto own = std::make_shared<ClimaxFields>();
  own->patch = patch;
  own->decoder_depth = decoder_depth;
  cfg.own = std::move(own);
  return cfg;
}

ModelConfig make_climax_config(const std::string& name, int n_layer, int n_head, int n_embd, int vars, int img_h,
                               int img_w, int patch, int ffn) {
  ModelConfig c;
  c.name = name;
  c.family = &climax_family();
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.vars = vars;
  c.img_h = img_h;
  c.img_w = img_w;
  c = with_climax_fields(c, patch, ClimaxFields{}.decoder_depth);
  c.n_ctx = patch > 0 ? static_cast<int>(num_patches(c)) : 0;
  c.vocab_size = 0;
  c.padded_vocab = 0;
  c.ffn = ffn > 0 ? ffn : 4 * n_embd;
  c.validate();
  return c;
}

}  // namespace weft
