// `weft eval`: the mean loss of a GPT checkpoint over consecutive windows of a token shard, its
// in-context-learning accuracy on task files (--tasks, train/icl_eval.h), or the
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
#include "data/icl_tasks.h"
#include "data/tokenizer.h"
#include "train/icl_eval.h"
#include "plan/system.h"
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

// One task's scores as JSON; with `samples`, every item's log-likelihoods option by option
// (lm-evaluation-harness's --log_samples).
nlohmann::json icl_task_json(const IclTask& t, const IclTaskResult& r, bool samples) {
  nlohmann::json j = icl_result_json(r);
  j["path"] = t.path;
  if (!samples) return j;
  nlohmann::json all = nlohmann::json::array();
  size_t at = 0;
  for (int64_t i = 0; i < r.items; ++i) {
    const IclItem& it = t.items[static_cast<size_t>(i)];
    const size_t options = t.kind == IclKind::kLanguageModeling ? 1 : std::max(it.contexts.size(), it.continuations.size());
    nlohmann::json ll = nlohmann::json::array(), greedy = nlohmann::json::array();
    for (size_t o = 0; o < options; ++o, ++at) {
      ll.push_back(r.scores[at].loglikelihood);
      greedy.push_back(r.scores[at].greedy);
    }
    all.push_back({{"item", i}, {"gold", it.gold}, {"loglikelihoods", ll}, {"greedy", greedy}});
  }
  j["samples"] = all;
  return j;
}

