#include "ckpt/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "ckpt/fs_util.h"
#include "ckpt/manifest.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/log.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

constexpr int kGpt2EndOfText = 50256;  // <|endoftext|> in the GPT-2 BPE vocabulary

// `dir` without trailing slashes; rejects names that cannot be renamed ("", ".", "..").
fs::path normalize_dir(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "a/b/" -> "a/b"
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") {
    throw_input("checkpoint folder '{}': name a folder (e.g. runs/x/step-400), not '{}'", dir, p.string());
  }
  return p;
}

fs::path parent_of(const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); }

// Siblings of `target` named <name><tag><suffix> (tag ".tmp-" or ".old-"; suffix "<host>-<pid>",
// or a bare pid from older weft versions) that are folders.
std::vector<fs::path> siblings_with_tag(const fs::path& target, const std::string& tag) {
  std::vector<fs::path> out;
  const std::string prefix = target.filename().string() + tag;
  std::error_code ec;
  fs::directory_iterator it(parent_of(target), ec);
  if (ec) return out;
  for (const auto& e : it) {
    const std::string n = e.path().filename().string();
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = n.substr(prefix.size());
    const bool name_chars = std::all_of(rest.begin(), rest.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' || c == '-';
    });
    if (!name_chars || rest.back() < '0' || rest.back() > '9') continue;
    std::error_code ec2;
    if (e.is_directory(ec2)) out.push_back(e.path());
  }
  return out;
}

// The newest by modification time (ties: by name) of a non-empty list.
fs::path newest(std::vector<fs::path> v) {
  auto mtime = [](const fs::path& p) {
    std::error_code ec;
    auto t = fs::last_write_time(p, ec);
    return ec ? fs::file_time_type::min() : t;
  };
  std::sort(v.begin(), v.end(), [&](const fs::path& a, const fs::path& b) {
    auto ta = mtime(a), tb = mtime(b);
    return ta != tb ? ta < tb : a < b;
  });
  return v.back();
}

void remove_tree_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) log_warn("checkpoint: could not remove {}: {}", p.string(), ec.message());
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw_runtime("cannot rename {} to {}: {}", from.string(), to.string(), std::strerror(errno));
  }
}

// The "<host>-<pid>" (or bare pid) a temporary sibling's name ends with.
std::string writer_of(const fs::path& sibling, const std::string& tag, const fs::path& target) {
  return sibling.filename().string().substr(target.filename().string().size() + tag.size());
}

// Siblings with `tag` whose writer is provably gone (ckpt_io::writer_gone); the others are
// logged and left alone: they may belong to a save still running in another process.
std::vector<fs::path> dead_writers_siblings(const fs::path& target, const std::string& tag) {
  std::vector<fs::path> out;
  for (const auto& p : siblings_with_tag(target, tag)) {
    if (ckpt_io::writer_gone(writer_of(p, tag, target))) {
      out.push_back(p);
    } else {
      log_warn("checkpoint: leaving {}: the process that wrote it ({}) may still be running", p.string(),
               writer_of(p, tag, target));
    }
  }
  return out;
}

// Puts the previous checkpoint back if a save stopped between its two renames, and removes
// what interrupted saves of dead processes left (stale .tmp-* and .old-* folders).
void recover_interrupted_save(const fs::path& target) {
  std::vector<fs::path> olds = dead_writers_siblings(target, ".old-");
  std::error_code ec;
  if (!fs::exists(target, ec) && !siblings_with_tag(target, ".old-").empty()) {
    if (olds.empty()) {
      throw_runtime("{} is missing and only a save of a process that may still be running left its previous "
                    "version ({}); if that process is gone, rename that folder back to {}",
                    target.string(), newest(siblings_with_tag(target, ".old-")).string(), target.string());
    }
    const fs::path keep = newest(olds);
    log_warn("checkpoint: {} is missing; restoring the previous checkpoint {} left by an interrupted save",
             target.string(), keep.string());
    rename_or_throw(keep, target);
    ckpt_io::fsync_path(parent_of(target).string());
    olds.erase(std::find(olds.begin(), olds.end(), keep));
  }
  for (const auto& p : olds) remove_tree_quietly(p);
  for (const auto& p : dead_writers_siblings(target, ".tmp-")) remove_tree_quietly(p);
}

