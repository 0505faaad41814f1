#include "ckpt/checkpoint.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/safetensors.h"
#include "ckpt_test_util.h"
#include "core/error.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing_ckpt::read_bytes;
using testing_ckpt::run_python_reader;
using testing_ckpt::TempDir;
using testing_ckpt::write_bytes;
using testing_ckpt::dead_pid;
using testing_ckpt::make_unverified;
using testing_ckpt::suffix_for_pid;

using testing_ckpt::input_error_message;

// A distinct, non-trivial float for every (buffer, index): all 32 bits matter for bit-exactness.
float pattern(uint32_t salt, int64_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + salt * 40503u + 12345u;
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  // Finite floats in [-2, 2) with full mantissas.
  return static_cast<float>(static_cast<int32_t>(x)) * 0x1p-30f;
}

void fill_pattern(const ParamLayout& layout, uint32_t salt, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(layout.total()));
  for (int64_t i = 0; i < layout.total(); ++i) buf[i] = pattern(salt, i);
}

// A small model for the tests that do not need the real vocabulary: V=100, Vp=128.
ModelConfig micro_config(int n_layer = 2, int ffn = 0) {
  return make_model_config("micro", n_layer, 2, 32, 16, 100, ffn);
}

// Element range of wte's padded rows in the flat buffer.
std::pair<int64_t, int64_t> padded_range(const ParamLayout& layout) {
  const ParamTensor& wte = layout.tensors()[0];
  EXPECT_TRUE(wte.tied_head);
  EXPECT_TRUE(wte.sparse_rows);
  return {wte.offset + wte.hf_shape[0] * wte.hf_shape[1], wte.offset + wte.numel};
}

// Every element outside the padded rows equals `want` bit for bit; the padded rows are +0.
void expect_loaded(const ParamLayout& layout, const std::vector<float>& got, const std::vector<float>& want) {
  const auto [pb, pe] = padded_range(layout);
  ASSERT_GT(pe, pb);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), pb * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(got.data() + pe, want.data() + pe, (layout.total() - pe) * sizeof(float)), 0);
  int64_t nonzero = 0;
  for (int64_t i = pb; i < pe; ++i) nonzero += std::bit_cast<uint32_t>(got[i]) != 0u;
  EXPECT_EQ(nonzero, 0) << "padded vocabulary rows must be +0";
}

std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  const std::string base = dir.filename().string();
  for (const auto& e : fs::directory_iterator(dir.parent_path())) {
    const std::string n = e.path().filename().string();
    if (n != base && n.rfind(base + ".", 0) == 0) out.push_back(n);
  }
  return out;
}

TEST(CheckpointTest, RoundTripTinyBitExact) {
  TempDir tmp;
  const ModelConfig layout_cfg = model_preset("tiny");
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params, m, v;
  fill_pattern(layout, 1, params);
  fill_pattern(layout, 2, m);
  fill_pattern(layout, 3, v);
  for (auto& x : v) x = std::fabs(x);
  const nlohmann::json trainer = {{"step", 400}, {"seed", 1234}, {"data", {{"shard", 3}, {"pos", 123456789012LL}}}};
  const std::string dir = tmp / "run/step-400";
  save_checkpoint(dir, {&layout_cfg, &layout, params.data(), m.data(), v.data(), trainer});

  for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors", "trainer.json"}) {
    EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / f)) << f;
  }
  EXPECT_TRUE(leftovers(dir).empty());

  // The model file as an outsider sees it: 2 + 12 L + 2 tensors, HF names, F32, wte with V rows.
  {
    SafetensorsFile f(dir + "/model.safetensors");
    EXPECT_EQ(f.size(), 2u + 12u * 4u + 2u);
    EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
    EXPECT_EQ(f.info("transformer.wte.weight").shape, (std::vector<int64_t>{50257, 256}));
    EXPECT_EQ(f.info("transformer.wpe.weight").shape, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(f.info("transformer.h.3.attn.c_attn.weight").shape, (std::vector<int64_t>{256, 768}));
    EXPECT_EQ(f.info("transformer.h.3.mlp.c_proj.weight").shape, (std::vector<int64_t>{1024, 256}));
    EXPECT_EQ(f.info("transformer.ln_f.bias").dtype, StDType::kF32);
    EXPECT_FALSE(f.has("lm_head.weight"));
    SafetensorsFile o(dir + "/optimizer.safetensors");
    EXPECT_EQ(o.size(), 2u * (2u + 12u * 4u + 2u));
    EXPECT_EQ(o.info("exp_avg_sq.transformer.wte.weight").shape, (std::vector<int64_t>{50257, 256}));
  }

  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> p2(params.size(), nan), m2(params.size(), nan), v2(params.size(), nan);
  load_checkpoint_params(dir, layout, p2.data());
  expect_loaded(layout, p2, params);
  ASSERT_TRUE(load_checkpoint_optimizer(dir, layout, m2.data(), v2.data()));
  expect_loaded(layout, m2, m);
  expect_loaded(layout, v2, v);
  EXPECT_EQ(load_checkpoint_trainer(dir), trainer);

  const ModelConfig c = load_checkpoint_config(dir);
  const ModelConfig t = model_preset("tiny");
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.n_layer, t.n_layer);
  EXPECT_EQ(c.n_head, t.n_head);
  EXPECT_EQ(c.n_embd, t.n_embd);
  EXPECT_EQ(c.n_ctx, t.n_ctx);
  EXPECT_EQ(c.vocab_size, t.vocab_size);
  EXPECT_EQ(c.padded_vocab, t.padded_vocab);
  EXPECT_EQ(c.ffn, t.ffn);
  EXPECT_EQ(c.ln_eps, t.ln_eps);
  EXPECT_EQ(c.init_std, t.init_std);
}

