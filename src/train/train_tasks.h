// In-context-learning tasks scored during training ([eval] tasks; the evaluation of
// train/icl_eval.h that `weft eval --tasks` runs on a checkpoint, here on the training engine):
// before the first step of a new run, every tasks_every steps (0: every val_every) and after the
// last step. Each scoring is one metrics.jsonl line {"step", "tokens", "tasks": [{"task", "items",
// "fewshot", "acc", "acc_stderr"[, "acc_norm", "acc_norm_stderr"], "seconds"}, ...]} that
// `weft report` plots. The forward passes run in the training layout (the requests dealt over
// the data-parallel replicas) with the training engine's weights; the training that follows is
// bit for bit the one of a run without tasks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/icl_tasks.h"
#include "model/config.h"
#include "train/config.h"
#include "train/icl_eval.h"

namespace weft {

class Engine;

// The tokenizer the tasks are encoded with: eval.tokenizer, else the one meta.json of the
// training data names (`weft prepare --tokenizer`), else GPT-2's. "" means GPT-2's.
std::string task_tokenizer_source(const RunConfig& cfg);

class TrainTasks {
 public:
  // Reads every task file and the tokenizer: InputError naming the file, before the run folder
  // is written. No tasks: an empty schedule.
  TrainTasks(const RunConfig& cfg, const ModelConfig& mc);

  bool empty() const { return tasks_.empty(); }
  // Whether the tasks are scored after step `done` (0: before the first step of a new run).
  bool due(int64_t done, bool last) const;
  // Scores every task on the engine (collective over the grid; the engine is back in training
  // state afterwards) and returns the metrics line of step `done` (`tokens` trained).
  nlohmann::json evaluate(Engine& engine, int64_t done, int64_t tokens);
  // The forward passes each rank made in the last evaluate (the communication model replays
  // them before the next step's gathers).
  int64_t last_forward_passes() const { return last_passes_; }

 private:
  std::vector<IclTask> tasks_;
  std::vector<IclRequests> requests_;  // each task's, encoded once (the tokenizer is needed no more)
  IclOptions opt_;
  int64_t every_ = 0;
  int64_t last_passes_ = 0;
};

}  // namespace weft
