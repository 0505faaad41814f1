#include "comm/world.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "comm/self_comm.h"
#include "core/error.h"
#include "core/log.h"

#if WEFT_HAVE_MPI
#include <mpi.h>

#include "comm/mpi/mpi_comm.h"
#endif

namespace weft {

#if WEFT_HAVE_MPI

std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv) {
  if (!MpiRuntime::launched_under_mpi()) return make_self_communicator("world");
  std::unique_ptr<Communicator> world = make_mpi_world(argc, argv);
  set_log_rank(world->rank());
  return world;
}

bool mpi_active() { return MpiRuntime::active(); }

NodeMap make_node_map(Communicator& world) {
  if (!MpiRuntime::active() || world.size() <= 1) {
    return node_map_from_keys(std::vector<int>(static_cast<size_t>(world.size()), 0), "single-process");
  }
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm shared = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &shared) != MPI_SUCCESS) {
    throw_runtime("weft: rank {}: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed", world_rank);
  }
  int leader = world_rank;  // the node's key: its lowest world rank
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared);
  MPI_Comm_free(&shared);
  std::vector<int> keys(static_cast<size_t>(world_size));
  MPI_Allgather(&leader, 1, MPI_INT, keys.data(), 1, MPI_INT, MPI_COMM_WORLD);
  // world's ranks in its own order (a duplicate of MPI_COMM_WORLD: the same order).
  std::vector<int> mine;
  for (int r : world.world_ranks()) mine.push_back(keys.at(static_cast<size_t>(r)));
  return node_map_from_keys(mine, "mpi-shared-memory");
}

[[noreturn]] void abort_job(const std::string& msg, int code) {
  if (MpiRuntime::active()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fmt::print(stderr, "[rank {}] {}\n", rank, msg);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  } else {
    fmt::print(stderr, "{}\n", msg);
    std::fflush(stderr);
  }
  std::exit(code);
}

#else  // built without MPI

std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv) {
  if (const char* forced = std::getenv("WEFT_MPI"); forced != nullptr && std::string(forced) == "0") {
    return make_self_communicator("world");
  }
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (const char* s = std::getenv(v); s != nullptr && *s != '\0') {
      throw_runtime(
          "weft was built without MPI (WEFT_WITH_MPI=OFF) but was started by an MPI launcher ({} is set); "
          "rebuild with MPI, or set WEFT_MPI=0 to run each process alone",
          v);
    }
  }
  return make_self_communicator("world");
}

bool mpi_active() { return false; }

NodeMap make_node_map(Communicator& world) {
  return node_map_from_keys(std::vector<int>(static_cast<size_t>(world.size()), 0), "single-process");
}

[[noreturn]] void abort_job(const std::string& msg, int code) {
  fmt::print(stderr, "{}\n", msg);
  std::fflush(stderr);
  std::exit(code);
}

#endif

}  // namespace weft