// A float as the shortest decimal that reads back to the same float (1e-05, not 9.99e-06).
double float_for_json(float v) {
  const std::string s = fmt::format("{}", v);
  double d = static_cast<double>(v);
  std::from_chars(s.data(), s.data() + s.size(), d);  // locale-independent, unlike strtod
  return d;
}

// Which of a file's naming schemes it uses: weft and transformers >= 4 save the
// GPT2LMHeadModel names ("transformer.h.0..."); the original GPT-2 files on the Hub hold
// the GPT2Model names ("h.0...").
std::string hf_prefix(const SafetensorsFile& f) {
  if (f.has("transformer.wte.weight")) return "transformer.";
  if (f.has("wte.weight")) return "";
  if (f.has("token_embeds.weight")) return "";  // ClimaX: its own names, no prefix
  return "transformer.";
}

std::string strip_transformer(const std::string& name) {
  const std::string p = "transformer.";
  return name.compare(0, p.size(), p) == 0 ? name.substr(p.size()) : name;
}

// Tensors that Hugging Face GPT-2 files may carry besides the parameters: the causal-mask
// buffers "h.<i>.attn.bias" / "h.<i>.attn.masked_bias" (not parameters; ignored).
bool is_hf_attention_buffer(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "h.";
  if (name.compare(0, head.size(), head) != 0) return false;
  size_t i = head.size();
  const size_t digits_begin = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == digits_begin) return false;
  const std::string rest = name.substr(i);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

// Checks that `f` holds every tensor in `expected` (file name -> shape) with that shape and a
// float dtype, and nothing else except names `allowed_extra` accepts. Throws InputError.
template <typename AllowedExtra>
void check_tensor_set(const SafetensorsFile& f, const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected,
                      AllowedExtra allowed_extra) {
  std::set<std::string> wanted;
  for (const auto& [name, shape] : expected) {
    wanted.insert(name);
    if (!f.has(name)) {
      throw_input("{}: {} is missing ({} tensors in the file, the model expects {}; a checkpoint of another model?)",
                  f.path(), name, f.size(), expected.size());
    }
    const SafetensorsTensorInfo& t = f.info(name);
    if (t.shape != shape) {
      throw_input("{}: {} has shape {}, the model expects {}", f.path(), name, format_shape(t.shape),
                  format_shape(shape));
    }
    if (t.dtype != StDType::kF32 && t.dtype != StDType::kF16 && t.dtype != StDType::kBF16 && t.dtype != StDType::kF64) {
      throw_input("{}: {} has dtype {}, expected F32, F16, BF16 or F64", f.path(), name, dtype_name(t.dtype));
    }
  }
  std::vector<std::string> unknown;
  for (const auto& n : f.names()) {
    if (!wanted.count(n) && !allowed_extra(n)) unknown.push_back(n);
  }
  if (!unknown.empty()) {
    const size_t show = std::min<size_t>(unknown.size(), 5);
    throw_input("{}: {} tensor(s) that this model does not have: {}{} (a checkpoint of a larger model?)", f.path(),
                unknown.size(), fmt::join(unknown.begin(), unknown.begin() + static_cast<std::ptrdiff_t>(show), ", "),
                unknown.size() > show ? ", ..." : "");
  }
}

// Rows V..Vp of wte are not in the file: they are zero (they never receive a gradient).
void zero_padded_vocab(const ParamTensor& t, float* base) {
  if (t.kind != ParamKind::kWte) return;
  const int64_t live = t.hf_shape[0] * t.hf_shape[1];
  std::fill(base + t.offset + live, base + t.offset + t.numel, 0.0f);
}

// Compares lm_head.weight with the token embedding (tied in weft). Throws InputError on a
// difference.
void check_tied_head(const SafetensorsFile& f, const std::string& wte_name, const ParamTensor& wte,
                     const float* wte_values) {
  const std::string head = "lm_head.weight";
  const SafetensorsTensorInfo& h = f.info(head);
  if (h.shape != wte.hf_shape) {
    throw_input("{}: {} has shape {}, the model expects {} (tied to {})", f.path(), head, format_shape(h.shape),
                format_shape(wte.hf_shape), wte_name);
  }
  const SafetensorsTensorInfo& w = f.info(wte_name);
  if (h.dtype == w.dtype && std::memcmp(f.data(head), f.data(wte_name), h.nbytes()) == 0) return;
  std::vector<float> values(static_cast<size_t>(h.numel));
  f.read_f32(head, wte.hf_shape, values.data());
  for (int64_t i = 0; i < h.numel; ++i) {
    if (std::memcmp(&values[i], &wte_values[i], sizeof(float)) != 0) {
      const int64_t C = wte.hf_shape[1];
      throw_input("{}: {} differs from {} (row {}, column {}: {} vs {}); weft ties the output head to the token "
                  "embedding and cannot load an untied one",
                  f.path(), head, wte_name, i / C, i % C, values[i], wte_values[i]);
    }
  }
}