// weft eval --tasks: in-context-learning tasks (train/icl_eval.h) on a GPT checkpoint, in the
// layout given (the requests dealt over the dp replicas, one sequence a forward pass).
int eval_icl_tasks(const std::string& dir, const ModelConfig& mc, const std::vector<std::string>& files,
                   const IclOptions& o, const std::string& tokenizer, const std::string& out_json, const RunConfig& layout,
                   const std::string& fp32_kernel, const std::string& backend, const std::string& comm,
                   const std::string& format, Communicator& world) {
  if (!mc.capabilities().generation) {
    throw_input("--tasks: {} holds the {} model '{}', which gives no token logits to score continuations with", dir,
                mc.capabilities().family, mc.name);
  }
  if (o.fewshot < 0) throw_input("--fewshot {}: must be >= 0", o.fewshot);
  if (!out_json.empty()) check_output_file(out_json, "--out");  // before the scoring, not after
  std::vector<IclTask> tasks;
  for (const std::string& f : files) tasks.push_back(load_icl_task(f));  // every file read before any work
  const Tokenizer tok = Tokenizer::load(tokenizer);
  if (tok.vocab_size() > mc.vocab_size) {
    throw_input("--tasks: the tokenizer ({}) has {} tokens, more than model '{}' of {} reads ({})", tok.source(),
                tok.vocab_size(), mc.name, dir, mc.vocab_size);
  }
  const IclEncoder enc{[&tok](std::string_view t) { return tok.encode(t); }, tok.eot_token()};
  EngineRequest req;
  req.model = mc;
  req.seq = mc.n_ctx;
  req.batch = 1;
  req.per_replica = true;
  req.training = false;
  // The fp32 products weft train would run here: the option, else the system file's
  // (systems/local.toml or $WEFT_SYSTEM, as `weft calibrate` measured them), else OpenBLAS.
  req.fp32_kernel = fp32_kernel.empty() ? plan::implicit_fp32_kernel() : fp32_kernel;
  EngineRun run(layout_engine_config(layout, req, world.size()), world, backend, comm);
  load_checkpoint_into(*run.engine, dir);
  nlohmann::json results = nlohmann::json::array();
  for (const IclTask& t : tasks) {
    const IclTaskResult r = evaluate_icl_task(*run.engine, t, enc, o);
    results.push_back(icl_task_json(t, r, !out_json.empty()));
    if (world.rank() == 0 && format != "json") {
      fmt::print("{:<24} {:>6} items {:>2}-shot  acc {:.4f} +- {:.4f}{}  ({} requests, {:.1f} s)\n", r.name, r.items,
                 r.fewshot, r.acc, r.acc_stderr,
                 r.has_norm ? fmt::format("  acc_norm {:.4f} +- {:.4f}", r.acc_norm, r.acc_norm_stderr) : "",
                 r.requests, r.seconds);
    }
  }
  if (world.rank() != 0) return 0;
  const nlohmann::json doc{{"checkpoint", dir},
                           {"seed", o.seed},
                           {"fp32_kernel", req.fp32_kernel.empty() ? "openblas" : req.fp32_kernel},
                           {"tasks", results}};
  if (format == "json") {
    nlohmann::json brief = doc;
    for (auto& t : brief["tasks"]) t.erase("samples");
    fmt::print("{}\n", brief.dump());
  }
  if (!out_json.empty()) write_output_file(out_json, doc.dump(1) + "\n");
  return 0;
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
  std::vector<std::string> task_files;
  IclOptions icl;
  std::string tokenizer;
  add_checkpoint_option(app, ckpt);
  auto* data_opt = app.add_option("--data", data,
                 "GPT: token shard (.bin), or a folder/glob (its *val* shards); ClimaX: a weather folder (train.nc, "
                 "val.nc, test.nc, stats.json); graph networks: a prepared graph dataset (manifest.json)");
  auto* tasks_opt = app.add_option("--tasks", task_files,
                                   "GPT: in-context-learning task files (JSONL: HellaSwag, LLM Foundry multiple_choice, "
                                   "schema, language_modeling) scored by continuation log-likelihood (acc, acc_norm) "
                                   "instead of --data");
  data_opt->excludes(tasks_opt);
  app.add_option("--fewshot", icl.fewshot, "--tasks: examples before each item (other items of its file)");
  app.add_option("--seed", icl.seed, "--tasks: the seed of the few-shot draw");
  app.add_option("--limit", icl.limit, "--tasks: score the first N items of each file (0: all)");
  app.add_option("--delimiter", icl.target_delimiter,
                 "--tasks: text between a context and its continuation (default one space, as lm-evaluation-harness "
                 "and LLM Foundry; \"\" for data whose continuations carry their own)");
  app.add_option("--fewshot-delimiter", icl.fewshot_delimiter, "--tasks: text after each few-shot example (default a blank line)");
  app.add_option("--tokenizer", tokenizer, "--tasks: a tokenizer.json, or a folder with GPT-2's files or a tokenizer.json (default: GPT-2's vendored files)");
  std::string fp32_kernel;
  app.add_option("--fp32-kernel", fp32_kernel,
                 "--tasks and GPT --data: the cpu backends' fp32 products, openblas or onednn (default: the system "
                 "file's, as weft train; else openblas)");
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
  app.add_option("--out", wx.out_json, "ClimaX and --tasks: also write the scores to this JSON file");
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
  const std::string icl_only = given(app, {"--fewshot", "--seed", "--limit", "--tokenizer", "--delimiter",
                                           "--fewshot-delimiter"});
  if (!task_files.empty()) {
    const std::string other = given(app, {"--windows", "--logits", "--split", "--lead-hours", "--samples", "--stride",
                                          "--stats", "--variables", "--map", "--map-var", "--map-sample", "--map-lead",
                                          "--parity"});
    if (!other.empty()) throw_input("{}: not options of --tasks (in-context-learning evaluation)", other);
    return eval_icl_tasks(dir, mc, task_files, icl, tokenizer, wx.out_json, layout, fp32_kernel, backend, comm, format,
                          world);
  }
  if (!icl_only.empty()) throw_input("{}: options of --tasks (in-context-learning evaluation), which was not given", icl_only);
  if (data.empty()) throw_input("weft eval needs --data (a token shard, weather folder or graph dataset) or --tasks FILE.jsonl...");
  // Scored by what the model reads: graphs (energy and force errors), weather fields (forecast
  // scores), or token shards (loss).
  if (std::string_view(mc.capabilities().data_source) == "graphs") {
    const std::string other = given(app, {"--windows", "--logits", "--lead-hours", "--stride", "--stats", "--variables",
                                          "--map", "--map-var", "--map-sample", "--map-lead", "--fp32-kernel"});
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
    const std::string gpt_only = given(app, {"--windows", "--logits", "--fp32-kernel"});
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
  // The fp32 products weft train would run (the option, else the system file's, else OpenBLAS).
  req.fp32_kernel = fp32_kernel.empty() ? plan::implicit_fp32_kernel() : fp32_kernel;
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
