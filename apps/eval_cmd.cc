// `weft eval`: the mean loss of a GPT checkpoint over consecutive windows of a token shard, or the
// forecast scores of a ClimaX checkpoint on a weather folder (eval_weather.h), as the
// checkpoint's config.json says.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "eval_graphs.h"
#include "eval_weather.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/token_batch.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "train/trainer.h"

namespace weft {

namespace {

// The options given on the command line among `names`, as "--a, --b".
std::string given(const CLI::App& app, const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (app.count(n) > 0) out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

// The largest --logits file: windows x T x V floats beyond this are refused (a typo, not a check).
constexpr int64_t kMaxLogitsBytes = int64_t{4} << 30;

// weft eval --logits: the logits of every position of windows [0, windows) (the same windows the
// loss is taken over), written by rank 0 as a safetensors file: "logits" F32 (windows, T, V) and
// "input_ids" I32 (windows, T), so another implementation can be compared on the same tokens.
void write_window_logits(Engine& engine, const TokenDataset& ds, int64_t windows, int64_t T, const std::string& path,
                         const std::string& ckpt, bool rank0) {
  const int64_t V = engine.config().model.vocab_size;
  const int64_t bytes = windows * T * V * static_cast<int64_t>(sizeof(float));
  if (bytes > kMaxLogitsBytes) {
    throw_input("--logits {}: {} windows x {} positions x {} logits are {} bytes, above the limit of {}; pass "
                "--windows N with fewer windows",
                path, windows, T, V, bytes, kMaxLogitsBytes);
  }
  std::vector<float> logits(static_cast<size_t>(windows * T * V));
  std::vector<int32_t> ids(static_cast<size_t>(windows * T)), targets(static_cast<size_t>(T));
  engine.begin_generation();
  for (int64_t w = 0; w < windows; ++w) {
    ds.window(w, static_cast<int>(T), ids.data() + w * T, targets.data());
    engine.logits(ids.data() + w * T, T, 0, logits.data() + w * T * V);
  }
  if (!rank0) return;
  write_safetensors(path,
                    {{"logits", StDType::kF32, {windows, T, V}, logits.data()},
                     {"input_ids", StDType::kI32, {windows, T}, ids.data()}},
                    {{"format", "pt"}, {"checkpoint", ckpt}, {"producer", "weft eval --logits"}});
}

}  // namespace

// GPT: runs in any layout (mpirun -np tp*pp*dp weft eval --tp .. --pp ..): the windows are dealt
// round-robin over the data-parallel replicas, `--batch` windows per forward pass of each.
// ClimaX: one process (eval_weather.h).
int cmd_eval(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::string ckpt, data, format = "text", backend = "cpu", comm, logits_out;
  int64_t windows = 0, batch = 8, threads = 0;
  RunConfig layout = layout_defaults();
  WeatherEvalOptions wx;
  add_checkpoint_option(app, ckpt);
  app.add_option("--data", data,
                 "GPT: token shard (.bin), or a folder/glob (its *val* shards); ClimaX: a weather folder (train.nc, "
                 "val.nc, test.nc, stats.json); graph networks: a prepared graph dataset (manifest.json)")
      ->required();
  app.add_option("--windows", windows, "GPT: number of windows (0: all)");
  app.add_option("--logits", logits_out,
                 "GPT: also write the logits of every position of the windows scored (F32 windows x T x V) and their "
                 "input ids to this safetensors file");
  app.add_option("--batch", batch, "windows (GPT) or forecasts (ClimaX) per forward pass");
  add_threads_option(app, threads);
  add_backend_option(app, backend);
  add_comm_option(app, comm);
  add_format_option(app, format);
  add_layout_options(app, layout);
  app.add_option("--split", wx.split, "ClimaX: the split scored, test or val");
  app.add_option("--lead-hours", wx.lead_hours, "ClimaX: forecast lead times in hours (6, or a list: 6,24)")
      ->delimiter(',');
  app.add_option("--samples", wx.samples, "ClimaX: start times scored (0: all)");
  app.add_option("--stride", wx.stride, "ClimaX: time steps between start times");
  app.add_option("--stats", wx.stats, "ClimaX: normalisation stats.json (default: DATA/stats.json)");
  app.add_option("--variables", wx.variables,
                 "ClimaX: comma-separated fields in model order (default: the training run's, else the file's)");
  app.add_option("--out", wx.out_json, "ClimaX: also write the scores to this JSON file");
  std::string parity_png;
  app.add_option("--parity", parity_png, "graph networks: draw predicted against true energies and forces into this PNG");
  app.add_option("--map", wx.map_png, "ClimaX: draw one forecast beside its truth into this PNG");
  app.add_option("--map-var", wx.map_var, "ClimaX: the map's variable (default: the first)");
  app.add_option("--map-sample", wx.map_sample, "ClimaX: the map's start time, an index into those scored");
  app.add_option("--map-lead", wx.map_lead, "ClimaX: the map's lead time in hours (default: the first)");
  app.parse(argc - 1, argv + 1);
  check_threads_option(threads);
  check_layout_options(layout);
  set_threads(threads);
  const std::string dir = checkpoint_dir_arg(ckpt);
  const ModelConfig mc = load_checkpoint_config(dir);
  // Scored by what the model reads: graphs (energy and force errors), weather fields (forecast
  // scores), or token shards (loss).
  if (std::string_view(mc.capabilities().data_source) == "graphs") {
    const std::string other = given(app, {"--windows", "--logits", "--lead-hours", "--stride", "--stats", "--variables",
                                          "--map", "--map-var", "--map-sample", "--map-lead"});
    if (!other.empty()) {
      throw_input("{}: not options of a graph network; {} is model '{}' (scored on a graph dataset)", other, dir,
                  mc.name);
    }
    GraphEvalOptions go;
    go.data = data;
    if (app.count("--split") > 0) go.split = wx.split;
    go.samples = wx.samples;
    go.batch = batch;
    go.out_json = wx.out_json;
    go.parity_png = parity_png;
    go.backend = backend;
    go.comm = comm;
    go.layout = layout;
    go.format = format;
    return eval_graph_checkpoint(dir, mc, go, world);
  }
  if (!parity_png.empty()) throw_input("--parity: an option of graph-network checkpoints; {} is model '{}'", dir, mc.name);
  if (std::string_view(mc.capabilities().data_source) == "fields") {
    const std::string gpt_only = given(app, {"--windows", "--logits"});
    if (!gpt_only.empty()) {
      throw_input("{}: options of a GPT checkpoint; {} is a ClimaX model '{}' (scored on weather fields)", gpt_only,
                  dir, mc.name);
    }
    wx.layout = layout;
    wx.comm = comm;
    wx.data = data;
    wx.batch = batch;
    wx.backend = backend;
    wx.format = format;
    return eval_weather_checkpoint(dir, mc, wx, world);
  }
  const std::string weather_only = given(app, {"--split", "--lead-hours", "--samples", "--stride", "--stats",
                                               "--variables", "--out", "--map", "--map-var", "--map-sample",
                                               "--map-lead"});
  if (!weather_only.empty()) {
    throw_input("{}: options of a ClimaX checkpoint; {} is a GPT model '{}' (scored on token shards)", weather_only, dir,
                mc.name);
  }
  if (looks_like_weather_data(data)) {
    throw_input("--data {} holds weather fields (NetCDF), but checkpoint {} is a GPT model '{}' that reads token "
                "shards (weft prepare --input ... --out DIR)",
                data, dir, mc.name);
  }
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
  const double loss = run.engine->evaluate_rows(token_windows(ds, T), std::min(ds.num_windows(T), windows));
  if (!std::isfinite(loss)) {
    throw_runtime("eval: the mean loss of {} over {} windows of {} is {}, not a number: the model's outputs "
                  "overflow on this data",
                  dir, windows, data, loss);
  }
  if (!logits_out.empty()) write_window_logits(*run.engine, ds, windows, T, logits_out, dir, world.rank() == 0);
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
