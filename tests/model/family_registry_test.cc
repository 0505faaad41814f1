// The family registry (model/family.h): a family registered from the test tree alone is reached
// by the presets, the shape overrides of a run, the checkpoint's config.json, the capabilities the
// layers above read and the data-source lookup, without any file outside its folder naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ckpt/checkpoint.h"
#include "ckpt/manifest.h"
#include "core/error.h"
#include "data/field_batch.h"
#include "model/config.h"
#include "model/climax/climax_config.h"
#include "model/config_json.h"
#include "model/family.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"
#include "train/config.h"
#include "train/run_data.h"

namespace weft {
namespace {

// A toy family with its own presets, shape rules, config.json and data source (no model: this
// test stays at the config level).
class ToyFamily final : public Family {
 public:
  const char* name() const override { return "toy"; }
  const ModelCapabilities& capabilities() const override {
    static const ModelCapabilities caps{.family = "Toy", .pipeline_stages = false, .generation = false,
                                        .data_source = "toy-data", .generation_note = "toys do not talk"};
    return caps;
  }
  std::vector<std::string> preset_names() const override { return {"toy-small", "toy-wide"}; }
  std::optional<ModelConfig> preset(const std::string& name) const override {
    if (name == "toy-small") return make(name, 2, 2, 8);
    if (name == "toy-wide") return make(name, 2, 4, 32);
    return std::nullopt;
  }
  void validate(const ModelConfig& c) const override {
    if (c.n_embd % c.n_head != 0) throw_input("toy '{}': {} % {} != 0", c.name, c.n_embd, c.n_head);
  }
  ModelConfig with_overrides(const ModelConfig& base, const ShapeOverrides& o) const override {
    if (o.vocab_size != 0) throw_input("vocab_size {} does not apply to the toy '{}'", o.vocab_size, base.name);
    ModelConfig c = base;
    if (o.n_layer > 0) c.n_layer = static_cast<int>(o.n_layer);
    if (o.n_embd > 0) c.n_embd = static_cast<int>(o.n_embd), c.ffn = 4 * c.n_embd;
    validate(c);
    return c;
  }
  int64_t fixed_positions(const ModelConfig&) const override { return 3; }
  bool reads_config_json(const nlohmann::json& j) const override {
    return j.contains("model_type") && j.at("model_type") == "toy";
  }
  ModelConfig from_config_json(const nlohmann::json& j, const std::string& source) const override {
    ModelConfig c = make(j.at("weft").at("name").get<std::string>(), json_int(j, "layers", source, 100),
                         json_int(j, "heads", source, 100), json_int(j, "width", source, 1000));
    validate(c);
    return c;
  }
  nlohmann::ordered_json to_config_json(const ModelConfig& c) const override {
    nlohmann::ordered_json j;
    j["model_type"] = "toy";
    j["layers"] = c.n_layer;
    j["heads"] = c.n_head;
    j["width"] = c.n_embd;
    j["weft"] = {{"name", c.name}};
    return j;
  }
  // A front matrix, the shared transformer blocks, a back vector drawn by the family.
  ParamTable param_table(const ModelConfig& c) const override {
    ParamTable t;
    t.front = {{"toy.in", 0, {3, c.n_embd}, TpSplit::kCols, true, ParamInit::kNormal}};
    static const char* const kNames[kParamsPerLayer] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"};
    for (int l = 0; l < c.n_layer; ++l) t.layers.push_back(block_param_specs(c, fmt::format("toy.{}.", l), kNames, false));
    t.back = {{"toy.out", 0, {c.n_embd}, TpSplit::kReplicated, false, ParamInit::kFamily}};
    return t;
  }
  float init_value(const ModelConfig&, const ParamTensor&, int64_t index) const override {
    return 0.5f * static_cast<float>(index);
  }
  std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend&, bool, int, int, const StageSpec&) const override {
    throw_input("the toy family of the registry test has no model ('{}')", cfg.name);
  }
  std::unique_ptr<HostBatch> make_batch(const ModelConfig&, int64_t capacity, int64_t) const override {
    return std::make_unique<FieldBatch>(capacity, 3, 3);
  }
  std::unique_ptr<ModelDescription> describe(const RunSpec& spec) const override {
    throw_input("the toy family of the registry test has no description ('{}')", spec.model.name);
  }
  double train_flops_per_position(const ModelConfig& c, int64_t) const override { return 6.0 * c.n_embd; }

