#include "ckpt/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <map>
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
#include "model/family.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

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

// Which of a file's naming schemes it uses, read from the layout's first tensor: weft's own names
// (and a foreign file that keeps them), or those names without the family's optional prefix
// (ForeignNames: the original GPT-2 files on the Hub hold "h.0..." for "transformer.h.0...").
// The prefix that goes before a stripped name.
std::string file_prefix(const SafetensorsFile& f, const ParamLayout& layout) {
  const std::string& first = layout.tensors().front().name;
  const std::string bare = layout.foreign().strip(first);
  if (!f.has(first) && bare != first && f.has(bare)) return "";
  return first.substr(0, first.size() - bare.size());
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

// Elements beyond the checkpoint's shape (GPT's wte rows V..Vp) are not in the file: they are zero (they
// never receive a gradient).
void zero_padded_vocab(const ParamTensor& t, float* base) {
  int64_t live = 1;
  for (int64_t d : t.hf_shape) live *= d;
  if (live >= t.numel) return;
  std::fill(base + t.offset + live, base + t.offset + t.numel, 0.0f);
}

// Compares the file's output head (`head`, ForeignNames::tied_head) with the tensor weft ties it
// to. Throws InputError on a difference.
void check_tied_head(const SafetensorsFile& f, const std::string& head, const std::string& tied_name,
                     const ParamTensor& tied, const float* tied_values) {
  const SafetensorsTensorInfo& h = f.info(head);
  if (h.shape != tied.hf_shape) {
    throw_input("{}: {} has shape {}, the model expects {} (tied to {})", f.path(), head, format_shape(h.shape),
                format_shape(tied.hf_shape), tied_name);
  }
  const SafetensorsTensorInfo& w = f.info(tied_name);
  if (h.dtype == w.dtype && std::memcmp(f.data(head), f.data(tied_name), h.nbytes()) == 0) return;
  std::vector<float> values(static_cast<size_t>(h.numel));
  f.read_f32(head, tied.hf_shape, values.data());
  for (int64_t i = 0; i < h.numel; ++i) {
    if (std::memcmp(&values[i], &tied_values[i], sizeof(float)) != 0) {
      const int64_t C = tied.hf_shape.back();
      throw_input("{}: {} differs from {} (row {}, column {}: {} vs {}); weft ties the output head to {} and "
                  "cannot load an untied one",
                  f.path(), head, tied_name, i / C, i % C, values[i], tied_values[i], tied_name);
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

}  // namespace

// ---------------------------------------------------------------------------------------
// config.json

namespace {

// The family's config.json, its "weft" object completed with the checkpoint format version.
nlohmann::ordered_json config_json_ordered(const ModelConfig& cfg) {
  nlohmann::ordered_json j = cfg.family->to_config_json(cfg);
  j["weft"]["format_version"] = kCheckpointFormatVersion;
  return j;
}

}  // namespace

nlohmann::json checkpoint_config_json(const ModelConfig& cfg) {
  return nlohmann::json::parse(config_json_ordered(cfg).dump());
}

ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source) {
  return family_of_config_json(j, source).from_config_json(j, source);
}

ModelConfig load_checkpoint_config(const std::string& dir) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  verify_manifest(resolved, {kCheckpointConfigFile});
  const std::string path = join_path(resolved, kCheckpointConfigFile);
  return model_config_from_json(parse_json_file(path, "the model config"), path);
}

// ---------------------------------------------------------------------------------------
// Save

namespace {

// One tensor as model.safetensors holds it: a weft tensor (its hf_shape elements, in place), or
// with the family's foreign pieces (ForeignNames::pieces) one piece of one, copied out.
struct FileTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  std::vector<float> owned;  // a piece's values (data points here)
};

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Visits each piece of weft tensor t (hf_shape: (R, W) or (W)): fn(piece, k, r) maps element k
// of the piece to element r of the tensor (columns of the tensor in the pieces' order; a
// transposed piece's rows are the tensor's columns). InternalError when the widths do not add up.
// A sliced piece (ForeignPiece::count >= 0) maps its c-th row (element) of the file tensor,
// first + c, to column j0 + c.
template <class Fn>
void for_each_piece_element(const ParamTensor& t, const std::vector<ForeignPiece>& pieces, Fn&& fn) {
  const bool vec = t.hf_shape.size() == 1;
  const int64_t R = vec ? 1 : t.hf_shape[0], W = t.hf_shape.back();
  int64_t j0 = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const ForeignPiece& fp = pieces[p];
    if (fp.count >= 0) {
      WEFT_CHECK((vec ? fp.shape.size() == 1 : fp.transpose && fp.shape.size() == 2 && fp.shape[1] == R) &&
                     fp.first >= 0 && fp.first + fp.count <= fp.shape[0],
                 "{}: slice [{}, {}) of piece {} of shape {} for {} rows", t.name, fp.first, fp.first + fp.count, fp.name,
                 format_shape(fp.shape), R);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < fp.count; ++c) fn(p, (fp.first + c) * R + r, r * W + j0 + c);
      }
      j0 += fp.count;
      continue;
    }
    const int64_t n = numel_of(fp.shape), w = n / R;
    WEFT_CHECK(n == w * R && (vec || fp.shape.size() == 2), "{}: piece {} of shape {} for {} rows", t.name, fp.name,
               format_shape(fp.shape), R);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < w; ++c) fn(p, fp.transpose ? c * R + r : r * w + c, r * W + j0 + c);
    }
    j0 += w;
  }
  WEFT_CHECK(j0 == W, "{}: pieces of {} columns for {}", t.name, j0, W);
}