TEST(CheckpointTest, ConfigJsonHasHuggingFaceKeys) {
  TempDir tmp;
  const ModelConfig layout_cfg = model_preset("tiny");
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params(static_cast<size_t>(layout.total()), 0.0f);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, params.data(), nullptr, nullptr, nullptr});
  const auto j = nlohmann::json::parse(read_bytes(dir + "/config.json"));
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["n_layer"], 4);
  EXPECT_EQ(j["n_head"], 4);
  EXPECT_EQ(j["n_embd"], 256);
  EXPECT_EQ(j["n_positions"], 256);
  EXPECT_EQ(j["n_ctx"], 256);
  EXPECT_EQ(j["vocab_size"], 50257);
  EXPECT_TRUE(j["n_inner"].is_null());  // 4C
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["layer_norm_epsilon"].get<double>(), 1e-5);  // written as 1e-05, not 9.99e-06
  EXPECT_EQ(j["initializer_range"].get<double>(), 0.02);
  EXPECT_EQ(j["resid_pdrop"], 0.0);
  EXPECT_EQ(j["embd_pdrop"], 0.0);
  EXPECT_EQ(j["attn_pdrop"], 0.0);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["bos_token_id"], 50256);
  EXPECT_EQ(j["eos_token_id"], 50256);
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_EQ(j["weft"], nlohmann::json({{"name", "tiny"}, {"padded_vocab", 50304}, {"format_version", 2}}));
  // No optimizer given: no optimizer file, and the loader says so.
  EXPECT_FALSE(fs::exists(dir + "/optimizer.safetensors"));
  std::vector<float> m(params.size()), v(params.size());
  EXPECT_FALSE(load_checkpoint_optimizer(dir, layout, m.data(), v.data()));
  EXPECT_EQ(load_checkpoint_trainer(dir), nlohmann::json::object());  // null trainer -> {}
}

TEST(CheckpointTest, ConfigRoundTripNonDefaultShapes) {
  ModelConfig cfg = micro_config(3, 80);  // ffn != 4C, vocabulary without <|endoftext|>
  cfg.ln_eps = 1e-6f;
  cfg.init_std = 0.01f;
  const nlohmann::json j = checkpoint_config_json(cfg);
  EXPECT_EQ(j["n_inner"], 80);
  EXPECT_TRUE(j["bos_token_id"].is_null());
  const ModelConfig back = model_config_from_json(j, "mem");
  EXPECT_EQ(back.name, "micro");
  EXPECT_EQ(back.n_layer, 3);
  EXPECT_EQ(back.ffn, 80);
  EXPECT_EQ(back.vocab_size, 100);
  EXPECT_EQ(back.padded_vocab, 128);
  EXPECT_EQ(back.ln_eps, 1e-6f);
  EXPECT_EQ(back.init_std, 0.01f);
}

