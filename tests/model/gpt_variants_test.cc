// The GPT family's decoder variants as settings (model/gpt/gpt_variants.h): what each [model] key
// sets, the refusals with their numbers, the presets, and config.json's round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "model/gpt/gpt.h"
#include "core/error.h"
#include "model/family.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_variants.h"
#include "test_util.h"

namespace weft {
namespace {

std::string refusal(const ModelConfig& base, const std::map<std::string, std::string>& s) {
  try {
    base.family->with_settings(base, s);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(GptVariants, SettingsSetTheBlock) {
  const ModelConfig tiny = model_preset("tiny");
  const ModelConfig c = tiny.family->with_settings(
      tiny, {{"position", "rope"}, {"norm", "rmsnorm"}, {"bias", "false"}, {"mlp", "swiglu"}, {"ffn", "640"},
             {"n_kv_head", "2"}, {"tie_embeddings", "false"}, {"norm_eps", "1e-6"}, {"rope_base", "500000"},
             {"rope_scaling", "llama3"}, {"rope_factor", "8"}, {"rope_original_context", "128"}});
  EXPECT_EQ(c.block.position, PositionKind::kRope);
  EXPECT_EQ(c.block.norm, NormKind::kRmsNorm);
  EXPECT_FALSE(c.block.bias);
  EXPECT_EQ(c.block.mlp, MlpKind::kSwiglu);
  EXPECT_EQ(c.ffn, 640);
  EXPECT_EQ(c.kv_heads(), 2);
  EXPECT_FALSE(c.tied_head());
  EXPECT_FLOAT_EQ(c.ln_eps, 1e-6f);
  EXPECT_EQ(c.qkv_width(), 256 + 2 * 2 * 64);
  EXPECT_EQ(c.fc_width(), 2 * 640);
  EXPECT_EQ(c.block.rope.original_context, 128);
  // n_kv_head equal to the heads is multi-head attention, written one way.
  EXPECT_EQ(tiny.family->with_settings(tiny, {{"n_kv_head", "4"}}).block.n_kv_head, 0);
  EXPECT_TRUE(tiny.block.is_default());
  // A new width keeps the block; SwiGLU's MLP follows Llama's 8C/3 rule, rounded up to 256.
  const ModelConfig l = model_preset("llama-tiny");
  const ModelConfig wide = l.family->with_overrides(l, {.n_embd = 512});
  EXPECT_EQ(wide.block, l.block);
  EXPECT_EQ(wide.ffn, 1536);
  EXPECT_EQ(swiglu_ffn(4096), 11008);  // Llama 1/2 7B
}

// MPT's gen_slopes (alibi_bias_max 8): 1 / 2^(8k/n) for n heads a power of two; for 6 heads those
// of 8 heads, the odd-indexed then the even-indexed, the first 6.
TEST(GptVariants, AlibiSlopesAreMpts) {
  EXPECT_EQ(alibi_slopes(4), (std::vector<float>{0.25f, 1.0f / 16, 1.0f / 64, 1.0f / 256}));
  EXPECT_EQ(alibi_slopes(6), (std::vector<float>{0.25f, 1.0f / 16, 1.0f / 64, 1.0f / 256, 0.5f, 0.125f}));
  const std::vector<float> s16 = alibi_slopes(16);
  EXPECT_FLOAT_EQ(s16[0], 1.0f / std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(s16[15], 1.0f / 256);
}

TEST(GptVariants, RefusalsNameTheValues) {
  const ModelConfig tiny = model_preset("tiny");
  // ALiBi takes no rope settings.
  EXPECT_NE(refusal(tiny, {{"position", "alibi"}, {"rope_base", "500"}}).find("apply to position = \"rope\", not \"alibi\""),
            std::string::npos);
  EXPECT_NE(refusal(tiny, {{"n_kv_head", "3"}}).find("n_kv_head 3 must divide the 4 attention heads"), std::string::npos);
  EXPECT_NE(refusal(tiny, {{"position", "rope"}, {"rope_fraction", "0.01"}}).find("64 x rope_fraction 0.01 = 0 dimensions"),
            std::string::npos);
  EXPECT_NE(refusal(tiny, {{"rope_base", "500"}}).find("the rope_* settings apply to position = \"rope\""), std::string::npos);
  EXPECT_NE(refusal(tiny, {{"position", "rope"}, {"rope_scaling", "yarn"}}).find("rope_scaling must be"), std::string::npos);
  EXPECT_NE(refusal(tiny, {{"mlp", "relu"}}).find("mlp must be \"gelu\" (the tanh form), \"gelu_exact\" (erf) or \"swiglu\", got 'relu'"),
            std::string::npos);
  EXPECT_NE(refusal(tiny, {{"bias", "no"}}).find("bias must be true or false, got 'no'"), std::string::npos);
  EXPECT_NE(refusal(tiny, {{"layers", "3"}}).find("key 'layers' (3) is not a setting of model 'tiny'"), std::string::npos);
  // ClimaX keeps GPT-2's block.
  const ModelConfig climax = model_preset("climax-tiny");
  ModelConfig bad = climax;
  bad.block.norm = NormKind::kRmsNorm;
  EXPECT_THROW(bad.validate(), InputError);
  EXPECT_NE(refusal(climax, {{"norm", "rmsnorm"}}), "(accepted)");
}

TEST(GptVariants, ConfigJsonRoundTrips) {
  // Llama's block is written as Hugging Face's LlamaForCausalLM; another variant in weft's own keys.
  ModelConfig other = model_preset("small");
  other = other.family->with_settings(other, {{"position", "rope"}, {"rope_fraction", "0.25"}, {"n_kv_head", "3"},
                                              {"tie_embeddings", "false"}});
  for (const ModelConfig& c : {model_preset("llama-tiny"), model_preset("llama3-8b"), model_preset("llama3-405b"), other,
                               model_preset("neox-20b")}) {
    const std::string name = c.name;
    const nlohmann::ordered_json j = c.family->to_config_json(c);
    EXPECT_EQ(j["model_type"], name == "small" ? "weft-gpt" : name == "neox-20b" ? "gpt_neox" : "llama") << name;
    const ModelConfig back = model_config_from_json(nlohmann::json::parse(j.dump()), name);
    EXPECT_EQ(back.block, c.block) << name;
    EXPECT_EQ(back.n_embd, c.n_embd);
    EXPECT_EQ(back.ffn, c.ffn);
    EXPECT_EQ(back.vocab_size, c.vocab_size);
    EXPECT_FLOAT_EQ(back.ln_eps, c.ln_eps);
  }
  // GPT-2's own file is unchanged.
  const ModelConfig g = model_preset("gpt2-124m");
  const nlohmann::ordered_json j = g.family->to_config_json(g);
  EXPECT_EQ(j["architectures"][0], "GPT2LMHeadModel");
  EXPECT_FALSE(j["weft"].contains("block"));
}

// A Llama-block checkpoint is a LlamaForCausalLM folder: Hugging Face's names and (out, in)
// layout (q_proj, k_proj and v_proj the columns of weft's c_attn, transposed; gate and up those of
// c_fc), and it loads back bit for bit; a config.json weft cannot honour is refused by key.
// A GPT of config c with random weights (the padded vocabulary rows zero), saved in `name` under
// the test folder.
struct SavedModel {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<GPT> model;
  std::filesystem::path dir;
};
SavedModel save_noisy(const ModelConfig& c, const std::string& name) {
  SavedModel s;
  s.model = std::make_unique<GPT>(c, *s.be);
  GPT& model = *s.model;
  model.init(3);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (int64_t i = 0; i < model.layout().total(); ++i) model.params()[i] += nd(rng);
  for (const ParamTensor& t : model.layout().tensors()) {  // the padded vocabulary rows stay zero
    for (int64_t i = t.live >= 0 ? t.live : t.numel; i < t.numel; ++i) model.params()[t.offset + i] = 0.0f;
  }
  s.dir = std::filesystem::path(WEFT_TEST_TMP) / name;
  std::filesystem::remove_all(s.dir);
  CheckpointData cd;
  cd.model = &model.config();
  cd.layout = &model.layout();
  cd.params = model.params();
  save_checkpoint(s.dir.string(), cd);
  return s;
}

TEST(GptVariants, LlamaCheckpointsUseHuggingFaceNamesAndRoundTrip) {
  ModelConfig c = model_preset("llama-tiny");
  c = c.family->with_overrides(c, {.n_layer = 2, .n_embd = 64, .vocab_size = 300});
  c = c.family->with_settings(c, {{"bias", "true"}, {"tie_embeddings", "false"}});
  const SavedModel saved = save_noisy(c, "llama_hf_roundtrip");
  GPT& model = *saved.model;
  const std::filesystem::path& dir = saved.dir;
  const SafetensorsFile f((dir / "model.safetensors").string());
  const int64_t C = 64, KV = 32, F = c.ffn;
  EXPECT_EQ(f.info("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{C, C}));
  EXPECT_EQ(f.info("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{KV, C}));
  EXPECT_EQ(f.info("model.layers.1.self_attn.v_proj.bias").shape, (std::vector<int64_t>{KV}));
  EXPECT_EQ(f.info("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{C, F}));
  EXPECT_EQ(f.info("lm_head.weight").shape, (std::vector<int64_t>{300, C}));
  EXPECT_FALSE(f.has("transformer.h.0.attn.c_attn.weight"));
  // k_proj row r, column i is c_attn's element (i, C + r).
  const ParamTensor* qkv = model.layout().find("transformer.h.1.attn.c_attn.weight");
  std::vector<float> k(static_cast<size_t>(KV * C));
  f.read_f32("model.layers.1.self_attn.k_proj.weight", {KV, C}, k.data());
  const int64_t W = C + 2 * KV;
  EXPECT_EQ(k[3 * C + 5], model.params()[qkv->offset + 5 * W + C + 3]);
  const nlohmann::json j = nlohmann::json::parse(test::read_text((dir / "config.json").string()));
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["attention_bias"], true);
  const ModelConfig back = load_checkpoint_config(dir.string());
  EXPECT_EQ(back.block, c.block);
  std::vector<float> loaded(static_cast<size_t>(model.layout().total()), -1.0f);
  load_checkpoint_params(dir.string(), param_layout(back), loaded.data());
  EXPECT_EQ(std::memcmp(loaded.data(), model.params(), loaded.size() * sizeof(float)), 0);
  // What weft does not implement is refused by key.
  nlohmann::json bad = j;
  bad["hidden_act"] = "gelu";
  EXPECT_THROW(model_config_from_json(bad, "bad"), InputError);
  bad = j;
  bad["mlp_bias"] = false;
  EXPECT_THROW(model_config_from_json(bad, "bad"), InputError);
  bad = j;
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THROW(model_config_from_json(bad, "bad"), InputError);
}

// MPT's block is written as MptForCausalLM: Wqkv (3C, C) the transpose of c_attn, no biases (the
// LayerNorms' included), the head tied; read back bit for bit; what weft does not compute refused.
TEST(GptVariants, MptCheckpointsUseHuggingFaceNamesAndRoundTrip) {
  ModelConfig c = make_model_config("mpt-test", 2, 4, 64, 32, 300);
  c = c.family->with_settings(c, {{"position", "alibi"}, {"bias", "false"}, {"mlp", "gelu_exact"}});
  const SavedModel saved = save_noisy(c, "mpt_hf_roundtrip");
  GPT& model = *saved.model;
  const SafetensorsFile f((saved.dir / "model.safetensors").string());
  const int64_t C = 64, W = 3 * C;
  EXPECT_EQ(f.info("transformer.blocks.1.attn.Wqkv.weight").shape, (std::vector<int64_t>{3 * C, C}));
  EXPECT_EQ(f.info("transformer.blocks.0.ffn.up_proj.weight").shape, (std::vector<int64_t>{4 * C, C}));
  EXPECT_EQ(f.info("transformer.norm_f.weight").shape, (std::vector<int64_t>{C}));
  EXPECT_FALSE(f.has("transformer.norm_f.bias"));
  EXPECT_FALSE(f.has("transformer.blocks.0.norm_1.bias"));
  EXPECT_FALSE(f.has("transformer.wpe.weight"));
  // Wqkv row r, column i is c_attn (i, r).
  const ParamTensor* qkv = model.layout().find("transformer.h.1.attn.c_attn.weight");
  std::vector<float> w(static_cast<size_t>(3 * C * C));
  f.read_f32("transformer.blocks.1.attn.Wqkv.weight", {3 * C, C}, w.data());
  EXPECT_EQ(w[(C + 37) * C + 7], model.params()[qkv->offset + 7 * W + C + 37]);
  const nlohmann::json j = nlohmann::json::parse(test::read_text((saved.dir / "config.json").string()));
  EXPECT_EQ(j["architectures"][0], "MptForCausalLM");
  EXPECT_EQ(j["model_type"], "mpt");
  EXPECT_EQ(j["attn_config"]["alibi"], true);
  EXPECT_EQ(j["no_bias"], true);
  const ModelConfig back = load_checkpoint_config(saved.dir.string());
  EXPECT_EQ(back.block, c.block);
  std::vector<float> loaded(static_cast<size_t>(model.layout().total()), -1.0f);
  load_checkpoint_params(saved.dir.string(), param_layout(back), loaded.data());
  EXPECT_EQ(std::memcmp(loaded.data(), model.params(), loaded.size() * sizeof(float)), 0);
  // The presets are MPT's block.
  EXPECT_EQ(model_preset("mpt-7b").family->to_config_json(model_preset("mpt-7b"))["model_type"], "mpt");
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"qk_ln", true}, {"clip_qkv", 6.0}, {"alibi", false}, {"alibi_bias_max", 16}, {"softmax_scale", 0.1}}) {
    nlohmann::json bad = j;
    bad["attn_config"][key] = value;
    try {
      model_config_from_json(bad, "bad");
      ADD_FAILURE() << key << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  nlohmann::json bad = j;
  bad["expansion_ratio"] = 8;
  EXPECT_THROW(model_config_from_json(bad, "bad"), InputError);
  bad = j;
  bad["no_bias"] = false;
  EXPECT_THROW(model_config_from_json(bad, "bad"), InputError);
}

// GPT-NeoX's block is written as GPTNeoXForCausalLM: q, k and v interleaved per head in one
// query_key_value (3C, C), rows (head * 3 + part) * head size; read back bit for bit.
TEST(GptVariants, NeoxCheckpointsUseHuggingFaceNamesAndRoundTrip) {
  ModelConfig c = make_model_config("neox-test", 2, 4, 64, 32, 300);
  for (const bool tied : {false, true}) {
    c = c.family->with_settings(c, {{"position", "rope"}, {"rope_fraction", "0.25"}, {"parallel_residual", "true"},
                                    {"tie_embeddings", tied ? "true" : "false"}});
    const SavedModel saved = save_noisy(c, fmt::format("neox_hf_roundtrip{}", tied));
    GPT& model = *saved.model;
    const SafetensorsFile f((saved.dir / "model.safetensors").string());
    const int64_t C = 64, hd = 16, W = 3 * C;
    EXPECT_EQ(f.info("gpt_neox.layers.1.attention.query_key_value.weight").shape, (std::vector<int64_t>{3 * C, C}));
    EXPECT_EQ(f.info("gpt_neox.layers.0.attention.query_key_value.bias").shape, (std::vector<int64_t>{3 * C}));
    EXPECT_EQ(f.info("gpt_neox.layers.0.mlp.dense_h_to_4h.weight").shape, (std::vector<int64_t>{c.ffn, C}));
    EXPECT_EQ(f.info("gpt_neox.final_layer_norm.bias").shape, (std::vector<int64_t>{C}));
    EXPECT_EQ(f.has("embed_out.weight"), !tied);
    EXPECT_FALSE(f.has("transformer.h.0.attn.c_attn.weight"));
    // Head 2's k, its dimension 5, input i: query_key_value row (2 * 3 + 1) * hd + 5, column i; in
    // weft's c_attn (i, C + 2 * hd + 5). Its bias likewise.
    const ParamTensor* qkv = model.layout().find("transformer.h.1.attn.c_attn.weight");
    const ParamTensor* qkvb = model.layout().find("transformer.h.1.attn.c_attn.bias");
    std::vector<float> w(static_cast<size_t>(3 * C * C)), b(static_cast<size_t>(3 * C));
    f.read_f32("gpt_neox.layers.1.attention.query_key_value.weight", {3 * C, C}, w.data());
    f.read_f32("gpt_neox.layers.1.attention.query_key_value.bias", {3 * C}, b.data());
    const int64_t row = (2 * 3 + 1) * hd + 5, col = C + 2 * hd + 5;
    EXPECT_EQ(w[row * C + 7], model.params()[qkv->offset + 7 * W + col]);
    EXPECT_EQ(b[row], model.params()[qkvb->offset + col]);
    const nlohmann::json j = nlohmann::json::parse(test::read_text((saved.dir / "config.json").string()));
    EXPECT_EQ(j["architectures"][0], "GPTNeoXForCausalLM");
    EXPECT_EQ(j["model_type"], "gpt_neox");
    EXPECT_EQ(j["use_parallel_residual"], true);
    EXPECT_EQ(j["rope_parameters"]["partial_rotary_factor"], 0.25);
    const ModelConfig back = load_checkpoint_config(saved.dir.string());
    EXPECT_EQ(back.block, c.block);
    std::vector<float> loaded(static_cast<size_t>(model.layout().total()), -1.0f);
    load_checkpoint_params(saved.dir.string(), param_layout(back), loaded.data());
    EXPECT_EQ(std::memcmp(loaded.data(), model.params(), loaded.size() * sizeof(float)), 0);
    // A transformers 4 file (rotary_pct, rotary_emb_base; no rope_parameters) reads the same.
    nlohmann::json v4 = j;
    v4.erase("rope_parameters");
    EXPECT_EQ(model_config_from_json(v4, "v4").block, c.block);
    // Pythia's exact GELU ("gelu") reads as mlp = "gelu_exact" and is written back so.
    nlohmann::json pythia = j;
    pythia["hidden_act"] = "gelu";
    const ModelConfig exact = model_config_from_json(pythia, "pythia");
    EXPECT_EQ(exact.block.mlp, MlpKind::kGeluExact);
    EXPECT_EQ(exact.family->to_config_json(exact)["hidden_act"], "gelu");
    // What weft does not implement is refused by key and value.
    nlohmann::json bad = j;
    bad["hidden_act"] = "relu";
    try {
      model_config_from_json(bad, "bad");
      ADD_FAILURE() << "relu accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("hidden_act is \"relu\""), std::string::npos) << e.what();
    }
    bad = j;
    bad["attention_bias"] = false;
    EXPECT_THROW(model_config_from_json(bad, "bad"), InputError);
    bad = j;
    bad["rope_parameters"]["rope_type"] = "dynamic";
    EXPECT_THROW(model_config_from_json(bad, "bad"), InputError);
  }
  // Not NeoX's block (RMSNorm): weft's own names.
  ModelConfig other = c.family->with_settings(c, {{"norm", "rmsnorm"}});
  EXPECT_EQ(other.family->to_config_json(other)["model_type"], "weft-gpt");
}

}  // namespace
}  // namespace weft