std::string join_path(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

nlohmann::json parse_json_file(const std::string& path, const char* what) {
  const std::string text = ckpt_io::read_text_file(path, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw_input("{}: {} is not valid JSON: {}", path, what, e.what());
  }
}

// Upper limits of config.json's sizes: far above any real model, low enough that every
// product the model makes of them (V x C, L x C x F, T x T) fits in 64 bits.
constexpr int kMaxLayers = 100'000;
constexpr int kMaxHeads = 65'536;
constexpr int kMaxWidth = 1 << 20;    // n_embd, n_inner
constexpr int kMaxContext = 1 << 24;  // n_positions / n_ctx
constexpr int kMaxVocab = 1 << 26;    // vocab_size, padded_vocab

// Integer key in 1..max. A float (12.0), a negative, an overflowing (2^63) value is an error.
int json_int(const nlohmann::json& j, const char* key, const std::string& source, int max) {
  if (!j.contains(key)) throw_input("{}: key '{}' is missing", source, key);
  const auto& v = j.at(key);
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    x = u > static_cast<uint64_t>(INT_MAX) ? int64_t{INT_MAX} + 1 : static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    throw_input("{}: key '{}' is {}, expected an integer", source, key, v.dump());
  }
  if (x < 1 || x > max) throw_input("{}: key '{}' is {}, expected an integer from 1 to {}", source, key, v.dump(), max);
  return static_cast<int>(x);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// config.json

namespace {

// The config.json object with its keys in a human-friendly order.
// A ClimaX model's config.json: its shapes under ClimaX's names (microsoft/ClimaX arch.py).
nlohmann::ordered_json climax_json_ordered(const ModelConfig& cfg) {
  nlohmann::ordered_json j;
  j["architectures"] = {"ClimaX"};
  j["model_type"] = "climax";
  j["depth"] = cfg.n_layer;
  j["num_heads"] = cfg.n_head;
  j["embed_dim"] = cfg.n_embd;
  j["mlp_hidden"] = cfg.ffn;
  j["num_vars"] = cfg.vars;
  j["img_size"] = {cfg.img_h, cfg.img_w};
  j["patch_size"] = cfg.patch;
  j["decoder_depth"] = cfg.decoder_depth;
  j["activation_function"] = "gelu_tanh";
  j["layer_norm_epsilon"] = float_for_json(cfg.ln_eps);
  j["initializer_range"] = float_for_json(cfg.init_std);
  j["torch_dtype"] = "float32";
  j["weft"] = {{"name", cfg.name}, {"format_version", kCheckpointFormatVersion}};
  return j;
}

nlohmann::ordered_json config_json_ordered(const ModelConfig& cfg) {
  if (cfg.is_climax()) return climax_json_ordered(cfg);
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = cfg.vocab_size;
  j["n_positions"] = cfg.n_ctx;
  j["n_ctx"] = cfg.n_ctx;
  j["n_embd"] = cfg.n_embd;
  j["n_layer"] = cfg.n_layer;
  j["n_head"] = cfg.n_head;
  j["n_inner"] = cfg.ffn == 4 * cfg.n_embd ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(cfg.ffn);
  j["activation_function"] = "gelu_new";
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["layer_norm_epsilon"] = float_for_json(cfg.ln_eps);
  j["initializer_range"] = float_for_json(cfg.init_std);
  j["tie_word_embeddings"] = true;
  // <|endoftext|> only exists in the GPT-2 vocabulary (a smaller test vocabulary has none).
  const bool gpt2_vocab = cfg.vocab_size > kGpt2EndOfText;
  j["bos_token_id"] = gpt2_vocab ? nlohmann::ordered_json(kGpt2EndOfText) : nlohmann::ordered_json(nullptr);
  j["eos_token_id"] = gpt2_vocab ? nlohmann::ordered_json(kGpt2EndOfText) : nlohmann::ordered_json(nullptr);
  j["torch_dtype"] = "float32";
  j["weft"] = {{"name", cfg.name}, {"padded_vocab", cfg.padded_vocab}, {"format_version", kCheckpointFormatVersion}};
  return j;
}

}  // namespace

nlohmann::json checkpoint_config_json(const ModelConfig& cfg) {
  return nlohmann::json::parse(config_json_ordered(cfg).dump());
}

namespace {
ModelConfig climax_config_from_json(const nlohmann::json& j, const std::string& source) {
  const int depth = json_int(j, "depth", source, kMaxLayers);
  const int heads = json_int(j, "num_heads", source, kMaxHeads);
  const int embd = json_int(j, "embed_dim", source, kMaxWidth);
  const int ffn = json_int(j, "mlp_hidden", source, kMaxWidth);
  const int vars = json_int(j, "num_vars", source, kMaxWidth);
  const int patch = json_int(j, "patch_size", source, kMaxWidth);
  const int decoder = json_int(j, "decoder_depth", source, kMaxLayers);
  if (!j.contains("img_size") || !j.at("img_size").is_array() || j.at("img_size").size() != 2) {
    throw_input("{}: key 'img_size' must be [height, width]", source);
  }
  const nlohmann::json hw = {{"h", j.at("img_size")[0]}, {"w", j.at("img_size")[1]}};
  const int h = json_int(hw, "h", source + ": img_size", kMaxWidth);
  const int w = json_int(hw, "w", source + ": img_size", kMaxWidth);
  std::string name = "climax";
  if (j.contains("weft") && j.at("weft").is_object() && j.at("weft").contains("name") &&
      j.at("weft").at("name").is_string()) {
    name = j.at("weft").at("name").get<std::string>();
  }
  try {
    ModelConfig cfg = make_climax_config(name, depth, heads, embd, vars, h, w, patch, ffn);
    cfg.decoder_depth = decoder;
    if (j.contains("layer_norm_epsilon") && j.at("layer_norm_epsilon").is_number()) {
      cfg.ln_eps = static_cast<float>(j.at("layer_norm_epsilon").get<double>());
    }
    cfg.validate();
    return cfg;
  } catch (const InputError& e) {
    throw_input("{}: {}", source, e.what());
  }
}
}  // namespace

ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw_input("{}: expected a JSON object, found a {}", source, j.type_name());
  if (j.contains("model_type") && j.at("model_type") == "climax") return climax_config_from_json(j, source);
  if (j.contains("model_type") && j.at("model_type") != "gpt2") {
    throw_input("{}: model_type is {}, weft reads GPT-2 models (\"gpt2\")", source, j.at("model_type").dump());
  }
  if (j.contains("activation_function")) {
    const auto& a = j.at("activation_function");
    if (a != "gelu_new" && a != "gelu_pytorch_tanh") {
      throw_input("{}: activation_function is {}, weft implements the tanh GELU (\"gelu_new\")", source, a.dump());
    }
  }
  if (j.contains("tie_word_embeddings") && j.at("tie_word_embeddings") != true) {
    throw_input("{}: tie_word_embeddings is {}, weft ties the output head to the token embedding", source,
                j.at("tie_word_embeddings").dump());
  }
  const int n_layer = json_int(j, "n_layer", source, kMaxLayers);
  const int n_head = json_int(j, "n_head", source, kMaxHeads);
  const int n_embd = json_int(j, "n_embd", source, kMaxWidth);
  const int vocab = json_int(j, "vocab_size", source, kMaxVocab);
  const int n_ctx = json_int(j, j.contains("n_positions") ? "n_positions" : "n_ctx", source, kMaxContext);
  const int ffn = j.contains("n_inner") && !j.at("n_inner").is_null() ? json_int(j, "n_inner", source, kMaxWidth) : 0;
  std::string name = "gpt2";
  int padded_vocab = 0;
  if (j.contains("weft")) {
    const auto& w = j.at("weft");
    if (!w.is_object()) throw_input("{}: key 'weft' is {}, expected an object", source, w.dump());
    if (w.contains("name")) {
      if (!w.at("name").is_string()) throw_input("{}: key 'weft.name' is {}, expected a string", source, w.at("name").dump());
      name = w.at("name").get<std::string>();
    }
    if (w.contains("padded_vocab")) padded_vocab = json_int(w, "padded_vocab", source + ": weft", kMaxVocab + 128);
  }
  ModelConfig cfg;
  try {
    cfg = make_model_config(name, n_layer, n_head, n_embd, n_ctx, vocab, ffn);
    if (padded_vocab != 0) cfg.padded_vocab = padded_vocab;
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

ModelConfig load_checkpoint_config(const std::string& dir) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  verify_manifest(resolved, {kCheckpointConfigFile});
  const std::string path = join_path(resolved, kCheckpointConfigFile);
  return model_config_from_json(parse_json_file(path, "the model config"), path);
}

// ---------------------------------------------------------------------------------------
// Save

void save_checkpoint(const std::string& dir, const CheckpointData& data) {
  WEFT_CHECK(data.layout != nullptr && data.params != nullptr, "save_checkpoint({}): layout and params are required",
             dir);
  WEFT_CHECK((data.exp_avg == nullptr) == (data.exp_avg_sq == nullptr),
             "save_checkpoint({}): give both AdamW moments or neither", dir);
  const ParamLayout& layout = *data.layout;
  const fs::path target = normalize_dir(dir);
  const fs::path parent = parent_of(target);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw_runtime("cannot create folder {}: {}", parent.string(), ec.message());
  if (fs::exists(target, ec) && !fs::is_directory(target, ec)) {
    throw_input("{}: exists and is not a folder; a checkpoint is a folder", target.string());
  }
  recover_interrupted_save(target);

  const std::string pid = ckpt_io::writer_suffix();  // "<host>-<pid>"
  const fs::path tmp = parent / (target.filename().string() + ".tmp-" + pid);
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) {
    throw_runtime("cannot create folder {}: {}", tmp.string(), ec ? ec.message() : "it exists");
  }
  try {
    ManifestWriter manifest;
    std::vector<TensorRef> refs;
    for (const ParamTensor& t : layout.tensors()) {
      refs.push_back({t.name, StDType::kF32, t.hf_shape, data.params + t.offset});
    }
    manifest.add_safetensors(kCheckpointModelFile,
                             write_safetensors((tmp / kCheckpointModelFile).string(), refs, {{"format", "pt"}}));
    const std::string config_text = config_json_ordered(layout.config()).dump(2) + "\n";
    ckpt_io::write_file_synced((tmp / kCheckpointConfigFile).string(), config_text);
    manifest.add_file(kCheckpointConfigFile, config_text);
    if (data.exp_avg != nullptr) {
      refs.clear();
      for (const ParamTensor& t : layout.tensors()) {
        refs.push_back({"exp_avg." + t.name, StDType::kF32, t.hf_shape, data.exp_avg + t.offset});
      }
      for (const ParamTensor& t : layout.tensors()) {
        refs.push_back({"exp_avg_sq." + t.name, StDType::kF32, t.hf_shape, data.exp_avg_sq + t.offset});
      }
      manifest.add_safetensors(kCheckpointOptimizerFile, write_safetensors((tmp / kCheckpointOptimizerFile).string(),
                                                                           refs, {{"format", "weft-adamw"}}));
    }
    if (!data.feedback.empty()) {
      manifest.add_safetensors(kCheckpointFeedbackFile, write_safetensors((tmp / kCheckpointFeedbackFile).string(),
                                                                          data.feedback, data.feedback_meta));
    }
    const nlohmann::json& trainer = data.trainer.is_null() ? nlohmann::json::object() : data.trainer;
    const std::string trainer_text = trainer.dump(2) + "\n";
    ckpt_io::write_file_synced((tmp / kCheckpointTrainerFile).string(), trainer_text);
    manifest.add_file(kCheckpointTrainerFile, trainer_text);
    manifest.write(tmp.string());  // last: a folder with a manifest is complete
    ckpt_io::fsync_path(tmp.string());
  } catch (...) {
    remove_tree_quietly(tmp);
    throw;
  }

  // Swap: <dir> -> <dir>.old-<pid>, <dir>.tmp-<pid> -> <dir>, then drop the old one. Between
  // the two renames <dir> is missing and resolve_checkpoint_dir falls back to .old-<pid>.
  fs::path old;
  if (fs::exists(target, ec)) {
    old = parent / (target.filename().string() + ".old-" + pid);
    fs::remove_all(old, ec);
    try {
      rename_or_throw(target, old);
    } catch (...) {
      remove_tree_quietly(tmp);
      throw;
    }
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    if (!old.empty()) ::rename(old.c_str(), target.c_str());  // put the previous one back
    remove_tree_quietly(tmp);
    throw_runtime("cannot rename {} to {}: {}", tmp.string(), target.string(), std::strerror(err));
  }
  ckpt_io::fsync_path(parent.string());
  if (!old.empty()) remove_tree_quietly(old);
  log_debug("checkpoint: saved {} ({} parameters{})", target.string(), layout.total(),
            data.exp_avg ? ", optimizer state" : "");
}