TEST(CheckpointTest, ConfigErrorsNameFileAndKey) {
  TempDir tmp;
  const ModelConfig layout_cfg = micro_config();
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params(static_cast<size_t>(layout.total()), 0.0f);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, params.data(), nullptr, nullptr, {}});
  make_unverified(dir);  // the edits below would otherwise fail the manifest's checksum first
  const std::string path = dir + "/config.json";
  auto j = nlohmann::json::parse(read_bytes(path));

  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json k = j;
    edit(k);
    write_bytes(path, k.dump());
    return input_error_message([&] { load_checkpoint_config(dir); });
  };
  EXPECT_EQ(with([](nlohmann::json& k) { k.erase("n_head"); }), path + ": key 'n_head' is missing");
  EXPECT_EQ(with([](nlohmann::json& k) { k["n_embd"] = "wide"; }),
            path + ": key 'n_embd' is \"wide\", expected an integer");
  EXPECT_EQ(with([](nlohmann::json& k) { k["n_layer"] = 0; }),
            path + ": key 'n_layer' is 0, expected an integer from 1 to 100000");
  EXPECT_NE(with([](nlohmann::json& k) { k["n_head"] = 3; }).find(path + ": model 'micro': hidden size 32 is not "
                                                                           "divisible by the number of heads 3"),
            std::string::npos);
  EXPECT_NE(with([](nlohmann::json& k) { k["activation_function"] = "relu"; }).find("activation_function is \"relu\""),
            std::string::npos);
  EXPECT_NE(with([](nlohmann::json& k) { k["tie_word_embeddings"] = false; }).find("tie_word_embeddings is false"),
            std::string::npos);
  EXPECT_NE(with([](nlohmann::json& k) { k["weft"]["padded_vocab"] = 64; }).find("padded vocabulary 64 is smaller"),
            std::string::npos);

  write_bytes(path, "{\"n_layer\": ");
  const std::string bad = input_error_message([&] { load_checkpoint_config(dir); });
  EXPECT_NE(bad.find(path + ": the model config is not valid JSON"), std::string::npos) << bad;
  fs::remove(path);
  const std::string missing = input_error_message([&] { load_checkpoint_config(dir); });
  EXPECT_NE(missing.find(path + ": cannot read the model config"), std::string::npos) << missing;
  const std::string nodir = input_error_message([&] { load_checkpoint_config(tmp / "nowhere"); });
  EXPECT_EQ(nodir, (tmp / "nowhere") + ": checkpoint folder does not exist");
}

TEST(CheckpointTest, ShapeMismatchNamesTensorAndShapes) {
  TempDir tmp;
  const ModelConfig tiny_cfg = model_preset("tiny");
  const ParamLayout tiny = param_layout(tiny_cfg);
  std::vector<float> params(static_cast<size_t>(tiny.total()), 0.25f);
  const std::string dir = tmp / "step-400";
  save_checkpoint(dir, {&tiny_cfg, &tiny, params.data(), nullptr, nullptr, {}});
  const ParamLayout small = param_layout(model_preset("small"));
  std::vector<float> out(static_cast<size_t>(small.total()), 7.0f);
  const std::string msg = input_error_message([&] { load_checkpoint_params(dir, small, out.data()); });
  EXPECT_EQ(msg, dir + "/model.safetensors: transformer.wte.weight has shape [50257, 256], the model expects "
                       "[50257, 384]");
  EXPECT_EQ(out[0], 7.0f) << "nothing is written when the check fails";
}

