// The GPT family (model/family.h): GPT-2 presets and shapes, its Hugging Face config.json
// (GPT2LMHeadModel), the model and its counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/token_batch.h"
#include "model/config_json.h"
#include "model/family.h"
#include "model/gpt/gpt.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_description.h"
#include "model/gpt/gpt_hf_llama.h"
#include "model/gpt/gpt_hf_mpt.h"
#include "model/gpt/gpt_hf_neox.h"
#include "model/gpt/gpt_variants.h"
#include "parallel/pp/partition.h"

namespace weft {

namespace {

constexpr int kGpt2EndOfText = 50256;  // <|endoftext|> in the GPT-2 BPE vocabulary

struct Preset {
  const char* name;
  int layers, heads, hidden, ctx;
  int vocab = 50257;  // GPT-2's BPE (padded to a multiple of 128 by make_model_config)
};
// GPT-2 sizes from Radford et al. 2019 / the Hugging Face configs; 22B/175B/1T as trained
// on Frontier (Dash et al. 2023, "Optimizing Distributed Training on Frontier for Large
// Language Models", Table II: 48x6144x48, 96x12288x96, 128x25600x160, sequence 2048).
// gpt-20b: GPT-NeoX-20B's shape (Black et al. 2022, "GPT-NeoX-20B: An Open-Source
// Autoregressive Language Model", Table 1: 44 layers, hidden 6144, 64 heads, context 2048,
// vocabulary 50432), the 20B GPT of Xu et al. 2025 (arXiv 2501.04266) as weft's model:
// learned positions and a tied head instead of NeoX's rotary embeddings and untied head.
constexpr Preset kPresets[] = {
    {"tiny", 4, 4, 256, 256},          {"small", 6, 6, 384, 256},
    {"gpt2-124m", 12, 12, 768, 1024},  {"gpt2-350m", 24, 16, 1024, 1024},
    {"gpt2-774m", 36, 20, 1280, 1024}, {"gpt2-1558m", 48, 25, 1600, 1024},
    {"gpt-22b", 48, 48, 6144, 2048},   {"gpt-175b", 96, 96, 12288, 2048},
    {"gpt-1t", 128, 160, 25600, 2048}, {"gpt-20b", 44, 64, 6144, 2048, 50432},
};

// GPT2LMHeadModel's config.json (Hugging Face transformers' GPT2Config).
// A decoder variant (model/config.h's BlockOptions) is not a GPT2LMHeadModel: its file says so
// (weft's own model_type) and records the options under "weft": {"block": ...}.
constexpr const char* kVariantModelType = "weft-gpt";

nlohmann::ordered_json gpt_config_json(const ModelConfig& cfg) {
  if (hf_llama_compatible(cfg)) return llama_config_json(cfg);  // Llama's block: LlamaForCausalLM's file
  if (hf_neox_compatible(cfg)) return neox_config_json(cfg);    // NeoX's block: GPTNeoXForCausalLM's file
  if (hf_mpt_compatible(cfg)) return mpt_config_json(cfg);      // MPT's block: MptForCausalLM's file
  nlohmann::ordered_json j;
  const bool gpt2 = cfg.block.is_default();
  j["architectures"] = {gpt2 ? "GPT2LMHeadModel" : "WeftGPT"};
  j["model_type"] = gpt2 ? "gpt2" : kVariantModelType;
  j["vocab_size"] = cfg.vocab_size;
  j["n_positions"] = cfg.n_ctx;
  j["n_ctx"] = cfg.n_ctx;
  j["n_embd"] = cfg.n_embd;
  j["n_layer"] = cfg.n_layer;
  j["n_head"] = cfg.n_head;
  j["n_inner"] = cfg.ffn == 4 * cfg.n_embd ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(cfg.ffn);
  j["activation_function"] = cfg.block.mlp == MlpKind::kSwiglu ? "silu" : cfg.block.mlp == MlpKind::kGeluExact ? "gelu" : "gelu_new";
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["layer_norm_epsilon"] = float_for_json(cfg.ln_eps);
  j["initializer_range"] = float_for_json(cfg.init_std);
  j["tie_word_embeddings"] = cfg.block.tie_embeddings;
  // <|endoftext|> only exists in the GPT-2 vocabulary (a smaller test vocabulary has none).
  const bool gpt2_vocab = cfg.vocab_size > kGpt2EndOfText;
  j["bos_token_id"] = gpt2_vocab ? nlohmann::ordered_json(kGpt2EndOfText) : nlohmann::ordered_json(nullptr);
  j["eos_token_id"] = gpt2_vocab ? nlohmann::ordered_json(kGpt2EndOfText) : nlohmann::ordered_json(nullptr);
  j["torch_dtype"] = "float32";
  j["weft"] = {{"name", cfg.name}, {"padded_vocab", cfg.padded_vocab}};
  if (!gpt2) j["weft"]["block"] = block_options_json(cfg.block);
  return j;
}

// The checks that are the GPT's own: GELU tanh, tied head (GPT-2's block; a variant's file records
// its block under weft.block).
void check_gpt_config_json(const nlohmann::json& j, const std::string& source) {
  const bool variant = j.contains("weft") && j.at("weft").is_object() && j.at("weft").contains("block");
  if (!variant && j.contains("activation_function")) {
    const auto& a = j.at("activation_function");
    if (a != "gelu_new" && a != "gelu_pytorch_tanh") {
      throw_input("{}: activation_function is {}, weft implements the tanh GELU (\"gelu_new\")", source, a.dump());
    }
  }
  if (!variant && j.contains("tie_word_embeddings") && j.at("tie_word_embeddings") != true) {
    throw_input("{}: tie_word_embeddings is {}, weft ties the output head to the token embedding", source,
                j.at("tie_word_embeddings").dump());
  }
}

ModelConfig gpt_from_config_json(const nlohmann::json& j, const std::string& source) {
  check_gpt_config_json(j, source);
  const int n_layer = json_int(j, "n_layer", source, kMaxJsonLayers);
  const int n_head = json_int(j, "n_head", source, kMaxJsonHeads);
  const int n_embd = json_int(j, "n_embd", source, kMaxJsonWidth);
  const int vocab = json_int(j, "vocab_size", source, kMaxJsonVocab);
  const int n_ctx = json_int(j, j.contains("n_positions") ? "n_positions" : "n_ctx", source, kMaxJsonContext);
  const int ffn =
      j.contains("n_inner") && !j.at("n_inner").is_null() ? json_int(j, "n_inner", source, kMaxJsonWidth) : 0;
  std::string name = "gpt2";
  int padded_vocab = 0;
  BlockOptions block;
  if (j.contains("weft")) {
    const auto& w = j.at("weft");
    if (!w.is_object()) throw_input("{}: key 'weft' is {}, expected an object", source, w.dump());
    if (w.contains("name")) {
      if (!w.at("name").is_string()) throw_input("{}: key 'weft.name' is {}, expected a string", source, w.at("name").dump());
      name = w.at("name").get<std::string>();
    }
    if (w.contains("padded_vocab")) padded_vocab = json_int(w, "padded_vocab", source + ": weft", kMaxJsonVocab + 128);
    if (w.contains("block")) block = block_options_from_json(w.at("block"), source);
  }
  ModelConfig cfg;
  try {
    cfg = make_model_config(name, n_layer, n_head, n_embd, n_ctx, vocab, ffn);
    if (padded_vocab != 0) cfg.padded_vocab = padded_vocab;
    cfg.block = block;
    auto read_positive = [&](const char* key, float* out) {
      if (!j.contains(key)) return;
      const auto& v = j.at(key);
      if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(static_cast<float>(v.get<double>()))) {
        throw_input("key '{}' is {}, expected a positive number", key, v.dump());
      }
      *out = static_cast<float>(v.get<double>());
    };
    read_positive("layer_norm_epsilon", &cfg.ln_eps);
    read_positive("initializer_range", &cfg.init_std);
    cfg.validate();
  } catch (const InputError& e) {
    throw_input("{}: {}", source, e.what());
  }
  return cfg;
}

// Hugging Face's GPT-2 names and order: wte, wpe, the blocks, ln_f; the head is tied to wte
// (whose Vp - V padded rows stay zero and are not written to a checkpoint).
ParamTable gpt_param_table(const ModelConfig& cfg) {
  using S = TpSplit;
  using I = ParamInit;
  const BlockOptions& b = cfg.block;
  const int64_t C = cfg.n_embd, Vp = cfg.padded_vocab, V = cfg.vocab_size;
  const bool tied = b.tie_embeddings;
  ParamTable t;
  t.front_with_head = tied;
  t.front = {{"transformer.wte.weight", 0, {Vp, C}, S::kRows, true, I::kNormal, {V, C}, V * C}};
  if (b.position == PositionKind::kLearned) {
    t.front.push_back({"transformer.wpe.weight", 0, {cfg.n_ctx, C}, S::kReplicated, true, I::kNormal});
  }
  // The lookup's gradient arrives as token rows; a tied head reads the same matrix.
  t.front[0].sparse_rows = true;
  t.front[0].tied_head = tied;
  // Hugging Face's files: with or without "transformer.", the head as "lm_head.weight" (tied to
  // wte), the attention's causal-mask buffers per block (not parameters).
  t.foreign = {"transformer.", tied ? "lm_head.weight" : "", "h.", {".attn.bias", ".attn.masked_bias"}};
  // Llama's block is written and read in Hugging Face's LlamaForCausalLM names (gpt_hf_llama.h).
  if (hf_llama_compatible(cfg)) t.foreign = llama_foreign_names(cfg);
  if (hf_neox_compatible(cfg)) t.foreign = neox_foreign_names(cfg);  // GPTNeoXForCausalLM's (gpt_hf_neox.h)
  if (hf_mpt_compatible(cfg)) t.foreign = mpt_foreign_names(cfg);    // MptForCausalLM's (gpt_hf_mpt.h)
  static const char* const kNames[kParamsPerLayer] = {
      "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  for (int l = 0; l < cfg.n_layer; ++l) {
    t.layers.push_back(block_param_specs(cfg, fmt::format("transformer.h.{}.", l), kNames, /*residual_scaled=*/true));
  }
  // The back group by place (params.h's final_ptrs): the final norm's weight and bias, an untied head.
  t.back = {{"transformer.ln_f.weight", 1, {C}, S::kReplicated, false, I::kOnes}};
  if (b.norm == NormKind::kLayerNorm && b.bias) {  // RMSNorm and a bias-free LayerNorm (MPT's) have none
    t.back.push_back({"transformer.ln_f.bias", 2, {C}, S::kReplicated, false, I::kZeros});
  }
  if (!tied) t.back.push_back({"lm_head.weight", 3, {Vp, C}, S::kRows, true, I::kNormal, {V, C}, V * C});
  return t;
}

// GptDescription through the family-neutral interface.
class GptModelDescription final : public ModelDescription {
 public:
  explicit GptModelDescription(const RunSpec& spec) : d_(spec) {}
  int64_t rank_params() const override { return d_.rank_params().part; }
  int64_t total_params() const override { return d_.total_params(); }
  int64_t layer_params() const override { return d_.rank_params().layer; }
  int64_t front_params() const override { return d_.rank_params().embedding; }
  // The embedding group on the stages with the embedding or the tied head; the embedding
  // gradient's rows exchanged by the stage that looks the tokens up.
  StoreGroups store_groups() const override {
    const GptParamCounts& pc = d_.rank_params();
    const StageSpec& st = d_.spec().stage;
    const bool tied = d_.spec().model.block.tie_embeddings;
    return {pc.part, (st.embedding || (st.head && tied)) ? pc.embedding : 1,
            std::max<int64_t>({1, d_.part_layers() > 0 ? pc.layer : 0, st.head ? pc.back() : 0}),
            st.embedding ? d_.tokens() : 0};
  }
  int64_t stash_elems() const override { return d_.stash_elems(); }
  int64_t workspace_elems() const override { return d_.workspace_elems(); }
  int64_t stash_bytes() const override { return d_.stash_bytes(); }
  int64_t workspace_bytes() const override { return d_.workspace_bytes(); }
  int64_t staging_bytes() const override { return d_.staging_bytes(); }
  int64_t residual_elems() const override { return d_.residual_elems(); }
  DType residual_dtype() const override { return d_.residual_dtype(); }
  int64_t tokens() const override { return d_.tokens(); }
  int64_t part_layers() const override { return d_.part_layers(); }
  int64_t recomputed_layers() const override { return d_.recomputed_layers(); }
  // The embedding's reduction (a reduce-scatter and a gather under sequence parallelism); the
  // last stage's final-norm gathers and the vocabulary-parallel cross-entropy's statistics and
  // input gradient, per head chunk of rows.
  std::vector<TpCall> tp_calls() const override {
    const RunSpec& s = d_.spec();
    const bool sp = s.sequence_parallel && s.tp > 1;
    const int64_t N = d_.tokens(), C = s.model.n_embd, NC = N * C;
    // The gathers move their tensors as stored: the residual stream's gradient, the LayerNorm rows;
    // the sums are of the tp group's sum dtype (the embedding's lookups, the head's input gradient).
    const auto bytes = [](DType t) { return static_cast<int64_t>(dtype_bytes(t, 1)); };
    const int64_t sum = bytes(d_.tp_sum_dtype());
    std::vector<TpCall> out;
    if (s.stage.embedding) {
      out.push_back({sp ? "reduce_scatter" : "all_reduce", NC, sum});
      if (sp) out.push_back({"all_gather", NC, bytes(d_.residual_dtype())});
    }
    if (!s.stage.head) return out;
    if (sp) {
      out.push_back({"all_gather", NC, bytes(d_.layer_dtypes().ln)});  // final LayerNorm's rows, forward
      out.push_back({"reduce_scatter", NC, sum});  // head's input gradient
      out.push_back({"all_reduce", d_.rank_params().final_norm});   // final norm's weights
    }
    const int64_t chunk = d_.head_chunk();
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      const int64_t rows = std::min(chunk, N - r0);
      out.push_back({"all_reduce", rows});              // row max
      out.push_back({"all_reduce", 2 * rows});          // sum of exp and target logit
      if (!sp) out.push_back({"all_reduce", rows * C, sum});  // input gradient rows
    }
    return out;
  }
  double train_flops_per_position() const override { return d_.train_flops_per_token(); }
  EndsWork ends_work() const override { return d_.ends_work(); }
  AcceleratorMemory accelerator_memory(const AcceleratorOptions& o) const override { return d_.accelerator_memory(o); }

