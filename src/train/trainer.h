// The training loop of one process: data, model, optimizer, metrics, validation, checkpoints.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "comm/communicator.h"
#include "train/config.h"
#include "train/run_folder.h"

namespace weft {

struct TrainOptions {
  std::string config_path;    // for the log only
  bool resume = false;        // continue from the newest checkpoint in the run folder (or resume_from)
  std::string resume_from;    // a checkpoint folder; empty: newest in cfg.out
  bool overwrite = false;     // start afresh in a run folder that already holds a run
  // Called on every rank before each step (0-based) starts: a hook for the test harness (fault
  // injection in tests/mpi/fault_train.cc); production runs leave it empty.
  std::function<void(int64_t step)> before_step;
};

struct TrainResult {
  int64_t first_step = 0;     // 0 for a fresh run
  int64_t steps_done = 0;     // optimizer steps completed in total
  double last_loss = 0.0;
  double first_val_loss = -1.0;
  double last_val_loss = -1.0;
  double tokens_per_s = 0.0;  // mean over the steps of this process
  std::string last_checkpoint;
  std::string sample;         // text printed at the end (if sample_tokens > 0)
  int stop_signal = 0;        // SIGTERM/SIGINT that stopped the run after steps_done (train/preemption.h); 0: none
};

// Trains on the processes of `world` (tp x pp x dp from the config; every rank calls it).
TrainResult train(const RunConfig& cfg, const TrainOptions& opt, Communicator& world);
// Single process.
TrainResult train(const RunConfig& cfg, const TrainOptions& opt);


// Sets the thread count of weft's loops and of BLAS (0: keep OMP_NUM_THREADS / all cores).
// Returns the count in force.
int set_threads(int64_t threads);

}  // namespace weft
