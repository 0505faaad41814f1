// What several `weft` subcommands share: options spelled alike everywhere, and the model that
// a --checkpoint argument names.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "comm/communicator.h"
#include "engine/engine.h"
#include "train/config.h"

namespace weft {

// --checkpoint DIR (required): a checkpoint folder, or a run folder (its newest checkpoint).
void add_checkpoint_option(CLI::App& app, std::string& checkpoint);
// --threads N (0: all cores).
void add_threads_option(CLI::App& app, int64_t& threads);
// InputError unless 0 <= threads <= the limit of the config key `threads` (train/config.h).
void check_threads_option(int64_t threads);
// --format text|json.
void add_format_option(CLI::App& app, std::string& format);
// --backend NAME: a backend of backend/registry.h (cpu, cpu-guarded, cuda in a CUDA build).
void add_backend_option(CLI::App& app, std::string& backend);
// --comm NAME: how device buffers move between ranks (comm/device_comm_registry.h): mpi, nccl
// in a CUDA build; "" (the default): nccl for cuda, mpi otherwise.
void add_comm_option(CLI::App& app, std::string& comm);

// An output file given by `option` (e.g. --out): InputError unless its path is not a folder
// and a file can be created in its folder (or, when that does not exist yet, in its nearest
// existing ancestor, which must be a folder): tried for real by creating and removing a file
// there (root passes access() on read-only mounts). Checked before the work whose result it
// will hold.
void check_output_file(const std::string& path, const std::string& option);

// A config override on the command line, as `weft train` takes them: args[i] is `--key value`,
// `--key=value` or a bare boolean `--key` (moves i onto its value when that is the next
// argument); dashes in the key become underscores. InputError for a key without its value.
std::pair<std::string, std::string> parse_override(const std::vector<std::string>& args, size_t& i);
// "--set key=value" (weft tune, weft ensemble): the same override in one argument.
std::pair<std::string, std::string> parse_set(const std::string& kv);
// Writes `text` to `path` whole or not at all: its folder made if missing, a temporary file
// beside it, then a rename (an existing file is never left half-written). RuntimeError naming
// the path and the reason.
void write_output_file(const std::string& path, const std::string& text);

// The checkpoint folder a --checkpoint argument names: a run folder means its newest checkpoint.
std::string checkpoint_dir_arg(const std::string& path);

// The layout options of the commands that run a model on the engine (bench, eval, generate):
// --tp, --pp, --dp, --dp-shard, --dp-replicate, --zero, --schedule, --virtual-stages,
// --sequence-parallel, --micro-batch, --recompute, --order. Launched like `weft train`
// (mpirun -np tp*pp*dp).
// The layout's command-line binding (bench, eval, generate): one option per key of the
// layout's TOML binding (train/run_layout.h run_layout_keys), spelt as `weft train` takes it
// (--micro-batch or --micro_batch, --zero.quantized-weights, --compression.dp int4; true/false
// keys as bare flags) and set through the same parser as a config file, into the layout keys
// of a RunConfig. The command's defaults: layout_defaults() (micro_batch 0: one micro-batch
// per replica).
RunConfig layout_defaults();
void add_layout_options(CLI::App& app, RunConfig& layout);
// The sizes of the layout: each within its range and an int (InputError naming the option and
// the value); the layout rules check the rest when the engine config is made.
void check_layout_options(const RunConfig& o);

// What a command's engine runs: the model, sequence length T, `batch` sequences per step over
// every data-parallel replica (per replica with per_replica), precision and head chunk.
struct EngineRequest {
  ModelConfig model;
  int64_t seq = 0;
  int64_t batch = 1;
  bool per_replica = false;
  std::string precision = "fp32";
  std::string matmul = "exact", fp32_kernel;  // the model's products (RunConfig's [precision])
  int64_t head_chunk = 0;
  bool training = true;
};
// The engine's configuration, checked by the layout rules (InputError naming the values).
EngineConfig layout_engine_config(const RunConfig& o, const EngineRequest& r, int world_size);

// An engine with its backend: the one backend/registry.h's make_backend(backend_name) gives,
// its device buffers moved between ranks by the communicator `comm` ("": the backend's
// default). InputError naming the known values for an unknown backend or communicator, or a
// communicator the backend does not take, before anything is created.
struct EngineRun {
  EngineRun(const EngineConfig& cfg, Communicator& world, const std::string& backend_name = "cpu",
            const std::string& comm = "");
  EngineConfig config;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
};
// Loads the parameters of the checkpoint folder `dir` into `engine` (every rank). A
// non-finite parameter is a RuntimeError naming the checkpoint, the tensor and the element:
// eval and generate would otherwise report a NaN loss or sample garbage with exit code 0.
void load_checkpoint_into(Engine& engine, const std::string& dir);

}  // namespace weft
