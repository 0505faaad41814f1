// The MPI transport (CPU buffers; built against OpenMPI, standard MPI-3 only).
//
// MpiRuntime initialises MPI (MPI_THREAD_FUNNELED: only the main thread calls MPI) and
// finalises it when destroyed; world() returns a Communicator over a duplicate of
// MPI_COMM_WORLD, so weft's traffic never matches anyone else's. make_mpi_world() does both
// and ties MPI's lifetime to the returned communicator. Most code should not use this
// header: make_world_communicator() in comm/world.h picks MPI or the self communicator.
//
// How the MPI communicator behaves (beyond comm/communicator.h):
// - Every blocking call is the non-blocking MPI call plus wait(), so the timeout applies to
//   all of them. wait() polls MPI_Test and backs off (spins ~50 us, then sched_yield until
//   ~2 ms, then nanosleep growing from 20 us to 1 ms), so waiting ranks leave the core to
//   others on an oversubscribed machine. The timeout counts from the start of wait().
// - On timeout, wait() throws CommTimeout: "weft: rank 1: all_reduce of 4.0 MiB on axis dp
//   (ranks 0,1) did not complete within 5.0 s: a peer rank is dead or stalled". An
//   asynchronous handle stays valid after that: wait() may be called again and completes the
//   operation if the peer turns up. A blocking call that timed out leaves its operation
//   pending inside the communicator (its buffers must stay valid until it completes, which
//   is why the only sound reaction is to end the job: abort_job() in comm/world.h).
//   progress() and the communicator's destruction complete such leftovers when they can.
// - split() (MPI_Comm_split) and the creation of the world communicator are blocking MPI
//   calls without a timeout. Communicators made by split() inherit the parent's timeout and
//   tracer.
// - Counts are int in MPI: a count (or, for the *_v forms, a displacement) above INT_MAX
//   throws RuntimeError naming the call; split such a buffer into pieces (the gradient
//   buckets do). 2^31 f32 elements are 8 GiB, far above any bucket. all_to_all_v
//   (MPI_Ialltoallv) checks what this rank sends (its row's sum) and receives (its column's
//   sum), which bound every block and displacement it passes.
// - all_gather / all_gather_v run in place (MPI_IN_PLACE) when `send` is this rank's block
//   of `recv`; reduce_scatter / reduce_scatter_v run in place when send == recv (recv then
//   holds the full input and receives this rank's block at its start).
// - Collectives on a group of one rank make no MPI call (a copy where send != recv); send
//   and recv always go through MPI (a rank may send to itself with isend + irecv).
// - MPI errors are returned, not fatal (MPI_ERRORS_RETURN on weft's communicators), and
//   thrown as RuntimeError with MPI's message.
// - Destroying a handle that was not waited for waits for it (with the timeout; on timeout
//   it logs a warning and leaves the operation pending as above). While an exception
//   unwinds the stack it does not wait: the operation is left pending, for the handler to
//   end the job without first sitting out the timeout.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace weft {

class MpiRuntime {
 public:
  // Calls MPI_Init_thread(MPI_THREAD_FUNNELED) unless MPI is initialised already (then the
  // runtime neither initialises nor finalises). argc/argv may be null.
  MpiRuntime(int* argc, char*** argv);
  // MPI_Finalize, if this runtime initialised MPI, except while an exception unwinds the
  // stack (then the handler can still call abort_job(), and a process that exits without
  // finalising makes the launcher end the job).
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // True when the process was started by an MPI launcher: mpirun/mpiexec (OMPI_COMM_WORLD_SIZE,
  // PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS), a PMIx launcher such as `srun --mpi=pmix`
  // (PMIX_RANK), or srun with more than one task (SLURM_PROCID with SLURM_STEP_NUM_TASKS, or
  // SLURM_NTASKS, > 1). WEFT_MPI=1 forces true, WEFT_MPI=0 forces false.
  static bool launched_under_mpi();
  // MPI_Init has run and MPI_Finalize has not.
  static bool active();

  int world_rank() const;
  int world_size() const;
  // A new communicator over a duplicate of MPI_COMM_WORLD, axis "world" (collective: every
  // rank calls it). Must be destroyed before the runtime.
  std::unique_ptr<Communicator> world();

 private:
  bool owns_ = false;
};

// Initialises MPI (as MpiRuntime) and returns the world communicator, which owns the runtime:
// destroying it finalises MPI (destroy the communicators split from it and any handles
// first). A process that leaves without destroying it (std::exit on an error path, a
// crash) does not call MPI_Finalize, so the launcher sees a rank that died and ends the
// whole job at once, instead of that rank waiting in MPI_Finalize for peers that are stuck
// in a collective. Destroyed while an exception unwinds, it does not finalise either.
std::unique_ptr<Communicator> make_mpi_world(int* argc, char*** argv);

}  // namespace weft