std::vector<FileTensor> file_tensors(const ParamLayout& layout, const float* params) {
  std::vector<FileTensor> out;
  const ForeignNames& foreign = layout.foreign();
  for (const ParamTensor& t : layout.tensors()) {
    if (foreign.pieces.empty()) {
      out.push_back({t.name, t.hf_shape, params + t.offset, {}});
      continue;
    }
    const auto it = foreign.pieces.find(t.name);
    WEFT_CHECK(it != foreign.pieces.end(), "{} has no name in the family's foreign files", t.name);
    // One file tensor per name (sliced pieces share theirs), in the pieces' order.
    const size_t first = out.size();
    std::vector<size_t> at;  // piece -> its file tensor
    for (const ForeignPiece& fp : it->second) {
      size_t k = first;
      while (k < out.size() && out[k].name != fp.name) ++k;
      if (k == out.size()) {
        FileTensor& f = out.emplace_back(FileTensor{fp.name, fp.shape, nullptr, {}});
        f.owned.resize(static_cast<size_t>(numel_of(fp.shape)));
      }
      at.push_back(k);
    }
    const float* src = params + t.offset;
    for_each_piece_element(t, it->second, [&](size_t p, int64_t k, int64_t r) { out[at[p]].owned[static_cast<size_t>(k)] = src[r]; });
    for (size_t p = first; p < out.size(); ++p) out[p].data = out[p].owned.data();
  }
  return out;
}

