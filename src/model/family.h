// The family registry (issue 31; torchtitan's TrainSpec is the model): everything the layers
// above the model need of a model family, so that no engine, trainer, checkpoint or command file
// tests which family a model is. A family is a folder (src/model/<family>/) holding its model,
// its description and one Family object; model/families.cc registers it with one line.
//
// What a family supplies: its presets and the validation of its shapes, the shape overrides a
// run or the planner may apply, its capabilities (ModelCapabilities: pipeline stages, sequence
// parallelism, selective recompute, generation, ...), the positions a sample has when the model
// fixes them, its checkpoint config.json (reader and writer), the model itself, its FLOPs per
// position, the host batch its data source fills, and the output head's share of a pipeline
// partition.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/description.h"
#include "model/model.h"

namespace weft {

class Backend;
struct StageSpec;

// Shape keys a run ([model] n_layer ... in train/config.h) or the planner (--layers ...) may set
// on top of a preset; 0 keeps the preset's value.
struct ShapeOverrides {
  int64_t n_layer = 0, n_head = 0, n_embd = 0, n_ctx = 0, vocab_size = 0, ffn = 0;
  bool any() const { return n_layer != 0 || n_head != 0 || n_embd != 0 || n_ctx != 0 || vocab_size != 0 || ffn != 0; }
  // `over` when set, else the base's value.
  static int pick(int64_t over, int base) { return over > 0 ? static_cast<int>(over) : base; }
  // The MLP size for width C: ffn when set, 4C when the width is set, else the base's.
  int mlp(const ModelConfig& base, int C) const { return ffn > 0 ? static_cast<int>(ffn) : n_embd > 0 ? 4 * C : base.ffn; }
};

// A [model] setting's value (its text as written): a finite number (the whole text), an integer
// within [1, max], a boolean ("true" / "false"); InputError naming the key and the text otherwise.
double setting_number(const std::string& key, const std::string& v);
int setting_int(const std::string& key, const std::string& v, int max);
bool setting_bool(const std::string& key, const std::string& v);

class Family {
 public:
  virtual ~Family() = default;
  // The family's key: the model_type of its config.json and the name in messages ("gpt").
  virtual const char* name() const = 0;
  virtual const ModelCapabilities& capabilities() const = 0;

  // --- shapes ---
  virtual std::vector<std::string> preset_names() const = 0;
  // The preset of that name, or nullopt when the family has none.
  virtual std::optional<ModelConfig> preset(const std::string& name) const = 0;
  // InputError naming the values when the shapes are inconsistent.
  virtual void validate(const ModelConfig& cfg) const = 0;
  // `base` with the non-zero keys of `o` applied (a new width gives an MLP of 4C unless o.ffn
  // says otherwise); InputError naming a key that does not apply to the family.
  virtual ModelConfig with_overrides(const ModelConfig& base, const ShapeOverrides& o) const = 0;
  // The family's own settings: [model] keys beyond the shared shape keys (a graph network's
  // `layer = "egnn"`), by name, with their values as written ("egnn", "0.5", "true"). `base` with
  // them applied; InputError naming a key the family does not have (listing its settings), or a
  // value it cannot take. The default has none and refuses any.
  virtual std::vector<std::string> setting_names() const { return {}; }
  virtual ModelConfig with_settings(const ModelConfig& base, const std::map<std::string, std::string>& settings) const;
  // Its shape in words for the run's log ("4 layers, 4 heads, hidden 256, context 256").
  virtual std::string describe_shape(const ModelConfig& cfg) const;
  // The positions of one sample when the model fixes them (ClimaX: its patches), else 0 (the
  // run's seq_len decides).
  virtual int64_t fixed_positions(const ModelConfig&) const { return 0; }

  // --- the checkpoint's config.json (docs/formats-checkpoint.md) ---
  // Whether a config.json is one of this family's (its model_type, or its absence for the
  // family that reads the Hugging Face files without one).
  virtual bool reads_config_json(const nlohmann::json& j) const = 0;
  // InputError prefixed by `source` for a missing, mistyped or inconsistent key.
  virtual ModelConfig from_config_json(const nlohmann::json& j, const std::string& source) const = 0;
  // Its config.json with the keys in a readable order, ending with the object "weft" (which
  // the checkpoint writer completes with its format version).
  virtual nlohmann::ordered_json to_config_json(const ModelConfig& cfg) const = 0;

  // --- the parameters (model/params.h) ---
  // Its tensors: the front group, the blocks' (block_param_specs), the back group.
  virtual ParamTable param_table(const ModelConfig& cfg) const = 0;
  // Element `index` of a tensor declared ParamInit::kFamily (replicated tensors only).
  virtual float init_value(const ModelConfig& cfg, const ParamTensor& t, int64_t index) const;

  // --- the model ---
  // The model of `cfg` for tensor-parallel part tp_rank of tp_size, holding the layers of
  // `stage` (a family without pipeline stages takes the whole model).
  virtual std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size,
                                            int tp_rank, const StageSpec& stage) const = 0;
  // An empty micro-batch of the family's payload (data/batch.h) for up to `capacity` samples at
  // sequence length T: what its data source fills and its model reads.
  virtual std::unique_ptr<HostBatch> make_batch(const ModelConfig& cfg, int64_t capacity, int64_t T) const = 0;
  // The description of one rank's part of a run (model/description.h): the counts the planner
  // reads. InputError naming the values when the part does not fit the model.
  virtual std::unique_ptr<ModelDescription> describe(const RunSpec& spec) const = 0;
  // Model FLOPs per position (token, patch) of a training step at sequence length T.
  virtual double train_flops_per_position(const ModelConfig& cfg, int64_t T) const = 0;
  // The output head (and loss) as a cost in transformer layers, for partition_layers; 0 for a
  // family without pipeline stages.
  virtual double pipeline_head_cost(const ModelConfig&) const { return 0.0; }
};

// Every registered family, in registration order (model/families.cc); the first is the default
// of a ModelConfig.
std::span<const Family* const> registered_families();
// Adds a family after the built-in ones (a test's or a plug-in's; call it before any config of
// that family is made); InputError when another family has its name.
void register_family(const Family& family);
// The family of that name, or nullptr.
const Family* find_family(std::string_view name);
// "gpt, climax": the registered names, for messages.
std::string family_names();

// The family of a checkpoint's config.json: InputError prefixed by `source` naming the
// model_type when no family reads it.
const Family& family_of_config_json(const nlohmann::json& j, const std::string& source);

// Shorthands of the model's family (cfg.family).
std::unique_ptr<Model> make_model(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size, int tp_rank,
                                  const StageSpec& stage);
double pipeline_head_cost(const ModelConfig& cfg);
int64_t fixed_positions(const ModelConfig& cfg);

}  // namespace weft
