// The weft command line: train, prepare, eval, generate, bench.
// Errors: InputError -> one line on stderr, exit 2; any other failure -> exit 1.
#include <cblas.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "comm/world.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "train/config.h"
#include "train/sample.h"
#include "train/trainer.h"
#include "plan_cmd.h"
#if WEFT_HAVE_CUDA
#include "model/cuda/gpt_cuda.h"
#endif

namespace fs = std::filesystem;
using namespace weft;

namespace {

// Step s's random tokens and targets of a benchmark (the same on every backend).
void bench_tokens(int64_t s, int vocab, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
  for (size_t i = 0; i < in.size(); ++i) {
    auto r = Philox::draw(1337, kRngStreamBench + s, i);
    in[i] = static_cast<int32_t>(r[0] % vocab);
    tg[i] = static_cast<int32_t>(r[1] % vocab);
  }
}

const char* kUsage =
    "usage: weft <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG.toml [--key value ...] [--resume [DIR]] [--overwrite]\n"
    "                      train a model; every config key can be overridden (--steps 100, --lr 3e-4, --out runs/x)\n"
    "  prepare --input PATH [PATH ...] --out DIR\n"
    "                      tokenize text files, folders or JSONL into llm.c-format token shards\n"
    "  eval --checkpoint DIR --data SHARD [--windows N] [--format json]\n"
    "                      mean loss over consecutive windows of a token shard\n"
    "  generate --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]\n"
    "                      sample text from a checkpoint (a run folder uses its newest checkpoint)\n"
    "  bench --model PRESET [--batch B] [--seq T] [--threads N] [--steps S] [--format json]\n"
    "        [--backend cpu|cuda] [--precision fp32|bf16] [--peak-tflops F] [--matmul-only]\n"
    "                      time training steps on random tokens (cuda: one GPU, MFU against F and the measured bf16 GEMM rate)\n"
    "  plan --model PRESET --system systems/NAME.toml --gpus N --global-batch B [--tp ..] [--top N] [--scaling]\n"
    "                      predict memory and step time of layouts and rank them\n"
    "  calibrate [--out systems/local.toml]\n"
    "                      measure this machine (sgemm, memory, MPI links) and write a system file\n"
    "\n"
    "run 'weft <command> --help' for the options of a command.\n";

// `weft train CONFIG [--key value | --key=value]... [--resume [DIR]] [--overwrite]`
int cmd_train(const std::vector<std::string>& args, Communicator& world) {
  std::string config_path;
  std::vector<std::pair<std::string, std::string>> overrides;
  TrainOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      fmt::print("usage: weft train CONFIG.toml [--key value ...] [--resume [CHECKPOINT]] [--overwrite]\n\nconfig keys (each also a --option):\n");
      for (const auto& k : run_config_keys()) fmt::print("  {}\n", k);
      return 0;
    }
    if (a == "--resume") {
      opt.resume = true;
      if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0 && !config_path.empty()) opt.resume_from = args[++i];
      continue;
    }
    if (a == "--overwrite") {
      opt.overwrite = true;
      continue;
    }
    if (a.rfind("--", 0) == 0) {
      std::string key = a.substr(2), value;
      auto eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      }
      std::replace(key.begin(), key.end(), '-', '_');  // --sequence-parallel = --sequence_parallel
      if (eq == std::string::npos) {
        if (run_config_key_is_bool(key) && (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)) {
          value = "true";  // a bare flag
        } else {
          if (i + 1 >= args.size()) throw_input("option --{} needs a value", key);
          value = args[++i];
        }
      }
      overrides.emplace_back(key, value);
      continue;
    }
    if (!config_path.empty()) throw_input("unexpected argument '{}' (the config is {})", a, config_path);
    config_path = a;
  }
  if (config_path.empty()) throw_input("weft train: missing CONFIG.toml (usage: weft train CONFIG.toml [--key value ...])");
  if (!fs::exists(config_path)) throw_input("config file {} does not exist", config_path);
  if (opt.resume && opt.overwrite) throw_input("--resume and --overwrite exclude each other");
  RunConfig cfg = load_run_config(config_path, overrides);
  opt.config_path = config_path;
  train(cfg, opt, world);
  return 0;
}

