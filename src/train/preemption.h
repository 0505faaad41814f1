// Preemption: SIGTERM and SIGINT stop a training run at a step boundary that every rank agrees
// on, after which the trainer writes a checkpoint of that step (`[checkpoint] on_signal`) and
// the process exits with 128 + the signal number. See docs/preemption.md.
//
// The handler only records the signal (an atomic word, lock-free, so async-signal-safe) and
// writes one line to stderr with write(2); everything else happens in the training loop:
// at each step boundary every rank calls agree_on_stop(), one all-reduce (MAX) of
// {signal, seconds since it arrived} over the world, so a signal that reached one rank only
// (or the ranks at different moments) stops all of them after the same step.
#pragma once
#include <signal.h>

#include <cstdint>
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace weft {

// What the training loop is doing, for the handler's line.
enum class SignalPhase { kSetup, kTraining, kCheckpoint, kFinishing };

// Installs the SIGTERM/SIGINT handlers for its lifetime and restores the previous ones when
// destroyed (tests call train() in-process). Starts in SignalPhase::kSetup with no signal
// received. One at a time per process.
class SignalStopGuard {
 public:
  SignalStopGuard(int rank, bool checkpoint_on_signal);
  ~SignalStopGuard();
  SignalStopGuard(const SignalStopGuard&) = delete;
  SignalStopGuard& operator=(const SignalStopGuard&) = delete;

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

// The outcome of a boundary's agreement: the signal that stops the run (0: none; the
// highest number if ranks received different ones) and the seconds since the first rank
// received it (each rank measures its own delay: no clocks are compared across hosts).
struct StopVote {
  int signal = 0;
  double since_signal_s = 0.0;
};

// Collective over `world` (every rank calls it at the same boundary): the step boundary after
// step `done` (the first step of the process minus one, before it: `done` = first step).
// Also advances the step the handler's line names to done + 1; `last` (no step follows)
// moves the phase to kFinishing. Traced (when `world` has a tracer) in the phase
// "preemption", which the communication model does not model (only "train" is modelled).
StopVote agree_on_stop(Communicator& world, int64_t done, bool last);

// Marks the checkpoint write of the step the next boundary concludes while it lives (the
// handler then says that the write is finished first).
class CheckpointSignalScope {
 public:
  CheckpointSignalScope();
  ~CheckpointSignalScope();
  CheckpointSignalScope(const CheckpointSignalScope&) = delete;
  CheckpointSignalScope& operator=(const CheckpointSignalScope&) = delete;
};

// What the training loop gives stop_at_boundary().
struct StopContext {
  int64_t first_step = 0;   // the step this process resumed from (0: a fresh run)
  int64_t total_steps = 0;  // the config's steps
  bool on_signal = true;    // [checkpoint] on_signal
  bool rank0 = false;       // prints the message
  std::string run_dir;      // for the newest checkpoint when none is written
  std::string saved_dir;    // the checkpoint of `done` when it was written before the boundary
  std::function<std::string()> save;  // writes the checkpoint of `done` (collective); returns its folder
};

// Collective: the boundary after step `done` (agree_on_stop). When a signal stops the run:
// writes the checkpoint of `done` (unless `saved`, or on_signal is off, or no step ran), prints
// stop_message on rank 0 and returns the signal; else 0.
int stop_at_boundary(Communicator& world, int64_t done, bool saved, const StopContext& ctx);

// "SIGTERM", "SIGINT", else "signal N".
std::string signal_name(int signal);

// What rank 0 prints once the ranks agreed to stop.
struct StopReport {
  int signal = 0;
  int64_t first_step = 0;   // the first step this process would have run, minus one (resume point)
  int64_t done = 0;         // the step after which the run stopped
  int64_t total_steps = 0;  // the config's steps
  bool on_signal = true;    // [checkpoint] on_signal
  std::string checkpoint;   // the checkpoint of step `done`, or empty: none was written
  bool written_now = false; // the checkpoint was written because of the signal (else: it was due)
  double write_s = 0.0;     // its write time
  double since_signal_s = 0.0;
  std::string newest_checkpoint;  // without a checkpoint of `done`: the newest in the run folder
};
std::string stop_message(const StopReport& r);

// The exit code of `weft train`: 0 when every step ran (a signal after the last step skips
// only the final report and sample), else 128 + signal as shells report a process the signal
// ended (143 for SIGTERM, 130 for SIGINT); 0 when no signal stopped the run.
int train_exit_code(int stop_signal, int64_t steps_done, int64_t total_steps);

}  // namespace weft