TEST(CheckpointTest, LayerAndWidthMismatches) {
  TempDir tmp;
  const ModelConfig two_cfg = micro_config(2);
  const ParamLayout two = param_layout(two_cfg);
  std::vector<float> params;
  fill_pattern(two, 5, params);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&two_cfg, &two, params.data(), params.data(), params.data(), {}});
  const std::string file = dir + "/model.safetensors";

  const ParamLayout three = param_layout(micro_config(3));
  std::vector<float> out(static_cast<size_t>(three.total()));
  EXPECT_EQ(input_error_message([&] { load_checkpoint_params(dir, three, out.data()); }),
            file + ": transformer.h.2.ln_1.weight is missing (28 tensors in the file, the model expects 40; a "
                   "checkpoint of another model?)");
  const ParamLayout one = param_layout(micro_config(1));
  EXPECT_NE(input_error_message([&] { load_checkpoint_params(dir, one, out.data()); })
                .find(file + ": 12 tensor(s) that this model does not have: transformer.h.1."),
            std::string::npos);
  const ParamLayout wider_ffn = param_layout(micro_config(2, 64));
  EXPECT_EQ(input_error_message([&] { load_checkpoint_params(dir, wider_ffn, out.data()); }),
            file + ": transformer.h.0.mlp.c_fc.weight has shape [32, 128], the model expects [32, 64]");
  std::vector<float> m(out.size()), v(out.size());
  EXPECT_EQ(input_error_message([&] { load_checkpoint_optimizer(dir, wider_ffn, m.data(), v.data()); }),
            dir + "/optimizer.safetensors: exp_avg.transformer.h.0.mlp.c_fc.weight has shape [32, 128], the model "
                  "expects [32, 64]");
}

TEST(CheckpointTest, SaveReplacesExistingCheckpoint) {
  TempDir tmp;
  const ModelConfig layout_cfg = micro_config();
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> a, b;
  fill_pattern(layout, 10, a);
  fill_pattern(layout, 11, b);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, a.data(), a.data(), a.data(), {{"step", 1}}});
  save_checkpoint(dir + "/", {&layout_cfg, &layout, b.data(), nullptr, nullptr, {{"step", 2}}});  // trailing slash: same folder
  EXPECT_TRUE(leftovers(dir).empty());
  std::vector<float> got(a.size());
  load_checkpoint_params(dir, layout, got.data());
  expect_loaded(layout, got, b);
  EXPECT_EQ(load_checkpoint_trainer(dir)["step"], 2);
  // The old optimizer file went with the old folder.
  std::vector<float> m(a.size()), v(a.size());
  EXPECT_FALSE(load_checkpoint_optimizer(dir, layout, m.data(), v.data()));
}

TEST(CheckpointTest, StaleTempFolderDoesNotBreakLoading) {
  TempDir tmp;
  const ModelConfig layout_cfg = micro_config();
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> a, b;
  fill_pattern(layout, 20, a);
  fill_pattern(layout, 21, b);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, a.data(), nullptr, nullptr, {{"step", 1}}});
  // A save that crashed while writing: a partial temporary folder.
  const std::string stale = dir + ".tmp-" + suffix_for_pid(dead_pid());
  fs::create_directories(stale);
  write_bytes(stale + "/model.safetensors", "garbage");
  std::vector<float> got(a.size());
  load_checkpoint_params(dir, layout, got.data());
  expect_loaded(layout, got, a);
  // The next save cleans it up.
  save_checkpoint(dir, {&layout_cfg, &layout, b.data(), nullptr, nullptr, {{"step", 2}}});
  EXPECT_TRUE(leftovers(dir).empty());
  load_checkpoint_params(dir, layout, got.data());
  expect_loaded(layout, got, b);
}

TEST(CheckpointTest, CrashBetweenRenamesKeepsPreviousCheckpoint) {
  TempDir tmp;
  const ModelConfig layout_cfg = micro_config();
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> a, b, c;
  fill_pattern(layout, 30, a);
  fill_pattern(layout, 31, b);
  fill_pattern(layout, 32, c);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, a.data(), nullptr, nullptr, {{"step", 1}}});
  save_checkpoint(tmp / "other", {&layout_cfg, &layout, b.data(), nullptr, nullptr, {{"step", 2}}});
  // State after "rename dir -> dir.old-<host>-<pid>" and before "rename dir.tmp-<host>-<pid> -> dir"
  // of a process that died there.
  const std::string writer = suffix_for_pid(dead_pid());
  fs::rename(dir, dir + ".old-" + writer);
  fs::rename(tmp / "other", dir + ".tmp-" + writer);

  EXPECT_EQ(resolve_checkpoint_dir(dir), dir + ".old-" + writer);
  std::vector<float> got(a.size());
  load_checkpoint_params(dir, layout, got.data());
  expect_loaded(layout, got, a);
  EXPECT_EQ(load_checkpoint_trainer(dir)["step"], 1);
  EXPECT_EQ(load_checkpoint_config(dir).n_layer, 2);
  EXPECT_TRUE(fs::exists(dir + ".old-" + writer)) << "loading changes nothing on disk";

  // The next save restores, then replaces, and leaves no debris.
  save_checkpoint(dir, {&layout_cfg, &layout, c.data(), nullptr, nullptr, {{"step", 3}}});
  EXPECT_TRUE(leftovers(dir).empty());
  EXPECT_EQ(resolve_checkpoint_dir(dir), dir);
  load_checkpoint_params(dir, layout, got.data());
  expect_loaded(layout, got, c);
  EXPECT_EQ(load_checkpoint_trainer(dir)["step"], 3);
}

