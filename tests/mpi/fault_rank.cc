// weft_mpi_fault: a rank fails in the middle of a run while the others wait in an all-reduce.
// The whole mpirun job must end soon with a non-zero exit code and a clear message; see
// run_fault.sh, which CTest runs with each mode.
//
//   mpirun -np 3 weft_mpi_fault <exit|kill|stall> [timeout_seconds=5]
//     exit:  rank 1 calls std::exit(3) before step 1's all-reduce
//     kill:  rank 1 raises SIGKILL on itself
//     stall: rank 1 sleeps 60 s; the others' all-reduce times out (CommTimeout) and they
//            call end_job_on_error, as the CLI does: rank 1 never joins the agreement,
//            so it falls back to abort_job
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/world.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int timeout_s = argc > 2 ? std::atoi(argv[2]) : 5;
  if (mode != "exit" && mode != "kill" && mode != "stall") {
    fmt::print(stderr, "usage: weft_mpi_fault <exit|kill|stall> [timeout_seconds]\n");
    return 2;
  }
  try {
    std::unique_ptr<weft::Communicator> world = weft::make_world_communicator(&argc, &argv);
    world->set_timeout(std::chrono::seconds(timeout_s));
    const int rank = world->rank();
    std::vector<float> buf(1 << 18, 1.0f);  // 1 MiB
    for (int step = 0; step < 3; ++step) {
      if (step == 1 && rank == 1) {
        fmt::print(stderr, "[rank 1] weft_mpi_fault: injecting fault '{}' at step 1\n", mode);
        std::fflush(stderr);
        if (mode == "exit") std::exit(3);
        if (mode == "kill") std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::seconds(60));
      }
      world->all_reduce(buf.data(), static_cast<int64_t>(buf.size()), weft::CommDType::kF32, weft::ReduceOp::kSum);
    }
    fmt::print(stderr, "[rank {}] weft_mpi_fault: all steps completed\n", rank);
    return 0;
  } catch (const std::exception& e) {
    weft::end_job_on_error(e.what(), 1);
  }
}
