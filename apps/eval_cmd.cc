// `weft eval`: the mean loss of a checkpoint over consecutive windows of a token shard.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "data/loader.h"
#include "ckpt/checkpoint.h"
#include "train/trainer.h"

namespace weft {

// Runs in any layout (mpirun -np tp*pp*dp weft eval --tp .. --pp ..): the windows are dealt
// round-robin over the data-parallel replicas, `--batch` windows per forward pass of each.
int cmd_eval(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::string ckpt, data, format = "text", backend = "cpu", comm;
  int64_t windows = 0, batch = 8, threads = 0;
  LayoutOptions layout;
  add_checkpoint_option(app, ckpt);
  app.add_option("--data", data, "token shard (.bin), or a folder/glob (its *val* shards)")->required();
  app.add_option("--windows", windows, "number of windows (0: all)");
  app.add_option("--batch", batch, "windows per forward pass");
  add_threads_option(app, threads);
  add_backend_option(app, backend);
  add_comm_option(app, comm);
  add_format_option(app, format);
  add_layout_options(app, layout);
  app.parse(argc - 1, argv + 1);
  check_threads_option(threads);
  check_layout_options(layout);
  set_threads(threads);
  const std::string dir = checkpoint_dir_arg(ckpt);
  const ModelConfig mc = load_checkpoint_config(dir);
  TokenDataset ds = TokenDataset::open_split(data, "val", mc.vocab_size);  // a .bin file is taken as is
  const int64_t T = mc.n_ctx;
  const int64_t avail = ds.num_windows(T);
  if (avail <= 0) throw_input("{}: {} tokens, fewer than one window of {}+1", data, ds.size(), T);
  if (windows < 0 || windows > avail) throw_input("--windows {}: {} holds {} windows of {} tokens", windows, data, avail, T);
  if (windows == 0) windows = avail;
  if (batch <= 0) throw_input("--batch must be positive, got {}", batch);
  batch = std::min(batch, windows);
  EngineRequest req;
  req.model = mc;
  req.seq = T;
  req.batch = batch;
  req.per_replica = true;
  req.training = false;
  EngineRun run(layout_engine_config(layout, req, world.size()), world, backend, comm);
  load_checkpoint_into(*run.engine, dir);
  const double loss = run.engine->evaluate(ds, windows);
  if (!std::isfinite(loss)) {
    throw_runtime("eval: the mean loss of {} over {} windows of {} is {}, not a number: the model's outputs "
                  "overflow on this data",
                  dir, windows, data, loss);
  }
  const int64_t tokens = windows * T;
  if (world.rank() != 0) return 0;
  if (format == "json") {
    fmt::print("{}\n", nlohmann::json{{"loss", loss}, {"tokens", tokens}, {"windows", windows}, {"checkpoint", dir}}.dump());
  } else {
    fmt::print("loss {:.6f} over {} tokens ({} windows of {}) from {}\n", loss, tokens, windows, T, dir);
  }
  return 0;
}

}  // namespace weft