TEST(CheckpointTest, RejectsFileInPlaceOfFolder) {
  TempDir tmp;
  const ModelConfig layout_cfg = micro_config();
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params(static_cast<size_t>(layout.total()), 0.0f);
  write_bytes(tmp / "f", "x");
  EXPECT_NE(input_error_message([&] { save_checkpoint(tmp / "f", {&layout_cfg, &layout, params.data(), nullptr, nullptr, {}}); })
                .find("is not a folder"),
            std::string::npos);
  EXPECT_NE(input_error_message([&] { load_checkpoint_params(tmp / "f", layout, params.data()); })
                .find("is not a folder"),
            std::string::npos);
}

// A file as Hugging Face's hub ships GPT-2: GPT2Model names without "transformer.", the
// causal-mask buffers, F16 data, an lm_head.weight tied to wte.
struct HfFile {
  std::vector<std::vector<uint16_t>> f16;
  std::vector<std::vector<float>> f32;
  std::vector<TensorRef> refs;
};

HfFile make_hf_file(const ModelConfig& cfg, const ParamLayout& layout, const std::vector<float>& params,
                    bool lm_head_equal) {
  HfFile h;
  h.f16.reserve(layout.tensors().size() + 2);
  h.f32.reserve(8);
  for (const ParamTensor& t : layout.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.hf_shape) n *= d;
    std::vector<uint16_t> data(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) data[i] = f32_to_f16(params[t.offset + i]);
    h.f16.push_back(std::move(data));
    h.refs.push_back({t.name.substr(std::string("transformer.").size()), StDType::kF16, t.hf_shape, h.f16.back().data()});
  }
  for (int l = 0; l < cfg.n_layer; ++l) {
    h.f32.emplace_back(static_cast<size_t>(cfg.n_ctx * cfg.n_ctx), 1.0f);
    h.refs.push_back({"h." + std::to_string(l) + ".attn.bias", StDType::kF32, {1, 1, cfg.n_ctx, cfg.n_ctx},
                      h.f32.back().data()});
  }
  h.f16.push_back(h.f16.front());  // lm_head = wte
  if (!lm_head_equal) h.f16.back()[37] ^= 1;
  h.refs.push_back({"lm_head.weight", StDType::kF16, layout.tensors()[0].hf_shape, h.f16.back().data()});
  return h;
}

TEST(CheckpointTest, LoadsHuggingFaceStyleFiles) {
  TempDir tmp;
  const ModelConfig cfg = micro_config();
  const ModelConfig layout_cfg = cfg;
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params;
  fill_pattern(layout, 40, params);
  const std::string dir = tmp / "hf";
  fs::create_directories(dir);
  // A config.json as the hub has it: no "weft" key, no n_inner, dropout on.
  write_bytes(dir + "/config.json", R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 16, "n_embd": 32, "n_head": 2, "n_layer": 2,
    "n_positions": 16, "resid_pdrop": 0.1, "summary_activation": null, "vocab_size": 100})");
  const ModelConfig got_cfg = load_checkpoint_config(dir);
  EXPECT_EQ(got_cfg.name, "gpt2");
  EXPECT_EQ(got_cfg.n_embd, 32);
  EXPECT_EQ(got_cfg.ffn, 128);
  EXPECT_EQ(got_cfg.padded_vocab, 128);

  HfFile h = make_hf_file(cfg, layout, params, true);
  write_safetensors(dir + "/model.safetensors", h.refs, {{"format", "pt"}});
  std::vector<float> out(params.size(), NAN);
  load_checkpoint_params(dir, layout, out.data());
  std::vector<float> want(params.size(), 0.0f);
  for (const ParamTensor& t : layout.tensors()) {
    const int64_t live = t.tied_head ? t.hf_shape[0] * t.hf_shape[1] : t.numel;
    for (int64_t i = 0; i < live; ++i) want[t.offset + i] = f16_to_f32(f32_to_f16(params[t.offset + i]));
  }
  expect_loaded(layout, out, want);

  HfFile bad = make_hf_file(cfg, layout, params, false);
  write_safetensors(dir + "/model.safetensors", bad.refs, {{"format", "pt"}});
  const std::string msg = input_error_message([&] { load_checkpoint_params(dir, layout, out.data()); });
  EXPECT_NE(msg.find(dir + "/model.safetensors: lm_head.weight differs from wte.weight (row 1, column 5:"),
            std::string::npos)
      << msg;
}

