// `weft eval`: the mean loss of a checkpoint over consecutive windows of a token shard.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "data/loader.h"
#include "train/trainer.h"

namespace weft {

namespace {

// Mean loss per token over the first `windows` windows of T tokens in `ds`, `batch` windows
// per forward pass.
double mean_loss(GPT& model, const TokenDataset& ds, int64_t windows, int64_t batch, int64_t T) {
  model.reserve(batch, T, false);
  std::vector<int32_t> in(batch * T), tg(batch * T);
  double sum = 0.0;
  for (int64_t w0 = 0; w0 < windows; w0 += batch) {
    const int64_t nb = std::min(batch, windows - w0);
    for (int64_t i = 0; i < nb; ++i) ds.window(w0 + i, static_cast<int>(T), in.data() + i * T, tg.data() + i * T);
    sum += static_cast<double>(model.forward_loss(in.data(), tg.data(), nb, T)) * nb * T;
  }
  return sum / static_cast<double>(windows * T);
}

}  // namespace

int cmd_eval(CLI::App& app, int argc, char** argv, Communicator&) {
  std::string ckpt, data, format = "text";
  int64_t windows = 0, batch = 8, threads = 0;
  add_checkpoint_option(app, ckpt);
  app.add_option("--data", data, "token shard (.bin), or a folder/glob (its *val* shards)")->required();
  app.add_option("--windows", windows, "number of windows (0: all)");
  app.add_option("--batch", batch, "windows per forward pass");
  add_threads_option(app, threads);
  add_format_option(app, format);
  app.parse(argc - 1, argv + 1);
  set_threads(threads);
  const std::string dir = checkpoint_dir_arg(ckpt);
  CheckpointModel m(dir);
  TokenDataset ds = TokenDataset::open_split(data, "val");  // a .bin file is taken as is
  const int64_t T = m.config.n_ctx;
  const int64_t avail = ds.num_windows(T);
  if (avail <= 0) throw_input("{}: {} tokens, fewer than one window of {}+1", data, ds.size(), T);
  if (windows < 0 || windows > avail) throw_input("--windows {}: {} holds {} windows of {} tokens", windows, data, avail, T);
  if (windows == 0) windows = avail;
  if (batch <= 0) throw_input("--batch must be positive, got {}", batch);
  batch = std::min(batch, windows);
  const double loss = mean_loss(m.model, ds, windows, batch, T);
  const int64_t tokens = windows * T;
  if (format == "json") {
    fmt::print("{}\n", nlohmann::json{{"loss", loss}, {"tokens", tokens}, {"windows", windows}, {"checkpoint", dir}}.dump());
  } else {
    fmt::print("loss {:.6f} over {} tokens ({} windows of {}) from {}\n", loss, tokens, windows, T, dir);
  }
  return 0;
}

}  // namespace weft
