#include "train/run_folder.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "ckpt/checkpoint.h"
#include "data/text_util.h"
#include "core/error.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace weft {

std::string step_dir_name(int64_t step) { return fmt::format("step-{:06d}", step); }

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  static const std::regex re(R"(step-(\d+)(\.old-\d+)?)");
  std::map<int64_t, std::string> seen;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !std::regex_match(name, m, re)) continue;
    const int64_t step = std::stoll(m[1].str());
    const std::string dir = (fs::path(run_dir) / fmt::format("step-{}", m[1].str())).string();
    try {
      seen[step] = resolve_checkpoint_dir(dir);
    } catch (const InputError&) {
    }
  }
  for (auto& [s, d] : seen) out.emplace_back(s, d);
  return out;
}

std::string find_latest_checkpoint(const std::string& run_dir) {
  auto all = list_checkpoints(run_dir);
  return all.empty() ? std::string() : all.back().second;
}

void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.contains("step") && j["step"].get<int64_t>() > step) continue;
    } catch (const std::exception&) {
      continue;  // a torn last line from a crash
    }
    kept += line + "\n";
  }
  in.close();
  write_file_atomic(path, kept);
}

namespace {

// The trainer state of the checkpoint to resume from, checked against the config.
nlohmann::json check_resume(const std::string& dir, const RunConfig& cfg, const ModelConfig& mc) {
  ModelConfig saved = load_checkpoint_config(dir);
  if (saved.n_layer != mc.n_layer || saved.n_head != mc.n_head || saved.n_embd != mc.n_embd ||
      saved.n_ctx != mc.n_ctx || saved.vocab_size != mc.vocab_size) {
    throw_input("{}: checkpoint model (layers {}, heads {}, hidden {}, context {}, vocab {}) does not match the config (layers {}, heads {}, hidden {}, context {}, vocab {})",
                dir, saved.n_layer, saved.n_head, saved.n_embd, saved.n_ctx, saved.vocab_size,
                mc.n_layer, mc.n_head, mc.n_embd, mc.n_ctx, mc.vocab_size);
  }
  nlohmann::json state = load_checkpoint_trainer(dir);
  if (!state.contains("step") || !state["step"].is_number_integer()) {
    throw_input("{}/{}: missing integer 'step'", dir, kCheckpointTrainerFile);
  }
  if (state.contains("seed") && state["seed"].get<int64_t>() != cfg.seed) {
    throw_input("{}: checkpoint was trained with seed {}, the config says {}; the data order would differ", dir,
                state["seed"].get<int64_t>(), cfg.seed);
  }
  if (state.contains("global_batch") && state["global_batch"].get<int64_t>() != cfg.global_batch) {
    throw_input("{}: checkpoint was trained with global_batch {}, the config says {}", dir,
                state["global_batch"].get<int64_t>(), cfg.global_batch);
  }
  return state;
}

}  // namespace

RunFolder inspect_run_folder(const RunConfig& cfg, const TrainOptions& opt, const ModelConfig& mc) {
  RunFolder f;
  f.existing = list_checkpoints(cfg.out);
  if (opt.resume) {
    f.resume_dir = opt.resume_from.empty() ? (f.existing.empty() ? "" : f.existing.back().second)
                                           : resolve_checkpoint_dir(opt.resume_from);
    if (f.resume_dir.empty()) throw_input("--resume: no checkpoint (step-*) in run folder {}", cfg.out);
    f.resume_state = check_resume(f.resume_dir, cfg, mc);
  } else {
    const bool has_metrics = fs::exists(fs::path(cfg.out) / "metrics.jsonl");
    if ((!f.existing.empty() || has_metrics) && !opt.overwrite) {
      throw_input("run folder {} already holds a run ({}); pass --resume to continue it, --overwrite to replace it, or --out to choose another folder",
                  cfg.out, f.existing.empty() ? std::string("metrics.jsonl") : fs::path(f.existing.back().second).filename().string());
    }
  }
  return f;
}

namespace {

// --overwrite: what the replaced run wrote besides its checkpoints and metrics (trace files,
// the communication report) and what crashed writers left (".tmp-" files and folders). The
// caller holds the folder's lock, so no other process is writing any of them.
bool replaced_run_output(const std::string& name) {
  return name.find(".tmp-") != std::string::npos || name == "comm_report.json" || name == "comm_report.txt" ||
         (name.rfind("trace-rank", 0) == 0 && name.size() > 6 && name.substr(name.size() - 6) == ".jsonl");
}

void remove_or_throw(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw_runtime("--overwrite: cannot remove {}: {}", p.string(), ec.message());
}

}  // namespace

void open_run_folder(const RunConfig& cfg, const TrainOptions& opt, const RunFolder& folder) {
  std::error_code ec;
  fs::create_directories(cfg.out, ec);
  if (ec) throw_input("cannot create run folder {}: {}", cfg.out, ec.message());
  if (opt.resume || !opt.overwrite) return;
  for (const auto& [s, d] : folder.existing) remove_or_throw(d);
  remove_or_throw(fs::path(cfg.out) / "metrics.jsonl");
  for (const auto& e : fs::directory_iterator(cfg.out, ec)) {
    if (replaced_run_output(e.path().filename().string())) remove_or_throw(e.path());
  }
}

}  // namespace weft