TEST(CheckpointTest, UnknownTensorsAndDtypesAreErrors) {
  TempDir tmp;
  const ModelConfig layout_cfg = micro_config();
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params;
  fill_pattern(layout, 50, params);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, params.data(), nullptr, nullptr, {}});
  make_unverified(dir);  // rewrites model.safetensors below: reach the loader's own checks
  const std::string file = dir + "/model.safetensors";
  std::vector<TensorRef> refs;
  for (const ParamTensor& t : layout.tensors()) refs.push_back({t.name, StDType::kF32, t.hf_shape, params.data() + t.offset});
  const float extra = 1.0f;
  refs.push_back({"transformer.h.0.attn.rotary", StDType::kF32, {1}, &extra});
  write_safetensors(file, refs, {{"format", "pt"}});
  std::vector<float> out(params.size());
  EXPECT_EQ(input_error_message([&] { load_checkpoint_params(dir, layout, out.data()); }),
            file + ": 1 tensor(s) that this model does not have: transformer.h.0.attn.rotary (a checkpoint of a "
                   "larger model?)");
  refs.pop_back();
  const std::vector<int32_t> ints(32, 1);
  for (auto& r : refs) {
    if (r.name == "transformer.ln_f.bias") r = {r.name, StDType::kI32, r.shape, ints.data()};
  }
  write_safetensors(file, refs, {{"format", "pt"}});
  EXPECT_EQ(input_error_message([&] { load_checkpoint_params(dir, layout, out.data()); }),
            file + ": transformer.ln_f.bias has dtype I32, expected F32, F16, BF16 or F64");
}