// The file's tensors in model_dtype when it is BF16 or F16 (rounded to nearest even); empty for
// F32. InputError naming the tensor and the value when an fp16 export would overflow
// (|x| > 65504) or a dtype is none of the three.
std::vector<std::vector<uint16_t>> narrowed(const std::vector<FileTensor>& tensors, StDType dtype) {
  std::vector<std::vector<uint16_t>> out;
  if (dtype == StDType::kF32) return out;
  if (dtype != StDType::kBF16 && dtype != StDType::kF16) {
    throw_input("model.safetensors in {}: F32, BF16 or F16 only", dtype_name(dtype));
  }
  for (const FileTensor& t : tensors) {
    const int64_t n = numel_of(t.shape);
    std::vector<uint16_t>& v = out.emplace_back(static_cast<size_t>(n));
    const float* p = t.data;
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == StDType::kBF16) {
        v[static_cast<size_t>(i)] = f32_to_bf16(p[i]);
      } else {
        if (std::fabs(p[i]) > 65504.0f) {
          throw_input("{}[{}] = {} does not fit fp16 (largest 65504): export it as bf16 or fp32", t.name, i, p[i]);
        }
        v[static_cast<size_t>(i)] = f32_to_f16(p[i]);
      }
    }
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& dir, const CheckpointData& data) {
  WEFT_CHECK(data.model != nullptr && data.layout != nullptr && data.params != nullptr, "save_checkpoint({}): model, layout and params are required",
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
    const std::vector<FileTensor> tensors = file_tensors(layout, data.params);
    const std::vector<std::vector<uint16_t>> narrow = narrowed(tensors, data.model_dtype);
    for (size_t i = 0; i < tensors.size(); ++i) {
      refs.push_back({tensors[i].name, data.model_dtype, tensors[i].shape,
                      narrow.empty() ? static_cast<const void*>(tensors[i].data) : narrow[i].data()});
    }
    manifest.add_safetensors(kCheckpointModelFile,
                             write_safetensors((tmp / kCheckpointModelFile).string(), refs, {{"format", "pt"}}));
    auto config = config_json_ordered(*data.model);
    if (config.contains("torch_dtype")) {
      config["torch_dtype"] = data.model_dtype == StDType::kBF16 ? "bfloat16"
                              : data.model_dtype == StDType::kF16 ? "float16"
                                                                  : "float32";
    }
    const std::string config_text = config.dump(2) + "\n";
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

namespace {

// A checkpoint written by a newer weft (config.json's weft.format_version above this one's) is
// refused with both versions named: its files may mean something this weft does not know.
void check_format_version(const std::string& resolved) {
  const std::string path = join_path(resolved, kCheckpointConfigFile);
  std::error_code ec;
  if (!fs::exists(path, ec)) return;  // the config loader names a missing config.json
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(ckpt_io::read_text_file(path, "the model config"));
  } catch (const nlohmann::json::exception&) {
    return;  // the config loader names the JSON error
  }
  if (!cfg.is_object() || !cfg.contains("weft") || !cfg["weft"].is_object()) return;
  const nlohmann::json& v = cfg["weft"].value("format_version", nlohmann::json());
  if (v.is_number_integer() && v.get<int64_t>() > kCheckpointFormatVersion) {
    throw_input("{}: weft checkpoint format version {}, this weft reads versions up to {}: load it with a newer weft",
                path, v.get<int64_t>(), kCheckpointFormatVersion);
  }
}

}  // namespace

void verify_checkpoint(const std::string& dir) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  check_format_version(resolved);
  if (verify_manifest(resolved) == ManifestCheck::kNoManifest) {
    log_debug("checkpoint {}: no manifest (a Hugging Face folder or an older weft checkpoint); not verified", resolved);
  }
}

void verify_resume_checkpoint(const std::string& dir) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  check_format_version(resolved);
  std::error_code ec;
  const bool optimizer = fs::exists(join_path(resolved, kCheckpointOptimizerFile), ec);
  std::vector<std::string> loaded = {kCheckpointConfigFile, kCheckpointModelFile, kCheckpointTrainerFile};
  if (optimizer) loaded.emplace_back(kCheckpointOptimizerFile);
  if (fs::exists(join_path(resolved, kCheckpointFeedbackFile), ec)) loaded.emplace_back(kCheckpointFeedbackFile);
  verify_manifest(resolved, loaded);
  if (!optimizer) {
    throw_input("{}: the checkpoint has no optimizer state ({}), so the run cannot continue exactly", resolved,
                kCheckpointOptimizerFile);
  }
}

