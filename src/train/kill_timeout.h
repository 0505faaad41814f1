// The launcher's grace time after SIGTERM against what a stop needs (issue 34 class 4).
//
// When a job is preempted, the launcher forwards SIGTERM to the ranks and kills them some
// seconds later: Open MPI's mpirun after `odls_base_sigkill_timeout` (1 s by default), Slurm
// after `KillWait` (or what `--signal` asked for). A rank that receives SIGTERM finishes its
// step, then rank 0 writes the checkpoint of that step (train/preemption.h): if that takes
// longer than the grace time, the ranks die mid-write and the step's work is lost. At launch
// weft predicts the time a stop needs (a step plus the checkpoint's bytes at the rate a synced
// write reaches in the run folder) and says when the launcher's timeout is shorter, with the
// command that raises it (docs/preemption.md).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace weft {

// Open MPI's kill timeout as the ranks see it, and where it came from.
struct KillTimeout {
  double seconds = 0;
  std::string source;  // "OMPI_MCA_odls_base_sigkill_timeout", a parameter file, or Open MPI's default
};

// The timeout of the Open MPI mpirun that launched this process (its environment says so:
// OMPI_COMM_WORLD_SIZE); nullopt when not launched by Open MPI's mpirun. Read from
// OMPI_MCA_odls_base_sigkill_timeout (mpirun passes `--mca` settings there), else from
// $HOME/.openmpi/mca-params.conf or /etc/openmpi/openmpi-mca-params.conf, else Open MPI's
// default of 1 s.
std::optional<KillTimeout> openmpi_kill_timeout();

// Bytes per second of a synced write of `bytes` (1 to 16 MiB: a launch-time probe) into folder `dir`: writes a
// temporary file there, fsyncs it and removes it. 0 when the probe cannot be written.
double synced_write_rate(const std::string& dir, int64_t bytes);

// What a stop needs: finishing a step (step_s) and writing `checkpoint_bytes` at `rate` bytes/s.
struct StopNeed {
  double step_s = 0;
  double checkpoint_s = 0;
  int64_t checkpoint_bytes = 0;
  double rate = 0;
  double total() const { return step_s + checkpoint_s; }
};

// The warning when `need` does not fit in `timeout` (with a margin of 2x, since the
// measurement is of an idle file system), naming both and how to raise the timeout; empty when
// it fits.
std::string kill_timeout_warning(const StopNeed& need, const KillTimeout& timeout);

}  // namespace weft
