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
// every rank calls it: collective): with MPI active and more than one rank, one node per
// shared-memory domain (MPI_Comm_split_type MPI_COMM_TYPE_SHARED), exchanged over
// MPI_COMM_WORLD directly (not traced); otherwise every rank on node 0 ("single-process").
NodeMap make_node_map(Communicator& world);

// True once make_world_communicator() has initialised MPI (and MPI is not finalised).
bool mpi_active();

// Ends the whole job: prints `msg` as one line on stderr, prefixed with "[rank R] " when
// MPI is active, then MPI_Abort(MPI_COMM_WORLD, code), which makes the launcher stop every
// rank; without MPI, std::exit(code). The CLI calls it for any error on a multi-rank run
// (a CommTimeout, or an exception on one rank while the others wait in a collective).
[[noreturn]] void abort_job(const std::string& msg, int code);

}  // namespace weft