// ---------------------------------------------------------------------------------------
// Load

std::string resolve_checkpoint_dir(const std::string& dir) {
  const fs::path target = normalize_dir(dir);
  std::error_code ec;
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) throw_input("{}: is not a folder; a checkpoint is a folder", target.string());
    return target.string();
  }
  const std::vector<fs::path> olds = siblings_with_tag(target, ".old-");
  if (olds.empty()) throw_input("{}: checkpoint folder does not exist", target.string());
  const fs::path keep = newest(olds);
  log_warn("checkpoint: {} is missing; reading the previous checkpoint {} left by an interrupted save",
           target.string(), keep.string());
  return keep.string();
}

void verify_checkpoint(const std::string& dir) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  if (verify_manifest(resolved) == ManifestCheck::kNoManifest) {
    log_debug("checkpoint {}: no manifest (a Hugging Face folder or an older weft checkpoint); not verified", resolved);
  }
}

void load_checkpoint_params(const std::string& dir, const ParamLayout& layout, float* params, CheckpointVerify verify) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  if (verify == CheckpointVerify::kVerify) verify_manifest(resolved, {kCheckpointModelFile});
  const SafetensorsFile f(join_path(resolved, kCheckpointModelFile));
  const std::string prefix = hf_prefix(f);
  auto file_name = [&](const ParamTensor& t) { return prefix + strip_transformer(t.name); };
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const ParamTensor& t : layout.tensors()) expected.emplace_back(file_name(t), t.hf_shape);
  check_tensor_set(f, expected, [&](const std::string& n) {
    return n == "lm_head.weight" || is_hf_attention_buffer(n, prefix);
  });
  const ParamTensor* wte = nullptr;
  for (const ParamTensor& t : layout.tensors()) {
    f.read_f32(file_name(t), t.hf_shape, params + t.offset);
    zero_padded_vocab(t, params);
    if (t.kind == ParamKind::kWte) wte = &t;
  }
  if (f.has("lm_head.weight") && wte != nullptr) check_tied_head(f, file_name(*wte), *wte, params + wte->offset);
}