 private:
  GptDescription d_;
};

class GptFamily final : public Family {
 public:
  const char* name() const override { return "gpt"; }
  const ModelCapabilities& capabilities() const override {
    static const ModelCapabilities caps{};  // every capability (core/model_capabilities.h)
    return caps;
  }

  std::vector<std::string> preset_names() const override {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.emplace_back(p.name);
    for (std::string& n : gpt_variant_preset_names()) names.push_back(std::move(n));
    return names;
  }
  std::optional<ModelConfig> preset(const std::string& name) const override {
    for (const auto& p : kPresets) {
      if (name == p.name) return make_model_config(p.name, p.layers, p.heads, p.hidden, p.ctx, p.vocab);
    }
    return gpt_variant_preset(name);
  }
  void validate(const ModelConfig& c) const override {
    if (c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 || c.n_ctx <= 0 || c.vocab_size <= 0 || c.ffn <= 0) {
      throw_input("model '{}': every size must be positive (layers {}, heads {}, hidden {}, context {}, vocab {}, ffn {})",
                  c.name, c.n_layer, c.n_head, c.n_embd, c.n_ctx, c.vocab_size, c.ffn);
    }
    if (c.n_embd % c.n_head != 0) {
      throw_input("model '{}': hidden size {} is not divisible by the number of heads {}", c.name, c.n_embd, c.n_head);
    }
    if (c.padded_vocab < c.vocab_size) {
      throw_input("model '{}': padded vocabulary {} is smaller than the vocabulary {}", c.name, c.padded_vocab,
                  c.vocab_size);
    }
    try {
      validate_block_options(c);
    } catch (const InputError& e) {
      throw_input("model '{}': {}", c.name, e.what());
    }
  }
  std::vector<std::string> setting_names() const override { return gpt_setting_names(); }
  ModelConfig with_settings(const ModelConfig& base, const std::map<std::string, std::string>& s) const override {
    return gpt_with_settings(base, s);
  }
  std::string describe_shape(const ModelConfig& c) const override {
    const std::string block = describe_block(c);
    return Family::describe_shape(c) + (block.empty() ? "" : "; " + block);
  }
  ModelConfig with_overrides(const ModelConfig& base, const ShapeOverrides& o) const override {
    if (!o.any()) return base;
    const auto pick = ShapeOverrides::pick;
    const int C = pick(o.n_embd, base.n_embd);
    // A new width gives GPT-2's 4C MLP, or Llama's 8C/3 (rounded up to 256) for SwiGLU.
    const bool swiglu = base.block.mlp == MlpKind::kSwiglu;
    const int ffn = o.ffn > 0 || o.n_embd == 0 || !swiglu ? o.mlp(base, C) : swiglu_ffn(C);
    ModelConfig c = make_model_config(base.name, pick(o.n_layer, base.n_layer), pick(o.n_head, base.n_head), C,
                                      pick(o.n_ctx, base.n_ctx), pick(o.vocab_size, base.vocab_size), ffn);
    c.block = base.block;
    c.ln_eps = base.ln_eps;
    c.validate();
    return c;
  }