int cmd_prepare(std::vector<std::string> inputs, std::string out, std::string tokenizer, double val_fraction,
                int64_t shard_tokens, int64_t seed, bool overwrite) {
  PrepareOptions o;
  // Re-running the same preparation is idempotent: shards that weft prepared from the same
  // inputs are replaced without --overwrite; anything else in the folder is protected.
  const fs::path meta = fs::path(out) / "meta.json";
  if (!overwrite && fs::exists(meta)) {
    try {
      auto j = nlohmann::json::parse(std::ifstream(meta));
      overwrite = j.value("inputs", std::vector<std::string>{}) == inputs && j.value("seed", int64_t{-1}) == seed &&
                  j.value("val_fraction", -1.0) == val_fraction && j.value("shard_tokens", int64_t{-1}) == shard_tokens;
    } catch (const std::exception&) {
      overwrite = false;
    }
  }
  o.overwrite = overwrite;
  o.inputs = std::move(inputs);
  o.out_dir = std::move(out);
  o.tokenizer_dir = std::move(tokenizer);
  o.val_fraction = val_fraction;
  o.shard_tokens = shard_tokens;
  o.seed = static_cast<uint64_t>(seed);
  prepare_corpus(o);
  return 0;
}

std::string checkpoint_dir_arg(const std::string& path) {
  // A run folder means its newest checkpoint.
  if (fs::exists(fs::path(path) / kCheckpointConfigFile)) return path;
  std::string latest = find_latest_checkpoint(path);
  if (!latest.empty()) return latest;
  return resolve_checkpoint_dir(path);
}


// `weft bench --backend cuda`: training steps of GptCuda (model/cuda/gpt_cuda.h) on random
// tokens, everything on one GPU. MFU is stated twice: against the card's data-sheet peak
// (--peak-tflops, default H100 SXM bf16 dense) and against the bf16 GEMM rate measured here
// through cuBLASLt at gemm_n^3 (what a perfect model could reach with these libraries).
// --matmul-only measures and prints only that rate.
int bench_cuda(const ModelConfig& mc, const std::string& model_name, int64_t batch, int64_t seq, int64_t steps,
               int64_t warmup, const std::string& precision, double peak_tflops, bool matmul_only, int64_t gemm_n,
               bool measure_gemm, bool graphs, const std::string& format) {
#if WEFT_HAVE_CUDA
  using namespace weft::cuda;
  const Precision prec = parse_precision(precision);
  if (matmul_only) {
    auto be = make_cuda_backend();
    const double r = measure_bf16_gemm_flops(*be, gemm_n, 20);
    nlohmann::json j = {{"impl", "weft-cuda"}, {"case", "bf16_gemm"}, {"device", gpu::device_name(be->device())},
                        {"n", gemm_n}, {"gemm_flops_per_s", r}, {"fraction_of_peak", r / (peak_tflops * 1e12)},
                        {"peak_tflops", peak_tflops}};
    if (format == "json") {
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("{}: cuBLASLt bf16 GEMM {}^3: {:.1f} TFLOP/s ({:.0f}% of the {:.0f} TFLOP/s peak)\n",
                 j["device"].get<std::string>(), gemm_n, r / 1e12, 100.0 * r / (peak_tflops * 1e12), peak_tflops);
    }
    return 0;
  }
  GptCuda model(mc, prec, 1337);
  model.set_use_graphs(graphs);
  model.reserve(batch, seq);
  const float scale = 1.0f / static_cast<float>(batch * seq);
  std::vector<int32_t> in(batch * seq), tg(batch * seq);
  std::vector<double> times;
  float loss_first = 0.0f, loss_last = 0.0f;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    bench_tokens(s, mc.vocab_size, in, tg);
    auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    const float loss = model.forward_backward(in.data(), tg.data(), batch, seq, scale);
    const double norm = std::sqrt(model.grad_norm_sq());
    model.adamw_step(1e-4f, s + 1, clip_coefficient(norm, 1.0), 0.9f, 0.95f, 1e-8f, 0.1f);
    model.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s == 0) loss_first = loss;
    loss_last = loss;
    if (s >= warmup) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  const double tps = static_cast<double>(batch * seq) / med;
  const double mflops = tps * GPT::train_flops_per_token(mc, seq);
  const double peak = peak_tflops * 1e12;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  nlohmann::json j = {{"impl", "weft-cuda"}, {"model", model_name}, {"batch", batch}, {"seq", seq},
                      {"precision", precision_name(prec)}, {"device", gpu::device_name(model.backend().device())},
                      {"cuda_graphs", model.graph_active()}, {"steps", steps}, {"warmup", warmup},
                      {"ms_per_step", med * 1e3}, {"ms_per_step_min", times.front() * 1e3},
                      {"ms_per_step_max", times.back() * 1e3}, {"tokens_per_s", tps},
                      {"model_flops_per_token", GPT::train_flops_per_token(mc, seq)}, {"model_flops_per_s", mflops},
                      {"peak_tflops", peak_tflops}, {"mfu_peak", mflops / peak}, {"loss_first", loss_first},
                      {"loss_last", loss_last},
                      {"device_gib", {{"params", model.param_bytes() / gib}, {"grads", model.grad_bytes() / gib},
                                      {"optimizer", model.optimizer_bytes() / gib},
                                      {"activations", model.activation_bytes() / gib},
                                      {"tracked_peak", memory_tracker().snapshot().total_peak / gib}}}};
  if (measure_gemm) {
    const double g = measure_bf16_gemm_flops(model.backend(), gemm_n, 20);
    j["gemm_n"] = gemm_n;
    j["gemm_flops_per_s"] = g;
    j["mfu_gemm"] = mflops / g;
  }
  if (format == "json") {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{} {} batch {} seq {} on {}: {:.2f} ms/step, {:.0f} tokens/s, {:.1f} TFLOP/s model FLOPs, MFU {:.1f}% of "
               "{:.0f} TFLOP/s", model_name, precision_name(prec), batch, seq, j["device"].get<std::string>(), med * 1e3,
               tps, mflops / 1e12, 100.0 * mflops / peak, peak_tflops);
    if (j.contains("mfu_gemm")) {
      fmt::print(", {:.1f}% of the measured bf16 GEMM rate {:.1f} TFLOP/s", 100.0 * j["mfu_gemm"].get<double>(),
                 j["gemm_flops_per_s"].get<double>() / 1e12);
    }
    fmt::print("\n");
  }
  return 0;
