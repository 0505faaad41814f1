#include "comm/world.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <vector>

#include "comm/self_comm.h"
#include "core/error.h"
#include "core/log.h"

#if WEFT_HAVE_MPI
#include <mpi.h>

#include "comm/mpi/mpi_comm.h"
#endif

namespace weft {

double error_agreement_timeout_s() {
  const char* v = std::getenv("WEFT_ERROR_AGREE_TIMEOUT");
  if (v == nullptr || *v == '\0') return 2.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return (end != v && *end == '\0' && s > 0 && s < 3600) ? s : 2.0;
}

namespace {

// "weft: msg" once: library messages that already start with "weft: " keep theirs.
std::string cli_line(const std::string& msg) { return msg.rfind("weft: ", 0) == 0 ? msg : "weft: " + msg; }

}  // namespace

#if WEFT_HAVE_MPI

namespace {

// The duplicate of MPI_COMM_WORLD on which failing ranks meet (end_job_on_error); no other
// traffic ever uses it, so a rank waiting there cannot match anything else.
MPI_Comm g_agreement = MPI_COMM_NULL;

// FNV-1a: the same message gives the same number on every rank.
uint64_t message_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Waits up to `seconds` for the barrier `req` (polling, so a rank that waits leaves its core
// to the others); true when every rank has entered it.
bool wait_for(MPI_Request& req, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int done = 0;
  while (true) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Every rank has failed: agree on the code, print each distinct message once, finalise and
// exit. A watchdog exits anyway if MPI_Finalize does not return (a peer's operation left
// pending), so the clean path can never hang.
[[noreturn]] void finish_agreed(const std::string& msg, int code) {
  int rank = 0, size = 1, agreed = code;
  MPI_Comm_rank(g_agreement, &rank);
  MPI_Comm_size(g_agreement, &size);
  MPI_Allreduce(&code, &agreed, 1, MPI_INT, MPI_MAX, g_agreement);
  unsigned long long mine = message_hash(msg);
  std::vector<unsigned long long> all(static_cast<size_t>(size));
  MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, g_agreement);
  if (rank == 0) fmt::print(stderr, "{}\n", cli_line(msg));
  else if (mine != all[0]) fmt::print(stderr, "[rank {}] {}\n", rank, cli_line(msg));
  std::fflush(stderr);
  std::fflush(stdout);
  std::thread([agreed] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(agreed);
  }).detach();
  MPI_Finalize();
  std::exit(agreed);
}

}  // namespace

std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv) {
  if (!MpiRuntime::launched_under_mpi()) return make_self_communicator("world");
  std::unique_ptr<Communicator> world = make_mpi_world(argc, argv);
  set_log_rank(world->rank());
  if (g_agreement == MPI_COMM_NULL && MPI_Comm_dup(MPI_COMM_WORLD, &g_agreement) == MPI_SUCCESS) {
    MPI_Comm_set_errhandler(g_agreement, MPI_ERRORS_RETURN);
  }
  return world;
}

[[noreturn]] void end_job_on_error(const std::string& msg, int code) {
  int size = 1;
  if (MpiRuntime::active()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size <= 1) {
    fmt::print(stderr, "{}\n", cli_line(msg));
    std::fflush(stderr);
    if (MpiRuntime::active()) MPI_Finalize();  // one rank under mpirun: a clean exit
    std::exit(code);
  }
  if (g_agreement == MPI_COMM_NULL) abort_job(msg, code);  // no agreement possible: stop every rank
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(g_agreement, &req) == MPI_SUCCESS && wait_for(req, error_agreement_timeout_s())) {
    finish_agreed(msg, code);
  }
  abort_job(msg, code);
}

bool mpi_active() { return MpiRuntime::active(); }

// The node of each rank of `world`: its host (the rank's hostname, gathered over `world` itself,
// so a sub-communicator's run, weft ensemble's members, never waits on the rest of the world).
// Ranks on one host share its memory, as MPI_COMM_TYPE_SHARED would group them.
NodeMap make_node_map(Communicator& world) {
  if (!MpiRuntime::active() || world.size() <= 1) {
    return node_map_from_keys(std::vector<int>(static_cast<size_t>(world.size()), 0), "single-process");
  }
  constexpr int kHostChars = 256;
  std::vector<char> host(kHostChars, '\0');
  if (gethostname(host.data(), kHostChars - 1) != 0) throw_runtime("weft: gethostname failed");
  std::vector<char> all(static_cast<size_t>(kHostChars) * static_cast<size_t>(world.size()));
  Tracer* const tracer = world.tracer();  // set-up, not the run's traffic: not traced
  world.set_tracer(nullptr);
  world.all_gather(host.data(), all.data(), kHostChars, CommDType::kU8);
  world.set_tracer(tracer);
  // A node's key: its first rank in `world`'s order.
  std::vector<int> keys(static_cast<size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    const std::string name(all.data() + static_cast<size_t>(r) * kHostChars);
    keys[static_cast<size_t>(r)] = r;
    for (int q = 0; q < r; ++q) {
      if (name == std::string(all.data() + static_cast<size_t>(q) * kHostChars)) {
        keys[static_cast<size_t>(r)] = keys[static_cast<size_t>(q)];
        break;
      }
    }
  }
  return node_map_from_keys(keys, "mpi-hostname");
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

[[noreturn]] void end_job_on_error(const std::string& msg, int code) {
  fmt::print(stderr, "{}\n", cli_line(msg));
  std::fflush(stderr);
  std::exit(code);
}

#endif

}  // namespace weft
