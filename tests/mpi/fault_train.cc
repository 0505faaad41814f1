// weft_fault_train: `weft train` with a fault injected through the trainer's test hook
// (TrainOptions::before_step), so that production code carries no fault injection.
//
//   mpirun -np N weft_fault_train KIND:RANK:STEP CONFIG.toml [--key value ...]
//     KIND exit:  rank RANK exits (code 3) before step STEP (1-based) starts
//     KIND stall: rank RANK sleeps an hour there; the others must time out and end the job
// Errors end the job as the CLI does: one line and exit code 2 (bad input) or 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "train/config.h"
#include "train/trainer.h"

namespace {

struct Fault {
  std::string kind;
  int rank = -1;
  long long step = -1;
};

Fault parse_fault(const std::string& s) {
  Fault f;
  char kind[16] = {0};
  if (std::sscanf(s.c_str(), "%15[a-z]:%d:%lld", kind, &f.rank, &f.step) != 3 ||
      (std::string(kind) != "exit" && std::string(kind) != "stall")) {
    weft::throw_input("fault '{}': expected exit|stall:RANK:STEP", s);
  }
  f.kind = kind;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<weft::Communicator> world;
  try {
    world = weft::make_world_communicator(&argc, &argv);
    if (argc < 3) weft::throw_input("usage: weft_fault_train KIND:RANK:STEP CONFIG.toml [--key value ...]");
    const Fault fault = parse_fault(argv[1]);
    std::vector<std::pair<std::string, std::string>> overrides;
    for (int i = 3; i + 1 < argc; i += 2) {
      std::string key = std::string(argv[i]).substr(2);
      overrides.emplace_back(key, argv[i + 1]);
    }
    const weft::RunConfig cfg = weft::load_run_config(argv[2], overrides);
    weft::TrainOptions opt;
    opt.overwrite = true;
    const int rank = world->rank();
    opt.before_step = [&](int64_t step) {
      if (rank != fault.rank || step + 1 != fault.step) return;
      fmt::print(stderr, "[rank {}] weft_fault_train: injecting fault '{}' before step {}\n", rank, fault.kind, step + 1);
      std::fflush(stderr);
      if (fault.kind == "exit") std::_Exit(3);
      std::this_thread::sleep_for(std::chrono::hours(1));
    };
    weft::train(cfg, opt, *world);
    return 0;
  } catch (const weft::InputError& e) {
    weft::end_job_on_error(e.what(), 2);
  } catch (const std::exception& e) {
    weft::end_job_on_error(e.what(), 1);
  }
}