#else
  (void)mc, (void)model_name, (void)batch, (void)seq, (void)steps, (void)warmup, (void)precision, (void)peak_tflops;
  (void)matmul_only, (void)gemm_n, (void)measure_gemm, (void)graphs, (void)format;
  throw_input("this weft was built without CUDA (-DWEFT_CUDA=ON)");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft"};
  // Under mpirun/srun every rank runs this; otherwise a single process that never touches MPI.
  std::unique_ptr<Communicator> world;
  try {
    world = make_world_communicator(&argc, &argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "weft: cannot start the process group: {}\n", e.what());
    return 1;
  }
  const bool multi = world->size() > 1;
  // On several ranks a failure must stop every rank (no hang). Rank 0 reports; the others wait
  // a moment first, so that an error every rank hits (a bad config) is printed once.
  auto fail = [&](const std::string& msg, int code) -> int {
    if (!multi) {
      fmt::print(stderr, "weft: {}\n", msg);
      return code;
    }
    if (world->rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    abort_job(msg, code);
  };
  try {
    if (argc < 2) {
      fmt::print(stderr, "{}", kUsage);
      return 2;
    }
    const std::string cmd = argv[1];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (cmd == "train") return cmd_train(std::vector<std::string>(argv + 2, argv + argc), *world);

    app.name("weft " + cmd);
    int rc = 0;
    if (cmd == "plan") return cmd_plan(app, argc, argv);
    if (cmd == "calibrate") return cmd_calibrate(app, argc, argv, *world);
    if (cmd == "prepare") {
      std::vector<std::string> inputs;
      std::string out, tokenizer;
      double val_fraction = 0.02;
      int64_t shard_tokens = 100'000'000, seed = 1337;
      bool overwrite = false;
      app.add_option("--input", inputs, "text files, folders of them, or JSONL files with a \"text\" field")->required();
      app.add_option("--out", out, "output folder for the shards")->required();
      app.add_option("--tokenizer", tokenizer, "folder with GPT-2's encoder.json + vocab.bpe (default: installed by setup.sh)");
      app.add_option("--val-fraction", val_fraction, "fraction of documents held out for validation");
      app.add_option("--shard-tokens", shard_tokens, "tokens per shard file");
      app.add_option("--seed", seed, "seed of the train/validation split");
      app.add_flag("--overwrite", overwrite, "replace the shards of an earlier preparation in --out");
      app.parse(argc - 1, argv + 1);
      rc = cmd_prepare(inputs, out, tokenizer, val_fraction, shard_tokens, seed, overwrite);
    } else if (cmd == "eval") {
      std::string ckpt, data, format = "text";
      int64_t windows = 0, batch = 8, threads = 0;
      app.add_option("--checkpoint", ckpt, "checkpoint folder (or run folder: its newest checkpoint)")->required();
      app.add_option("--data", data, "token shard (.bin), or a folder/glob (its *val* shards)")->required();
      app.add_option("--windows", windows, "number of windows (0: all)");
      app.add_option("--batch", batch, "windows per forward pass");
      app.add_option("--threads", threads, "threads (0: all cores)");
      app.add_option("--format", format, "text or json")->check(CLI::IsMember({"text", "json"}));
      app.parse(argc - 1, argv + 1);
      set_threads(threads);
      const std::string dir = checkpoint_dir_arg(ckpt);
      ModelConfig mc = load_checkpoint_config(dir);
      auto be = make_cpu_backend();
      GPT model(mc, *be);
      load_checkpoint_params(dir, model.layout(), model.params());
      TokenDataset ds = TokenDataset::open_split(data, "val");  // a .bin file is taken as is
      const int64_t T = mc.n_ctx;
      const int64_t avail = ds.num_windows(T);
      if (avail <= 0) throw_input("{}: {} tokens, fewer than one window of {}+1", data, ds.size(), T);
      if (windows < 0 || windows > avail) throw_input("--windows {}: {} holds {} windows of {} tokens", windows, data, avail, T);
      if (windows == 0) windows = avail;
      if (batch <= 0) throw_input("--batch must be positive, got {}", batch);
      batch = std::min(batch, windows);
      model.reserve(batch, T, false);
      std::vector<int32_t> in(batch * T), tg(batch * T);
      double sum = 0.0;
      for (int64_t w0 = 0; w0 < windows; w0 += batch) {
        const int64_t nb = std::min(batch, windows - w0);
        for (int64_t i = 0; i < nb; ++i) ds.window(w0 + i, static_cast<int>(T), in.data() + i * T, tg.data() + i * T);
        sum += static_cast<double>(model.forward_loss(in.data(), tg.data(), nb, T)) * nb * T;
      }
      const int64_t tokens = windows * T;
      const double loss = sum / static_cast<double>(tokens);
      if (format == "json") {
        fmt::print("{}\n", nlohmann::json{{"loss", loss}, {"tokens", tokens}, {"windows", windows}, {"checkpoint", dir}}.dump());
      } else {
        fmt::print("loss {:.6f} over {} tokens ({} windows of {}) from {}\n", loss, tokens, windows, T, dir);
      }
    } else if (cmd == "generate") {
      std::string ckpt, prompt, tokenizer;
      int64_t tokens = 128, top_k = 40, seed = 1337, threads = 0;
      double temperature = 1.0;
      app.add_option("--checkpoint", ckpt, "checkpoint folder (or run folder: its newest checkpoint)")->required();
      app.add_option("--prompt", prompt, "text to continue (default: start of a document)");
      app.add_option("--tokens", tokens, "tokens to generate");
      app.add_option("--temperature", temperature, "sampling temperature (> 0)");
      app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)");
      app.add_option("--seed", seed, "sampling seed");
      app.add_option("--threads", threads, "threads (0: all cores)");
      app.add_option("--tokenizer", tokenizer, "folder with GPT-2's tokenizer files");
      app.parse(argc - 1, argv + 1);
      if (tokens < 0) throw_input("--tokens must be >= 0, got {}", tokens);
      if (!(temperature > 0)) throw_input("--temperature must be positive, got {}", temperature);
      if (top_k < 0) throw_input("--top-k must be >= 0, got {}", top_k);
      set_threads(threads);
      const std::string dir = checkpoint_dir_arg(ckpt);
      Tokenizer tok = Tokenizer::load_gpt2(tokenizer);
      ModelConfig mc = load_checkpoint_config(dir);
      auto be = make_cpu_backend();
      GPT model(mc, *be);
      load_checkpoint_params(dir, model.layout(), model.params());
      std::vector<int32_t> ids = {tok.eot_token()};
      tok.encode_append(prompt, ids);
      SampleOptions so;
      so.max_tokens = tokens;
      so.temperature = temperature;
      so.top_k = top_k;
      so.seed = static_cast<uint64_t>(seed);
      fmt::print("{}", prompt);
      std::fflush(stdout);
      // Print as tokens arrive; hold back bytes of an unfinished UTF-8 character.
      std::vector<int32_t> pending;
      sample_tokens(model, ids, so, [&](int32_t t) {
        pending.push_back(t);
        std::string s = tok.decode(pending);
        size_t cut = s.size();
        int back = 0;
        while (cut > 0 && back < 4 && (static_cast<unsigned char>(s[cut - 1]) & 0xC0) == 0x80) --cut, ++back;
        if (cut > 0 && (static_cast<unsigned char>(s[cut - 1]) & 0x80)) {
          unsigned char lead = static_cast<unsigned char>(s[cut - 1]);
          int need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
          if (need > back) return;  // incomplete character: wait for more tokens
        }
        fmt::print("{}", s);
        std::fflush(stdout);
        pending.clear();
      });
      if (!pending.empty()) fmt::print("{}", tok.decode(pending));
      fmt::print("\n");
    } else if (cmd == "bench") {
      std::string model_name = "tiny", format = "text";
      int64_t batch = 8, seq = 0, threads = 0, steps = 10, warmup = 2, head_chunk = 0;
      bool no_peak = false, matmul_only = false, no_graphs = false;
      std::string backend_name = "cpu", precision = "fp32";
      double peak_tflops = 989.0;
      int64_t gemm_n = 8192;
      app.add_option("--backend", backend_name, "cpu or cuda (one GPU; needs a weft built with -DWEFT_CUDA=ON)")
          ->check(CLI::IsMember({"cpu", "cuda"}));
      app.add_option("--precision", precision, "fp32 or bf16 (cuda; the CPU bench runs fp32)")
          ->check(CLI::IsMember({"fp32", "bf16"}));
      app.add_option("--peak-tflops", peak_tflops, "cuda: the card's peak TFLOP/s for MFU (989: H100 SXM bf16 dense)");
      app.add_flag("--matmul-only", matmul_only, "cuda: only measure the bf16 GEMM rate (cuBLASLt, --gemm-n cubed)");
      app.add_option("--gemm-n", gemm_n, "cuda: size of the square bf16 GEMM that measures the card's rate");
      app.add_flag("--no-graphs", no_graphs, "cuda: run without CUDA graphs");
      app.add_option("--model", model_name, "model preset");
      app.add_option("--batch", batch, "sequences per step");
      app.add_option("--seq", seq, "sequence length (0: the model context)");
      app.add_option("--threads", threads, "threads (0: all cores)");
      app.add_option("--steps", steps, "timed steps");
      app.add_option("--warmup", warmup, "untimed steps first");
      app.add_option("--head-chunk", head_chunk, "rows of logits materialised at once (0: automatic)");
      app.add_flag("--no-peak", no_peak, "skip measuring the machine's sgemm rate (cuda: its bf16 GEMM rate)");
      app.add_option("--format", format, "text or json")->check(CLI::IsMember({"text", "json"}));
      app.parse(argc - 1, argv + 1);
      ModelConfig mc = model_preset(model_name);
      if (seq == 0) seq = mc.n_ctx;
      if (batch <= 0 || seq <= 0 || steps <= 0 || warmup < 0) {
        throw_input("--batch {}, --seq {} and --steps {} must be positive, --warmup {} >= 0", batch, seq, steps, warmup);
      }
      if (seq > mc.n_ctx) throw_input("--seq {} is longer than the context of {} ({})", seq, model_name, mc.n_ctx);
      if (backend_name == "cuda" || matmul_only) {
        if (peak_tflops <= 0 || gemm_n <= 0) throw_input("--peak-tflops {} and --gemm-n {} must be positive", peak_tflops, gemm_n);
        return bench_cuda(mc, model_name, batch, seq, steps, warmup, precision, peak_tflops, matmul_only, gemm_n,
                          !no_peak, !no_graphs, format);
      }
      if (precision != "fp32") {
        throw_input("--precision {} applies to --backend cuda; the CPU bench runs fp32", precision);
      }
      const int nthreads = set_threads(threads);
      auto be = make_cpu_backend();
      GPT model(mc, *be);
      model.init(1337);
      model.reserve(batch, seq, true, head_chunk);
      AdamW optim(model.layout(), AdamWConfig{});
      std::vector<int32_t> in(batch * seq), tg(batch * seq);
      const float scale = 1.0f / static_cast<float>(batch * seq);
      std::vector<double> times;
      for (int64_t s = 0; s < warmup + steps; ++s) {
        bench_tokens(s, mc.vocab_size, in, tg);
        auto t0 = std::chrono::steady_clock::now();
        model.zero_grads();
        model.forward_backward(in.data(), tg.data(), batch, seq, scale);
        const double norm = grad_norm(*be, model.grads(), model.num_params());
        optim.step(*be, model.params(), model.grads(), 1e-4f, s + 1, clip_coefficient(norm, 1.0));
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s >= warmup) times.push_back(dt);
      }
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      const double tps = static_cast<double>(batch * seq) / med;
      const double mflops = tps * GPT::train_flops_per_token(mc, seq);
      nlohmann::json j = {{"impl", "weft"}, {"model", model_name}, {"batch", batch}, {"seq", seq},
                          {"threads", nthreads}, {"ms_per_step", med * 1e3}, {"tokens_per_s", tps},
                          {"model_flops_per_s", mflops}};
      if (!no_peak) {
        // The machine's single-precision matrix-product rate: best of 5 square sgemms.
        const int n = 2048;
        Buffer<float> a(n * n), b(n * n), c(n * n);
        for (int i = 0; i < n * n; ++i) a[i] = b[i] = 0.001f * static_cast<float>(i % 1000);
        double best = 1e30;
        for (int r = 0; r < 5; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        const double peak = 2.0 * n * n * static_cast<double>(n) / best;
        j["sgemm_flops_per_s"] = peak;
        j["fraction_of_sgemm"] = mflops / peak;
      }
      if (format == "json") {
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{} batch {} seq {} threads {}: {:.1f} ms/step, {:.0f} tokens/s, {:.1f} GFLOP/s model FLOPs", model_name,
                   batch, seq, nthreads, med * 1e3, tps, mflops / 1e9);
        if (j.contains("fraction_of_sgemm")) {
          fmt::print(" ({:.0f}% of the measured sgemm rate {:.1f} GFLOP/s)", 100.0 * j["fraction_of_sgemm"].get<double>(),
                     j["sgemm_flops_per_s"].get<double>() / 1e9);
        }
        fmt::print("\n");
      }
    } else {
      fmt::print(stderr, "weft: unknown command '{}' (commands: train, prepare, eval, generate, bench, plan, calibrate; see weft --help)\n", cmd);
      return 2;
    }
    return rc;
  } catch (const CLI::ParseError& e) {
    // --help prints the options and exits 0; a bad option is bad input (exit 2).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const InputError& e) {
    return fail(e.what(), 2);
  } catch (const CommTimeout& e) {
    return fail(e.what(), 1);
  } catch (const std::exception& e) {
    return fail(fmt::format("error: {}", e.what()), 1);
  }
}
