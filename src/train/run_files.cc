#include "train/run_files.h"

#include <filesystem>
#include <utility>

#include "core/error.h"
#include "data/text_util.h"
#include "train/run_folder.h"

namespace fs = std::filesystem;

namespace weft {

RunFiles::RunFiles(std::string run_dir, const int64_t& steps_done) : dir_(std::move(run_dir)), steps_done_(steps_done) {}

void RunFiles::open_metrics() {
  const std::string path = (fs::path(dir_) / "metrics.jsonl").string();
  try {
    metrics_ = AppendFile(path);
  } catch (const WriteError& e) {
    stop(path, e);
  }
}

void RunFiles::append_metrics(const nlohmann::json& line) {
  try {
    metrics_.append(line.dump() + "\n");
  } catch (const WriteError& e) {
    stop(metrics_.path(), e);
  }
}

void RunFiles::close_metrics() {
  try {
    metrics_.close();
  } catch (const WriteError& e) {
    stop(metrics_.path(), e);
  }
}

void RunFiles::replace(const std::string& name, std::string_view text) const {
  const std::string path = (fs::path(dir_) / name).string();
  try {
    write_file_atomic(path, text);
  } catch (const WriteError& e) {
    stop(path, e);
  }
}

void RunFiles::append_with(const std::string& path, const std::function<void()>& append) const {
  try {
    append_or_roll_back(path, append);
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    stop(path, e);
  }
}

void RunFiles::write_with(const std::string& what, const std::function<void()>& write) {
  try {
    if (metrics_.is_open()) metrics_.sync();
  } catch (const WriteError& e) {
    stop(metrics_.path(), e);
  }
  try {
    write();
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    stop(what, e);
  }
}

std::string RunFiles::stop_message(const std::string& error) const {
  const std::string when =
      steps_done_ > 0 ? fmt::format("stopped after step {}", steps_done_) : std::string("stopped before the first step");
  const std::string latest = find_latest_checkpoint(dir_);
  const std::string next = latest.empty()
                               ? "no checkpoint to resume from: free space and start again with --overwrite"
                               : fmt::format("resume from {} with --resume", latest);
  return fmt::format("{}; {}; {}", error, when, next);
}

void RunFiles::stop(const std::string& path, const std::exception& e) const {
  // A WriteError already reads "cannot write PATH: REASON (FREE)"; another writer's error (the
  // checkpoint's, the tracer's) gets the file and the free space around it.
  const auto* we = dynamic_cast<const WriteError*>(&e);
  const std::string error =
      we != nullptr ? std::string(e.what()) : fmt::format("cannot write {}: {} ({})", path, e.what(), free_space_note(path));
  throw RuntimeError(stop_message(error));
}

}  // namespace weft