 private:
  ModelConfig make(const std::string& name, int layers, int heads, int width) const {
    ModelConfig c;
    c.name = name;
    c.family = this;
    c.n_layer = layers, c.n_head = heads, c.n_embd = width, c.ffn = 4 * width, c.n_ctx = 3;
    c.vocab_size = c.padded_vocab = 0;
    return c;
  }
};

const ToyFamily& toy() {
  static const ToyFamily family;
  static const bool registered = (register_family(family), true);
  (void)registered;
  return family;
}

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(FamilyRegistry, RegisteredFamilyIsReachedByPresetsOverridesAndConfigJson) {
  const Family& family = toy();
  EXPECT_EQ(find_family("toy"), &family);
  EXPECT_EQ(find_family("gpt"), &gpt_family());
  EXPECT_EQ(find_family("nope"), nullptr);
  EXPECT_NE(family_names().find("gpt, climax, gnn, toy"), std::string::npos) << family_names();
  // Presets of every family, the toy's among them.
  const ModelConfig small = model_preset("toy-small");
  EXPECT_EQ(small.family, &family);
  EXPECT_EQ(small.n_embd, 8);
  EXPECT_STREQ(small.family_name(), "toy");
  EXPECT_EQ(fixed_positions(small), 3);
  EXPECT_EQ(train_flops_per_position(small, 0), 48.0);
  const std::string unknown = input_error([] { model_preset("toy-huge"); });
  EXPECT_NE(unknown.find("toy-small, toy-wide"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("tiny"), std::string::npos) << unknown;
  // A default config is the first family's.
  EXPECT_EQ(ModelConfig{}.family, &gpt_family());
  // Its config.json round trip through the checkpoint's reader and writer.
  const nlohmann::json j = checkpoint_config_json(model_preset("toy-wide"));
  EXPECT_EQ(j.at("model_type"), "toy");
  EXPECT_EQ(j.at("weft").at("format_version"), kCheckpointFormatVersion);
  const ModelConfig back = model_config_from_json(j, "config.json");
  EXPECT_EQ(back.family, &family);
  EXPECT_EQ(back.name, "toy-wide");
  EXPECT_EQ(back.n_head, 4);
  EXPECT_EQ(back.n_embd, 32);
  // A model_type no family reads names the families.
  const std::string other = input_error([] { model_config_from_json({{"model_type", "bert"}}, "c.json"); });
  EXPECT_EQ(other, "c.json: model_type is \"bert\"; weft reads the model types of its families (gpt, climax, gnn, toy)");
  // A second family under a registered name is refused; the same one again is a no-op.
  EXPECT_EQ(input_error([] { register_family(ToyFamily{}); }), "a model family named 'toy' is registered already");
  EXPECT_EQ(input_error([&] { register_family(family); }), "");
}

// ParamLayout is built from the family's declaration: its groups, tp splits, stage parts and
// initial values follow the table, whatever the family.
TEST(FamilyRegistry, ParamLayoutFollowsTheFamilysTable) {
  toy();
  const ModelConfig c = model_preset("toy-small");  // 2 layers, 2 heads, width 8, MLP 32
  const ParamLayout whole = param_layout(c);
  const int64_t block = 2 * 8 + 8 * 24 + 24 + 8 * 8 + 8 + 2 * 8 + 8 * 32 + 32 + 32 * 8 + 8;
  EXPECT_EQ(whole.total(), 3 * 8 + 2 * block + 8);
  EXPECT_EQ(whole.num_groups(), 4);
  EXPECT_EQ(whole.group_range(0), (std::pair<int64_t, int64_t>{0, 24}));
  EXPECT_EQ(whole.group_range(3), (std::pair<int64_t, int64_t>{24 + 2 * block, whole.total()}));
  ASSERT_NE(whole.find("toy.1.e"), nullptr);
  EXPECT_EQ(whole.find("toy.1.e")->layer, 1);
  // tp 2 halves the column-split front matrix; a stage of layer 1 with the head holds no front.
  const ParamLayout half = param_layout(c, 2, 1);
  EXPECT_EQ(half.find("toy.in")->numel, 12);
  const ParamLayout last = param_layout(c, 1, 0, StageSpec{.first_layer = 1, .num_layers = 1, .embedding = false, .head = true});
  EXPECT_FALSE(last.has_group(0));
  EXPECT_TRUE(last.has_group(2) && last.has_group(3));
  // Initial values: ones and zeros of the blocks' norms and biases, the family's own values.
  std::vector<float> p(static_cast<size_t>(whole.total()));
  init_params(whole, 7, p.data());
  const ParamTensor& out = *whole.find("toy.out");
  for (int64_t i = 0; i < out.numel; ++i) EXPECT_EQ(p[static_cast<size_t>(out.offset + i)], 0.5f * i);
  EXPECT_EQ(p[static_cast<size_t>(whole.find("toy.0.a")->offset)], 1.0f);
  EXPECT_EQ(p[static_cast<size_t>(whole.find("toy.0.b")->offset)], 0.0f);
  EXPECT_NE(p[0], 0.0f);
}

TEST(FamilyRegistry, RunConfigAppliesTheFamilysRules) {
  toy();
  RunConfig cfg;
  cfg.model = "toy-small";
  cfg.n_layer = 5;
  cfg.n_embd = 16;
  ModelConfig mc = cfg.model_config();
  EXPECT_EQ(mc.family, &toy());
  EXPECT_EQ(mc.n_layer, 5);
  EXPECT_EQ(mc.ffn, 64);
  EXPECT_EQ(cfg.seq(mc), 3);  // the family fixes a sample's positions
  cfg.vocab_size = 100;
  EXPECT_EQ(input_error([&] { (void)cfg.model_config(); }), "vocab_size 100 does not apply to the toy 'toy-small'");
  cfg.vocab_size = 0;
  cfg.seq_len = 4;
  EXPECT_EQ(input_error([&] { cfg.validate(); }),
            "seq_len 4 does not apply to the Toy model 'toy-small': its samples have 3 positions (leave seq_len 0)");
  // Its data source is looked up by kind: not registered, so the run names it.
  cfg.seq_len = 0;
  EXPECT_EQ(input_error([&] { open_run_data(cfg, mc, 3); }),
            "model 'toy-small' (toy) reads data source 'toy-data', which is not registered (known: fields, graphs, tokens)");
}

// A family's own settings travel in ModelConfig::own (ClimaX: patch size and decoder depth): its
// presets, overrides and config.json keep them; copies share them; reading them as another
// family's is an internal error naming both.
TEST(FamilyRegistry, AFamilysOwnSettingsTravelWithTheConfig) {
  const ModelConfig tiny = model_preset("climax-tiny");
  EXPECT_EQ(climax_fields(tiny).patch, 4);
  EXPECT_EQ(climax_fields(tiny).decoder_depth, 2);
  EXPECT_EQ(num_patches(tiny), 8 * 16);
  EXPECT_EQ(tiny.n_ctx, num_patches(tiny));
  ModelConfig deeper = with_climax_fields(tiny, 4, 3);
  EXPECT_EQ(climax_fields(tiny).decoder_depth, 2);  // the original's settings are untouched
  EXPECT_EQ(climax_fields(deeper).decoder_depth, 3);
  const ModelConfig back = deeper.family->from_config_json(nlohmann::json::parse(deeper.family->to_config_json(deeper).dump()), "test");
  EXPECT_EQ(climax_fields(back).decoder_depth, 3);
  EXPECT_EQ(climax_fields(back).patch, 4);
  ShapeOverrides o;
  o.n_layer = 3;
  EXPECT_EQ(climax_fields(deeper.family->with_overrides(deeper, o)).decoder_depth, 3);
  const ModelConfig gpt = model_preset("tiny");
  EXPECT_EQ(gpt.own, nullptr);
  try {
    (void)climax_fields(gpt);
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("model 'tiny' (gpt): its family settings are missing"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace weft
