// The weft command line: main() runs the subcommand named by the first argument (one file
// each, see commands.h). Errors: InputError -> one line on stderr, exit 2; any other failure
// -> exit 1.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>

#include "core/memory.h"
#include "backend/registry.h"
#include "comm/world.h"
#include "commands.h"
#include "core/error.h"
#if WEFT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "comm/nccl/nccl_comm.h"
#endif

using namespace weft;

namespace {

const char* kUsage =
    "usage: weft <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG.toml [--key value ...] [--resume [DIR]] [--overwrite]\n"
    "                      train a model; every config key can be overridden (--steps 100, --lr 3e-4, --out runs/x,\n"
    "                      --backend cuda, --comm nccl|mpi)\n"
    "  prepare --input PATH [PATH ...] --out DIR\n"
    "                      tokenize text files, folders or JSONL into llm.c-format token shards\n"
    "  prepare --synthetic-weather DIR [--years Y | --days D] [--grid HxW] [--step-hours H] [--seed S]\n"
    "                      write synthetic weather fields (NetCDF train/val/test + stats.json) for weather models\n"
    "  eval --checkpoint DIR --data SHARD [--windows N] [--format json] [--backend NAME] [--comm NAME] [--tp ..]\n"
    "                      mean loss over consecutive windows of a token shard\n"
    "  eval --checkpoint CLIMAX_DIR --data WEATHER_DIR [--split test|val] [--lead-hours 6,24] [--samples N]\n"
    "       [--stride S] [--out FILE.json] [--map FILE.png [--map-var NAME] [--map-sample K]]\n"
    "                      a ClimaX checkpoint: latitude-weighted RMSE and ACC per variable against persistence and\n"
    "                      climatology; --map draws a forecast beside the truth\n"
    "  generate --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--backend NAME]\n"
    "           [--comm NAME]\n"
    "                      sample text from a checkpoint (a run folder uses its newest checkpoint)\n"
    "  bench --model PRESET [--batch B] [--seq T] [--threads N] [--steps S] [--format json] [--tp ..]\n"
    "        [--backend NAME] [--comm NAME] [--precision fp32|bf16] [--peak-tflops F] [--matmul-only]\n"
    "                      time training steps on random tokens through the engine on a backend (cpu, cpu-guarded,\n"
    "                      cuda; cuda: MFU against F and the measured bf16 GEMM rate; --matmul-only: that rate alone)\n"
    "  bench --peer torch --model tiny|small|gpt2-124m [--peer-rounds R] [--peer-modes eager,compile,bf16]\n"
    "                      the same GPT in PyTorch 2.x (.venv-peers) alternately: tokens/s, weft/peer, kernels\n"
    "  plan --model PRESET --system systems/NAME.toml --gpus N --global-batch B [--tp ..] [--top N] [--scaling]\n"
    "                      predict memory and step time of layouts and rank them\n"
    "  calibrate [--out systems/local.toml]\n"
    "                      measure this machine (sgemm, memory, MPI links) and write a system file\n"
    "  report RUN_DIR [RUN_DIR_B] [--out DIR]\n"
    "                      Markdown summary and PNG plots of a traced run, or of two runs compared\n"
    "  tune CONFIG [--trials K] [--steps S] [--budget SECONDS] [--seed S] [--out runs/tune]\n"
    "                      Bayesian trials of the run's layouts on these ranks, seeded by the planner; SHAP of the knobs\n"
    "  tune CONFIG --space KEY=V1,V2,... [--space ...] [--trials K] [--objective val_mae] [--out DIR]\n"
    "                      model search: trials of the run's own keys scored on the validation split\n"
    "  ensemble CONFIG --from TUNE_DIR [--top K] [--groups cost|equal] [--evaluate] [--out runs/ensemble]\n"
    "                      a model search's top K trained concurrently as sub-communicators sized by cost; their mean,\n"
    "                      spread and its calibration on the test split (graph networks)\n"
    "  export --checkpoint DIR --out HF_DIR [--dtype bf16|fp16|fp32] [--overwrite]\n"
    "                      a checkpoint's weights as a Hugging Face folder in that dtype (fp32 master weights rounded)\n"
    "\n"
    "run 'weft <command> --help' for the options of a command.\n";

struct Command {
  const char* name;
  CommandFn run;
};

// The subcommands, in the order the unknown-command message lists them.
constexpr Command kCommands[] = {{"train", cmd_train},     {"prepare", cmd_prepare}, {"eval", cmd_eval},
                                 {"generate", cmd_generate}, {"bench", cmd_bench},     {"plan", cmd_plan},
                                 {"calibrate", cmd_calibrate}, {"report", cmd_report}, {"tune", cmd_tune},
                                 {"export", cmd_export},     {"ensemble", cmd_ensemble}};

// Runs the subcommand that argv[1] names; the usage for none or --help, exit 2 for an unknown one.
int run_command(CLI::App& app, int argc, char** argv, Communicator& world) {
  if (argc < 2) {
    fmt::print(stderr, "{}", kUsage);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    fmt::print("{}", kUsage);
    return 0;
  }
  std::string names;
  for (const Command& c : kCommands) {
    if (cmd == c.name) {
      app.name("weft " + cmd);
      return c.run(app, argc, argv, world);
    }
    names += names.empty() ? c.name : fmt::format(", {}", c.name);
  }
  fmt::print(stderr, "weft: unknown command '{}' (commands: {}; see weft --help)\n", cmd, names);
  return 2;
}

// What the weft library does not add by itself: the CUDA backend and the NCCL communicator
// (weft_cuda, in a build with -DWEFT_CUDA=ON).
void register_extra_backends() {
#if WEFT_HAVE_CUDA
  register_backend("cuda", [] { return std::unique_ptr<Backend>(cuda::make_cuda_backend()); });
  register_nccl_device_comm();
#endif
}

// "PATH: reason" (and " (with PATH2)") for a std::filesystem error.
std::string filesystem_message(const std::filesystem::filesystem_error& e) {
  std::string m = e.path1().empty() ? std::string("a path") : e.path1().string();
  if (!e.path2().empty()) m += fmt::format(" (and {})", e.path2().string());
  std::string reason = e.code().message();
  if (!reason.empty()) reason[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(reason[0])));
  return fmt::format("{}: {}", m, reason);
}