// The loader knows no family: what a foreign file may hold besides the parameters comes from the
// family's ParamTable::foreign. A toy family's table (a "body." prefix, a tied "out.weight" head,
// "blk.<i>.mask" buffers) loads a file that uses those names; the same table without foreign names
// refuses the extra tensors, and a GPT-2 name means nothing to it.
TEST(CheckpointTest, ForeignNamesComeFromTheFamilysTable) {
  ParamTable table;
  table.front = {{"body.emb.weight", 0, {6, 4}, TpSplit::kRows, true, ParamInit::kNormal}};
  table.front[0].tied_head = true;
  table.layers = {{{"body.blk.0.w", 0, {4, 4}, TpSplit::kReplicated, true, ParamInit::kNormal}},
                  {{"body.blk.1.w", 0, {4, 4}, TpSplit::kReplicated, true, ParamInit::kNormal}}};
  table.back = {{"body.norm.bias", 0, {4}, TpSplit::kReplicated, false, ParamInit::kZeros}};
  ForeignNames foreign{"body.", "out.weight", "blk.", {".mask"}};
  EXPECT_EQ(foreign.strip("body.blk.0.w"), "blk.0.w");
  EXPECT_EQ(foreign.strip("other.x"), "other.x");
  EXPECT_TRUE(foreign.is_buffer("blk.12.mask", ""));
  EXPECT_TRUE(foreign.is_buffer("body.blk.3.mask", "body."));
  EXPECT_FALSE(foreign.is_buffer("blk.x.mask", ""));
  EXPECT_FALSE(foreign.is_buffer("blk.1.mask2", ""));
  EXPECT_FALSE(ForeignNames{}.is_buffer("h.0.attn.bias", ""));

  const ParamLayout plain(table);
  table.foreign = foreign;
  const ParamLayout with_foreign(table);
  std::vector<float> params;
  fill_pattern(with_foreign, 60, params);
  TempDir tmp;
  const std::string dir = tmp / "toy";
  fs::create_directories(dir);
  const std::string file = dir + "/model.safetensors";
  // The names without the optional prefix, the tied head equal to its tensor, two mask buffers.
  std::vector<TensorRef> refs;
  for (const ParamTensor& t : with_foreign.tensors()) {
    refs.push_back({foreign.strip(t.name), StDType::kF32, t.hf_shape, params.data() + t.offset});
  }
  const std::vector<float> mask(4, 1.0f);
  refs.push_back({"out.weight", StDType::kF32, {6, 4}, params.data()});
  refs.push_back({"blk.0.mask", StDType::kF32, {2, 2}, mask.data()});
  refs.push_back({"blk.1.mask", StDType::kF32, {2, 2}, mask.data()});
  write_safetensors(file, refs, {});
  std::vector<float> out(params.size(), NAN);
  load_checkpoint_params(dir, with_foreign, out.data(), CheckpointVerify::kAlreadyVerified);
  EXPECT_EQ(out, params);
  // A head that differs from its tied tensor is named with both.
  std::vector<float> head(params.begin(), params.begin() + 24);
  head[9] += 1.0f;
  refs[refs.size() - 3].data = head.data();
  write_safetensors(file, refs, {});
  EXPECT_NE(input_error_message([&] { load_checkpoint_params(dir, with_foreign, out.data(), CheckpointVerify::kAlreadyVerified); })
                .find(file + ": out.weight differs from emb.weight (row 2, column 1:"),
            std::string::npos);
  // Without the family's foreign names: its own names only, nothing else.
  refs.clear();
  for (const ParamTensor& t : plain.tensors()) refs.push_back({t.name, StDType::kF32, t.hf_shape, params.data() + t.offset});
  refs.push_back({"blk.0.mask", StDType::kF32, {2, 2}, mask.data()});
  write_safetensors(file, refs, {});
  EXPECT_EQ(input_error_message([&] { load_checkpoint_params(dir, plain, out.data(), CheckpointVerify::kAlreadyVerified); }),
            file + ": 1 tensor(s) that this model does not have: blk.0.mask (a checkpoint of a larger model?)");
}

// The checkpoint is what GPT2LMHeadModel.from_pretrained(dir) expects: checked by an
// independent Python reader (json + numpy -> torch), with sums computed here.
TEST(CheckpointTest, PythonReaderSeesHuggingFaceLayout) {
  TempDir tmp;
  const ModelConfig layout_cfg = micro_config(2, 48);
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params, m, v;
  fill_pattern(layout, 60, params);
  fill_pattern(layout, 61, m);
  fill_pattern(layout, 62, v);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, params.data(), m.data(), v.data(), {{"step", 7}}});
  const std::string out = run_python_reader("--checkpoint '" + dir + "'", tmp.path().string());
  ASSERT_FALSE(out.empty());
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["trainer"], nlohmann::json({{"step", 7}}));
  EXPECT_EQ(j["model"]["tensors"].size(), layout.tensors().size());
  EXPECT_EQ(j["optimizer"]["tensors"].size(), 2 * layout.tensors().size());
  auto check = [&](const nlohmann::json& tensors, const std::string& prefix, const std::vector<float>& buf) {
    for (const ParamTensor& t : layout.tensors()) {
      SCOPED_TRACE(prefix + t.name);
      const auto& e = tensors.at(prefix + t.name);
      EXPECT_EQ(e["dtype"], "F32");
      EXPECT_EQ(e["shape"], nlohmann::json(t.hf_shape));
      const int64_t n = t.hf_shape.size() == 2 ? t.hf_shape[0] * t.hf_shape[1] : t.hf_shape[0];
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        sum += buf[t.offset + i];
        abs_sum += std::fabs(buf[t.offset + i]);
      }
      EXPECT_NEAR(e["sum"].get<double>(), sum, 1e-12 * abs_sum + 1e-30);
      EXPECT_EQ(e["first"][0].get<double>(), static_cast<double>(buf[t.offset]));
    }
  };
  check(j["model"]["tensors"], "", params);
  check(j["optimizer"]["tensors"], "exp_avg.", m);
  check(j["optimizer"]["tensors"], "exp_avg_sq.", v);
}

}  // namespace
}  // namespace weft
