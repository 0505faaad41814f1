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

[[noreturn]] void abort_job(const std::string& msg, int code) {
  fmt::print(stderr, "{}\n", msg);
  std::fflush(stderr);
  std::exit(code);
}

#endif

}  // namespace weft