bool load_checkpoint_optimizer(const std::string& dir, const ParamLayout& layout, float* exp_avg,
                               float* exp_avg_sq, CheckpointVerify verify) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  const std::string path = join_path(resolved, kCheckpointOptimizerFile);
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  if (verify == CheckpointVerify::kVerify) verify_manifest(resolved, {kCheckpointOptimizerFile});
  const SafetensorsFile f(path);
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
    for (const ParamTensor& t : layout.tensors()) expected.emplace_back(prefix + t.name, t.hf_shape);
  }
  check_tensor_set(f, expected, [](const std::string&) { return false; });
  for (const ParamTensor& t : layout.tensors()) {
    f.read_f32("exp_avg." + t.name, t.hf_shape, exp_avg + t.offset);
    f.read_f32("exp_avg_sq." + t.name, t.hf_shape, exp_avg_sq + t.offset);
    zero_padded_vocab(t, exp_avg);
    zero_padded_vocab(t, exp_avg_sq);
  }
  return true;
}

std::unique_ptr<SafetensorsFile> open_checkpoint_feedback(const std::string& dir, CheckpointVerify verify) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  const std::string path = join_path(resolved, kCheckpointFeedbackFile);
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  if (verify == CheckpointVerify::kVerify) verify_manifest(resolved, {kCheckpointFeedbackFile});
  return std::make_unique<SafetensorsFile>(path);
}

nlohmann::json load_checkpoint_trainer(const std::string& dir) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  verify_manifest(resolved, {kCheckpointTrainerFile});
  return parse_json_file(join_path(resolved, kCheckpointTrainerFile), "the trainer state");
}

void check_finite_params(const ParamLayout& layout, const float* params, const std::string& dir) {
  for (const ParamTensor& t : layout.tensors()) {
    for (int64_t i = 0; i < t.numel; ++i) {
      const float v = params[t.offset + i];
      if (!std::isfinite(v)) {
        throw_runtime("{}: parameter {} element {} is {}: the checkpoint holds non-finite weights (a diverged run?); "
                      "use an earlier checkpoint",
                      dir, t.name, i, v);
      }
    }
  }
}

}  // namespace weft