  bool reads_config_json(const nlohmann::json& j) const override {
    // Hugging Face's GPT-2 folders, also the original ones without a model_type.
    return !j.contains("model_type") || j.at("model_type") == "gpt2" || j.at("model_type") == kVariantModelType ||
           j.at("model_type") == "llama" || j.at("model_type") == "gpt_neox" || j.at("model_type") == "mpt";
  }
  ModelConfig from_config_json(const nlohmann::json& j, const std::string& source) const override {
    if (j.contains("model_type") && j.at("model_type") == "llama") return llama_from_config_json(j, source);
    if (j.contains("model_type") && j.at("model_type") == "gpt_neox") return neox_from_config_json(j, source);
    if (j.contains("model_type") && j.at("model_type") == "mpt") return mpt_from_config_json(j, source);
    return gpt_from_config_json(j, source);
  }
  nlohmann::ordered_json to_config_json(const ModelConfig& cfg) const override { return gpt_config_json(cfg); }

  ParamTable param_table(const ModelConfig& cfg) const override { return gpt_param_table(cfg); }

  std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size,
                                    int tp_rank, const StageSpec& stage) const override {
    return std::make_unique<GPT>(cfg, backend, local_store, tp_size, tp_rank, stage);
  }
  std::unique_ptr<HostBatch> make_batch(const ModelConfig&, int64_t capacity, int64_t T) const override {
    return std::make_unique<TokenBatch>(capacity, T);
  }
  std::unique_ptr<ModelDescription> describe(const RunSpec& spec) const override {
    return std::make_unique<GptModelDescription>(spec);
  }
  double train_flops_per_position(const ModelConfig& cfg, int64_t T) const override {
    return GptDescription::train_flops_per_token(cfg, T);
  }
  double pipeline_head_cost(const ModelConfig& cfg) const override {
    // A layer's products cost 2 C (QKV + C + FC + F) FLOPs per token (forward; GPT-2: 2 x 12 C^2),
    // the head's 2 C Vp: the head counts as Vp / (QKV + C + FC + F) layers (GPT-2: Vp / 12C).
    const double per_layer = static_cast<double>(cfg.qkv_width() + cfg.n_embd + cfg.fc_width() + cfg.ffn);
    return static_cast<double>(cfg.padded_vocab) / per_layer;
  }
};

}  // namespace

const Family& gpt_family() {
  static const GptFamily family;
  return family;
}

ModelConfig make_model_config(const std::string& name, int n_layer, int n_head, int n_embd, int n_ctx, int vocab_size,
                              int ffn) {
  ModelConfig c;
  c.name = name;
  c.family = &gpt_family();
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.n_ctx = n_ctx;
  c.vocab_size = vocab_size;
  c.padded_vocab = static_cast<int>(round_up(vocab_size, 128));
  c.ffn = ffn > 0 ? ffn : 4 * n_embd;
  c.validate();
  return c;
}

}  // namespace weft
