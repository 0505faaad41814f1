// The family registry (model/family.h): a family registered from the test tree alone is reached
// by the presets, the shape overrides of a run, the checkpoint's config.json, the capabilities the
// layers above read and the data-source lookup, without any file outside its folder naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/manifest.h"
#include "core/error.h"
#include "model/config.h"
#include "model/config_json.h"
#include "model/family.h"
#include "model/gpt/gpt_config.h"
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
  std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend&, bool, int, int, const StageSpec&) const override {
    throw_input("the toy family of the registry test has no model ('{}')", cfg.name);
  }
  SampleSize sample_size(const ModelConfig&, int64_t) const override { return {.fields = 3}; }
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
  EXPECT_NE(family_names().find("gpt, climax, toy"), std::string::npos) << family_names();
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
  EXPECT_EQ(other, "c.json: model_type is \"bert\"; weft reads the model types of its families (gpt, climax, toy)");
  // A second family under a registered name is refused; the same one again is a no-op.
  EXPECT_EQ(input_error([] { register_family(ToyFamily{}); }), "a model family named 'toy' is registered already");
  EXPECT_EQ(input_error([&] { register_family(family); }), "");
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
            "model 'toy-small' (toy) reads data source 'toy-data', which is not registered (known: fields, tokens)");
}

}  // namespace
}  // namespace weft