// Whether a filesystem error is about the path the user gave (exit 2) rather than the machine.
bool path_is_input(const std::error_code& c) {
  switch (c.value()) {
    case ELOOP: case ENOENT: case ENOTDIR: case ENAMETOOLONG: case EACCES: case EPERM: case EISDIR: case EEXIST:
      return c.category() == std::generic_category() || c.category() == std::system_category();
    default:
      return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  keep_large_buffers_mapped();  // before anything allocates (core/memory.h)
  CLI::App app{"weft"};
  register_extra_backends();
  // Under mpirun/srun every rank runs this; otherwise a single process that never touches MPI.
  std::unique_ptr<Communicator> world;
  try {
    world = make_world_communicator(&argc, &argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "weft: cannot start the process group: {}\n", e.what());
    return 1;
  }
  // Every error ends here. On several ranks, an error that every rank hits (a bad config) ends
  // the job with one line and its exit code; one rank's failure stops every rank (no hang):
  // see end_job_on_error.
  auto fail = [&](std::string msg, int code) -> int {
    // Library messages that already name weft ("weft: CUDA error at ...") are not prefixed twice.
    for (const std::string lead : {"error: weft: ", "weft: "})
      if (msg.rfind(lead, 0) == 0) msg = (lead[0] == 'e' ? "error: " : "") + msg.substr(lead.size());
    end_job_on_error(msg, code);
  };
  try {
    return run_command(app, argc, argv, *world);
  } catch (const CLI::ParseError& e) {
    // --help prints the options and exits 0; a bad option is bad input (exit 2).
    // On several ranks every rank parses the same arguments: rank 0 alone prints.
    std::ostringstream quiet;
    const int rc = world->rank() == 0 ? app.exit(e) : app.exit(e, quiet, quiet);
    return rc == 0 ? 0 : 2;
  } catch (const InputError& e) {
    return fail(e.what(), 2);
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the library could not follow (a symbolic link loop, a missing folder, no
    // permission): one line naming the path and the reason, never the library's raw text.
    return fail(filesystem_message(e), path_is_input(e.code()) ? 2 : 1);
  } catch (const CommTimeout& e) {
    return fail(e.what(), 1);
  } catch (const std::exception& e) {
    return fail(fmt::format("error: {}", e.what()), 1);
  }
}
