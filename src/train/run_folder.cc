#include "train/run_folder.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "ckpt/fs_util.h"
#include "core/error.h"
#include "core/log.h"
#include "data/text_util.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace weft {

std::string step_dir_name(int64_t step) { return fmt::format("step-{:06d}", step); }

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  // step-N, or step-N.old-<host>-<pid> / step-N.old-<pid> (a save interrupted between its renames).
  static const std::regex re(R"(step-(\d+)(\.old-([A-Za-z0-9._]+-)?\d+)?)");
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

namespace {

// Leftovers in a run folder that no checkpoint lookup reads: step-N.trash-* (pruning),
// step-N.tmp-* (a save) and step-N.old-* beside an existing step-N. Removed when the process
// that made them is provably gone (ckpt_io::writer_gone); never another live process'.
void remove_stale_leftovers(const std::string& run_dir) {
  static const std::regex re(R"((step-\d+)\.(trash|tmp|old)-([A-Za-z0-9._-]+))");
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, re) || !ckpt_io::writer_gone(m[3].str())) continue;
    if (m[2] == "old" && !fs::is_directory(fs::path(run_dir) / m[1].str())) continue;  // the recovery copy
    stale.push_back(e.path());
  }
  for (const auto& p : stale) {
    log_info("run folder: removing {} (left by an interrupted save or prune)", p.string());
    fs::remove_all(p, ec);
    if (ec) log_warn("run folder: could not remove {}: {}", p.string(), ec.message());
  }
}

}  // namespace

void prune_checkpoints(const std::string& run_dir, int64_t keep_last) {
  remove_stale_leftovers(run_dir);
  if (keep_last <= 0) return;
  const auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) {
    // First out of sight (one atomic rename), then deleted: an interruption leaves a
    // step-N.trash-* folder that nothing reads and the next prune removes.
    const fs::path trash = fs::path(run_dir) / (step_dir_name(all[i].first) + ".trash-" + ckpt_io::writer_suffix());
    std::error_code ec;
    fs::rename(all[i].second, trash, ec);
    if (ec) {
      log_warn("run folder: could not prune {}: {}", all[i].second, ec.message());
      continue;
    }
    fs::remove_all(trash, ec);
    if (ec) log_warn("run folder: could not remove {}: {} (the next prune retries)", trash.string(), ec.message());
  }
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

// A checkpoint read for a resume: every file verified against the manifest, config.json and
// trainer.json parsed and range-checked. InputError naming the file otherwise.
struct CheckedCheckpoint {
  ModelConfig model;
  ResumeState state;
};

CheckedCheckpoint read_checked(const std::string& dir) {
  verify_resume_checkpoint(dir);  // every file the resume loads, before anything is changed
  CheckedCheckpoint c;
  c.model = load_checkpoint_config(dir);
  c.state = parse_resume_state(load_checkpoint_trainer(dir), (fs::path(dir) / kCheckpointTrainerFile).string());
  return c;
}

// A valid checkpoint's model, seed, batch and step checked against the run's config.
ResumeState check_resume(const std::string& dir, const CheckedCheckpoint& c, const RunConfig& cfg,
                         const ModelConfig& mc) {
  const ModelConfig& saved = c.model;
  if (saved.n_layer != mc.n_layer || saved.n_head != mc.n_head || saved.n_embd != mc.n_embd ||
      saved.n_ctx != mc.n_ctx || saved.vocab_size != mc.vocab_size) {
    throw_input("{}: checkpoint model (layers {}, heads {}, hidden {}, context {}, vocab {}) does not match the config (layers {}, heads {}, hidden {}, context {}, vocab {})",
                dir, saved.n_layer, saved.n_head, saved.n_embd, saved.n_ctx, saved.vocab_size,
                mc.n_layer, mc.n_head, mc.n_embd, mc.n_ctx, mc.vocab_size);
  }
  const ResumeState& state = c.state;
  if (state.has_seed && state.seed != cfg.seed) {
    throw_input("{}: checkpoint was trained with seed {}, the config says {}; the data order would differ", dir,
                state.seed, cfg.seed);
  }
  if (state.has_global_batch && state.global_batch != cfg.global_batch) {
    throw_input("{}: checkpoint was trained with global_batch {}, the config says {}", dir, state.global_batch,
                cfg.global_batch);
  }
  if (state.step > cfg.steps) {
    throw_input("{}: checkpoint step {} is beyond the run's total steps {}; raise --steps to at least {} or resume "
                "an earlier checkpoint", dir, state.step, cfg.steps, state.step);
  }
  return state;
}

// --resume latest-valid: the newest checkpoint that verifies; each newer one skipped is logged
// with the reason.
std::pair<std::string, CheckedCheckpoint> newest_valid(const RunConfig& cfg,
                                                       const std::vector<std::pair<int64_t, std::string>>& existing) {
  std::string first_reason;
  for (auto it = existing.rbegin(); it != existing.rend(); ++it) {
    try {
      CheckedCheckpoint c = read_checked(it->second);
      log_info("--resume latest-valid: resuming from {} ({} newer checkpoint(s) skipped)", it->second,
               it - existing.rbegin());
      return {it->second, std::move(c)};
    } catch (const InputError& e) {
      log_warn("--resume latest-valid: skipping {}: {}", it->second, e.what());
      if (first_reason.empty()) first_reason = e.what();
    }
  }
  if (existing.empty()) throw_input("--resume latest-valid: no checkpoint (step-*) in run folder {}", cfg.out);
  throw_input("--resume latest-valid: none of the {} checkpoints in {} verifies (the newest: {})", existing.size(),
              cfg.out, first_reason);
}

// The checkpoint `opt` asks to resume from, verified; its trainer state checked against cfg.
void choose_resume(const RunConfig& cfg, const TrainOptions& opt, const ModelConfig& mc, RunFolder& f) {
  CheckedCheckpoint c;
  if (opt.resume_from == kResumeLatestValid) {
    std::tie(f.resume_dir, c) = newest_valid(cfg, f.existing);
  } else if (!opt.resume_from.empty()) {
    f.resume_dir = resolve_checkpoint_dir(opt.resume_from);
    c = read_checked(f.resume_dir);
  } else {
    if (f.existing.empty()) throw_input("--resume: no checkpoint (step-*) in run folder {}", cfg.out);
    f.resume_dir = f.existing.back().second;
    try {
      c = read_checked(f.resume_dir);
    } catch (const InputError& e) {
      throw_input("{} (the newest checkpoint of {}); pass --resume latest-valid to resume from the newest checkpoint "
                  "that verifies, or --resume DIR to choose one", e.what(), cfg.out);
    }
  }
  f.resume_state = check_resume(f.resume_dir, c, cfg, mc);
}

}  // namespace

RunFolder inspect_run_folder(const RunConfig& cfg, const TrainOptions& opt, const ModelConfig& mc) {
  RunFolder f;
  f.existing = list_checkpoints(cfg.out);
  if (opt.resume) {
    choose_resume(cfg, opt, mc, f);
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
