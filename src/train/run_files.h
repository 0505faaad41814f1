// The writes of a run to its folder (metrics.jsonl, config.toml, reports, trace files,
// checkpoints), each checked. A failed write (a full disk, a quota, an I/O error) stops the run
// with one line: the file, the error, the free space, how far the run got and where to resume:
//   cannot write runs/x/metrics.jsonl: No space left on device (0 B free of 64.0 MiB); stopped
//   after step 7; resume from runs/x/step-000005 with --resume
// (RuntimeError: exit code 1). Nothing already written is damaged: a metrics line is written
// whole or not at all, a replaced file is replaced atomically, a checkpoint that cannot be
// written leaves the previous one in place.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/durable_file.h"

namespace weft {

class RunFiles {
 public:
  // `steps_done`: the run's count of completed optimizer steps, read when a write fails.
  RunFiles(std::string run_dir, const int64_t& steps_done);

  const std::string& dir() const { return dir_; }
  // Opens <run>/metrics.jsonl for appending (the writing rank).
  void open_metrics();
  // Appends one JSON line to metrics.jsonl in one write; never leaves a torn line.
  void append_metrics(const nlohmann::json& line);
  // Closes metrics.jsonl, checking the result (network file systems report late errors here).
  void close_metrics();
  // Replaces <run>/<name> atomically with `text` (config.toml).
  void replace(const std::string& name, std::string_view text) const;
  // Runs `append`, which appends to `path` by its own means (the tracer's files); on failure
  // truncates `path` back to its previous length.
  void append_with(const std::string& path, const std::function<void()>& append) const;
  // Runs `write`, which writes `what` (a checkpoint folder, a report) and cleans up after itself
  // on failure; metrics.jsonl is synced first, so that the lines a checkpoint follows are on
  // disk with it.
  void write_with(const std::string& what, const std::function<void()>& write);

  // The one line that stops the run: `error` ("cannot write ...") with how far the run got and
  // the checkpoint to resume from.
  std::string stop_message(const std::string& error) const;

 private:
  [[noreturn]] void stop(const std::string& path, const std::exception& e) const;

  std::string dir_;
  const int64_t& steps_done_;
  AppendFile metrics_;
};

}  // namespace weft