namespace {
// The weft name of the first tensor the family's foreign files name otherwise (MPT's files keep
// "transformer.wte.weight"): a file holding it is in weft's names.
std::string first_renamed(const ParamLayout& layout) {
  const ForeignNames& foreign = layout.foreign();
  for (const ParamTensor& t : layout.tensors()) {
    const auto it = foreign.pieces.find(t.name);
    if (it == foreign.pieces.end() || it->second.size() != 1 || it->second.front().name != t.name) return t.name;
  }
  return layout.tensors().front().name;
}

// A file in the family's foreign pieces (ForeignNames::pieces: Hugging Face's Llama names), each
// weft tensor assembled from its pieces.
void load_pieces(const SafetensorsFile& f, const ParamLayout& layout, float* params) {
  const ForeignNames& foreign = layout.foreign();
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const ParamTensor& t : layout.tensors()) {
    const auto it = foreign.pieces.find(t.name);
    WEFT_CHECK(it != foreign.pieces.end(), "{} has no name in the family's foreign files", t.name);
    for (const ForeignPiece& fp : it->second) {
      if (std::none_of(expected.begin(), expected.end(), [&](const auto& e) { return e.first == fp.name; })) {
        expected.emplace_back(fp.name, fp.shape);
      }
    }
  }
  check_tensor_set(f, expected, [&](const std::string& n) {
    if (!foreign.tied_head.empty() && n == foreign.tied_head) return true;
    for (const std::string& s : foreign.ignored_suffixes) {
      if (n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0) return true;
    }
    return false;
  });
  for (const ParamTensor& t : layout.tensors()) {
    const std::vector<ForeignPiece>& pieces = foreign.pieces.at(t.name);
    std::map<std::string, std::vector<float>> values;  // each file tensor read once (sliced pieces share it)
    std::vector<const std::vector<float>*> of;          // piece -> its file tensor's values
    for (const ForeignPiece& fp : pieces) {
      auto [v, fresh] = values.try_emplace(fp.name);
      if (fresh) {
        v->second.resize(static_cast<size_t>(numel_of(fp.shape)));
        f.read_f32(fp.name, fp.shape, v->second.data());
      }
      of.push_back(&v->second);
    }
    float* dst = params + t.offset;
    for_each_piece_element(t, pieces, [&](size_t p, int64_t k, int64_t r) { dst[r] = (*of[p])[static_cast<size_t>(k)]; });
    zero_padded_vocab(t, params);
    if (t.tied_head && !foreign.tied_head.empty() && f.has(foreign.tied_head)) {
      check_tied_head(f, foreign.tied_head, pieces.front().name, t, dst);
    }
  }
}
}  // namespace

void load_checkpoint_params(const std::string& dir, const ParamLayout& layout, float* params, CheckpointVerify verify) {
  const std::string resolved = resolve_checkpoint_dir(dir);
  if (verify == CheckpointVerify::kVerify) verify_manifest(resolved, {kCheckpointModelFile});
  const SafetensorsFile f(join_path(resolved, kCheckpointModelFile));
  const ForeignNames& foreign = layout.foreign();
  if (!foreign.pieces.empty() && !f.has(first_renamed(layout))) {
    load_pieces(f, layout, params);
    return;
  }
  const std::string prefix = file_prefix(f, layout);
  auto file_name = [&](const ParamTensor& t) { return prefix + foreign.strip(t.name); };
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const ParamTensor& t : layout.tensors()) expected.emplace_back(file_name(t), t.hf_shape);
  check_tensor_set(f, expected, [&](const std::string& n) {
    return (!foreign.tied_head.empty() && n == foreign.tied_head) || foreign.is_buffer(n, prefix);
  });
  const ParamTensor* tied = nullptr;
  for (const ParamTensor& t : layout.tensors()) {
    f.read_f32(file_name(t), t.hf_shape, params + t.offset);
    zero_padded_vocab(t, params);
    if (t.tied_head) tied = &t;
  }
  if (!foreign.tied_head.empty() && f.has(foreign.tied_head) && tied != nullptr) {
    check_tied_head(f, foreign.tied_head, file_name(*tied), *tied, params + tied->offset);
  }
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
