// The entry point of a run into communication: the world communicator, and the way out when
// something goes wrong on a multi-rank run.
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/topology.h"

namespace weft {

// The MPI world when the process was launched by an MPI launcher (mpirun, srun; see
// MpiRuntime::launched_under_mpi; WEFT_MPI=1/0 forces it either way), else the self
// communicator: a single-process run never touches MPI. The returned MPI world owns the MPI
// runtime: destroying it calls MPI_Finalize (see make_mpi_world in comm/mpi/mpi_comm.h), so
// keep it in main's scope (not in a static), destroy the ProcessGrid and other communicators
// before it, and call this once per process. Also calls set_log_rank(world rank).
// Throws RuntimeError when launched under MPI by a weft built without MPI (WEFT_WITH_MPI=OFF).
std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv);

// The real rank-to-node map of `world` (the communicator make_world_communicator returned;
// every rank calls it: collective): with MPI active and more than one rank, one node per host
// (the ranks' hostnames, all-gathered over `world` itself, not traced: a sub-communicator's run
// never waits on the rest of MPI_COMM_WORLD); otherwise every rank on node 0 ("single-process").
NodeMap make_node_map(Communicator& world);

// True once make_world_communicator() has initialised MPI (and MPI is not finalised).
bool mpi_active();

// Ends the whole job: prints `msg` as one line on stderr, prefixed with "[rank R] " when
// MPI is active, then MPI_Abort(MPI_COMM_WORLD, code), which makes the launcher stop every
// rank; without MPI, std::exit(code). The CLI calls it for any error on a multi-rank run
// (a CommTimeout, or an exception on one rank while the others wait in a collective).
[[noreturn]] void abort_job(const std::string& msg, int code);

// Seconds end_job_on_error waits for every rank to report a failure: WEFT_ERROR_AGREE_TIMEOUT
// (a positive number of seconds) or 2.
double error_agreement_timeout_s();

// Ends a run that failed on this rank with `msg` (one line, printed as "weft: msg") and exit
// code `code`. The CLI calls it for every error.
// - Without MPI (or on one rank): prints the line and exits with `code`.
// - With MPI: this rank enters a non-blocking barrier on a duplicate of MPI_COMM_WORLD kept
//   for this purpose only (made by make_world_communicator) and waits up to
//   error_agreement_timeout_s(). When every rank arrives (each failed: a bad config, a
//   missing file, a layout that does not divide), the job ends cleanly, without MPI_Abort and
//   its banner: the ranks agree on the largest exit code, rank 0 prints its line, a rank whose
//   message differs from rank 0's prints its own line prefixed "[rank R] ", and every rank
//   calls MPI_Finalize and exits with the agreed code. When some rank does not arrive in time
//   (it is working, blocked in a collective, or dead), abort_job(msg, code): one rank's
//   failure still ends the whole job.
[[noreturn]] void end_job_on_error(const std::string& msg, int code);

}  // namespace weft
