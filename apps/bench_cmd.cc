// `weft bench`: times training steps on random tokens through the engine, on any backend of
// backend/registry.h (--backend cpu, cpu-guarded, cuda), and states the model FLOP rate
// against the machine's measured matrix-product rate (cuda: the bf16 GEMM rate and the card's
// peak). --matmul-only measures only the CUDA backend's bf16 GEMM rate. --quant times the
// block quantization ops (core/block_quant.h, Backend::quantize_blocks / dequantize_blocks).
// --peer torch runs weft's step and the same GPT in PyTorch 2.x alternately (bench_peer.h).
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <ctime>
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/blas_kernels.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/registry.h"
#include "comm/device_comm_registry.h"
#include "bench_peer.h"
#include "cli_util.h"
#include "train/run_layout.h"
#include "commands.h"
#include "backend/device_buffer.h"
#include "comm/codec.h"
#include "core/block_quant.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/token_batch.h"
#include "model/model.h"
#include "parallel/pp/schedule.h"
#include "plan/gemm_fit.h"
#include "train/trainer.h"  // set_threads
#if WEFT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace weft {

namespace {

struct BenchOptions {
  std::string model_name = "tiny", format = "text";
  int64_t batch = 8, seq = 0, threads = 0, steps = 10, warmup = 2, head_chunk = 0;
  bool no_peak = false, matmul_only = false, no_graphs = false, quant = false, codecs = false;
  int64_t quant_n = int64_t{1} << 24, quant_block = 2048;
  std::string gemm_sweep;
  std::string backend_name = "cpu", precision = "fp32", comm;  // comm "": the backend's default
  std::string matmul = "exact", fp32_kernel;  // the model's products (core/precision.h)
  double peak_tflops = 989.0;
  int64_t gemm_n = 8192;
  RunConfig layout = layout_defaults();  // any layout through the engine
  PeerOptions peer;      // --peer torch: the PyTorch peer alongside (bench_peer.h)
};

void add_bench_options(CLI::App& app, BenchOptions& o) {
  add_backend_option(app, o.backend_name);
  add_comm_option(app, o.comm);
  app.add_option("--precision", o.precision,
                 "fp32 or bf16 (the GPT's layer activations in 16-bit buffers, the rest rounded fp32: docs/precision.md)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--matmul", o.matmul,
                 "the model's products on 16-bit storage: exact (fp32 products of the stored values) or fast (the "
                 "device's native bf16 product: oneDNN on CPUs with AVX512-BF16 or AMX)")
      ->check(CLI::IsMember({"exact", "fast"}));
  app.add_option("--fp32-kernel", o.fp32_kernel, "cpu: the library of fp32 products: openblas (default) or onednn")
      ->check(CLI::IsMember({"openblas", "onednn"}));
  app.add_option("--peak-tflops", o.peak_tflops, "cuda: the card's peak TFLOP/s for MFU (989: H100 SXM bf16 dense)");
  app.add_flag("--matmul-only", o.matmul_only, "cuda: only measure the bf16 GEMM rate (cuBLASLt, --gemm-n cubed)");
  app.add_option("--gemm-n", o.gemm_n, "cuda: size of the square bf16 GEMM that measures the card's rate");
  app.add_option("--gemm-sweep", o.gemm_sweep, "cuda: time cuBLASLt bf16 products over the planner's sweep shapes and write them to this CSV (weft calibrate --gemm-sweep fits them)");
  app.add_flag("--no-graphs", o.no_graphs, "removed (CUDA graphs of the former GptCuda): an error")->group("");
  app.add_option("--model", o.model_name, "model preset");
  app.add_option("--batch", o.batch, "sequences per step");
  app.add_option("--seq", o.seq, "sequence length (0: the model context)");
  add_threads_option(app, o.threads);
  app.add_option("--steps", o.steps, "timed steps");
  app.add_option("--warmup", o.warmup, "untimed steps first");
  app.add_option("--head-chunk", o.head_chunk, "rows of logits materialised at once (0: automatic)");
  app.add_flag("--quant", o.quant, "time block quantization (ZeRO++ wires): quantize and dequantize, int8 and int4, "
               "on --backend; one JSON line per case");
  app.add_flag("--codecs", o.codecs, "time the codecs of compressed collectives (bf16, fp16, int8, int4, zfp, zstd): "
               "encode and decode of --quant-n floats, GB/s per core and wire ratio");
  app.add_option("--quant-n", o.quant_n, "--quant, --codecs: floats per call");
  app.add_option("--quant-block", o.quant_block, "--quant: elements per scale");
  app.add_flag("--no-peak", o.no_peak, "skip measuring the machine's sgemm rate (cuda: its bf16 GEMM rate)");
  add_format_option(app, o.format);
  add_layout_options(app, o.layout);
  add_peer_options(app, o.peer);
}

// Sets --seq 0 to the context of `mc`; InputError unless the step sizes are positive and fit it.
void check_step_sizes(BenchOptions& o, const ModelConfig& mc) {
  if (o.seq == 0) o.seq = mc.n_ctx;
  if (o.batch <= 0 || o.seq <= 0 || o.steps <= 0 || o.warmup < 0) {
    throw_input("--batch {}, --seq {} and --steps {} must be positive, --warmup {} >= 0", o.batch, o.seq, o.steps,
                o.warmup);
  }
  if (o.seq > mc.n_ctx) throw_input("--seq {} is longer than the context of {} ({})", o.seq, o.model_name, mc.n_ctx);
}

// Step s's random tokens and targets of a benchmark (the same on every backend).
void bench_tokens(int64_t s, int vocab, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
  for (size_t i = 0; i < in.size(); ++i) {
    auto r = Philox::draw(1337, kRngStreamBench + s, i);
    in[i] = static_cast<int32_t>(r[0] % vocab);
    tg[i] = static_cast<int32_t>(r[1] % vocab);
  }
}

// Runs warmup + steps training steps, step(s, inputs, targets) on step s's random tokens (B,T);
// returns the seconds of the timed ones, shortest first.
template <class Step>
std::vector<double> time_steps(const BenchOptions& o, int vocab, Step&& step) {
  std::vector<int32_t> in(o.batch * o.seq), tg(o.batch * o.seq);
  std::vector<double> times;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    bench_tokens(s, vocab, in, tg);
    auto t0 = std::chrono::steady_clock::now();
    step(s, in, tg);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  return times;
}

// The median step of sorted step times and the rates it gives.
struct StepRate {
  double median_s = 0;
  double tokens_per_s = 0;
  double model_flops_per_token = 0;
  double model_flops_per_s = 0;
};

StepRate step_rate(const std::vector<double>& sorted_times, const BenchOptions& o, const ModelConfig& mc) {
  StepRate r;
  r.median_s = sorted_times[sorted_times.size() / 2];
  r.tokens_per_s = static_cast<double>(o.batch * o.seq) / r.median_s;
  r.model_flops_per_token = train_flops_per_position(mc, o.seq);
  r.model_flops_per_s = r.tokens_per_s * r.model_flops_per_token;
  return r;
}

// The rate of one square product n^3 (FLOP/s), best of 5 after one untimed call.
double measure_product_flops(const std::function<void(int, const float*, const float*, float*)>& product) {
  const int n = 2048;
  Buffer<float> a(n * n), b(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) a[i] = b[i] = 0.001f * static_cast<float>(i % 1000);
  product(n, a.data(), b.data(), c.data());
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    product(n, a.data(), b.data(), c.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * static_cast<double>(n) / best;
}

// The machine's matrix-product rates on the CPU: OpenBLAS's sgemm, oneDNN's fp32 matmul and,
// where the CPU has a native one, oneDNN's bf16 matmul (fp32 in and out, as the backend's
// fast mode calls it).
void add_cpu_product_rates(nlohmann::json& j) {
  const double sgemm = measure_product_flops([](int n, const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  });
  OnednnGemm dnnl;
  const auto onednn = [&](bool bf16) {
    return measure_product_flops([&](int n, const float* a, const float* b, float* c) {
      dnnl.gemm(bf16, false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    });
  };
  const double f32 = onednn(false);
  j["sgemm_flops_per_s"] = sgemm;
  j["onednn_f32_flops_per_s"] = f32;
  j["best_fp32_product"] = sgemm >= f32 ? "openblas" : "onednn";
  j["best_fp32_flops_per_s"] = std::max(sgemm, f32);
  if (OnednnGemm::native_bf16()) j["onednn_bf16_flops_per_s"] = onednn(true);
}

// The JSON line of a bench: its settings, backend, layout and rates.
nlohmann::json engine_result(const BenchOptions& o, const EngineConfig& ec, int nthreads, int world,
                             const StepRate& r) {
  return {{"impl", "weft"}, {"backend", o.backend_name}, {"model", o.model_name}, {"batch", o.batch},
          {"seq", o.seq}, {"threads", nthreads}, {"precision", o.precision}, {"world", world}, {"tp", ec.layout.tp},
          {"pp", ec.layout.pp}, {"dp", ec.layout.dp}, {"dp_replicate", ec.layout.dp_replicate},
          {"zero", ec.layout.zero}, {"micro_batch", ec.layout.micro_batch},
          {"zeropp", ec.data_parallel.zeropp.active() ? ec.data_parallel.zeropp.describe(ec.layout.dp_shard()) : "off"},
          {"compression", ec.layout.compression.any() ? ec.layout.compression.describe() : "off"},
          {"schedule", schedule_name(ec.layout.schedule)}, {"virtual_stages", ec.layout.virtual_stages},
          {"comm", ec.comm.empty() ? default_device_comm(o.backend_name) : ec.comm},
          {"sequence_parallel", ec.layout.sp()}, {"steps", o.steps}, {"warmup", o.warmup},
          {"ms_per_step", r.median_s * 1e3}, {"tokens_per_s", r.tokens_per_s},
          {"model_flops_per_token", r.model_flops_per_token}, {"model_flops_per_s", r.model_flops_per_s},
          {"blas_core", openblas_get_corename()}, {"blas_config", openblas_get_config()}, {"matmul", o.matmul},
          {"product_kernel", ""}};
}

void print_result(const nlohmann::json& j, const BenchOptions& o, int nthreads, const StepRate& r) {
  if (o.format == "json") {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{} {} batch {} seq {} on {}", o.model_name, o.precision, o.batch, o.seq,
             j.contains("device") ? j["device"].get<std::string>() : o.backend_name);
  if (o.backend_name != "cuda") fmt::print(" threads {}", nthreads);
  const bool tera = r.model_flops_per_s >= 1e12;
  fmt::print(": {:.2f} ms/step, {:.0f} tokens/s, {:.1f} {}FLOP/s model FLOPs", r.median_s * 1e3, r.tokens_per_s,
             r.model_flops_per_s / (tera ? 1e12 : 1e9), tera ? "T" : "G");
  if (j.contains("fraction_of_best_fp32")) {
    fmt::print(" ({:.0f}% of the best fp32 product, {} {:.1f} GFLOP/s)",
               100.0 * j["fraction_of_best_fp32"].get<double>(), j["best_fp32_product"].get<std::string>(),
               j["best_fp32_flops_per_s"].get<double>() / 1e9);
  }
  if (j.contains("mfu_peak")) {
    fmt::print(", MFU {:.1f}% of {:.0f} TFLOP/s", 100.0 * j["mfu_peak"].get<double>(), o.peak_tflops);
  }
  if (j.contains("mfu_gemm")) {
    fmt::print(", {:.1f}% of the measured bf16 GEMM rate {:.1f} TFLOP/s", 100.0 * j["mfu_gemm"].get<double>(),
               j["gemm_flops_per_s"].get<double>() / 1e12);
  }
  fmt::print("\n");
  if (const std::string k = j.value("product_kernel", ""); !k.empty()) fmt::print("products: {}\n", k);
  if (j.contains("sgemm_flops_per_s")) {
    fmt::print("this CPU's products (2048^3): openblas sgemm {:.1f} GFLOP/s, onednn fp32 {:.1f}",
               j["sgemm_flops_per_s"].get<double>() / 1e9, j["onednn_f32_flops_per_s"].get<double>() / 1e9);
    if (j.contains("onednn_bf16_flops_per_s")) {
      fmt::print(", onednn bf16 {:.1f}", j["onednn_bf16_flops_per_s"].get<double>() / 1e9);
    }
    fmt::print(" (oneDNN ISA {})\n", OnednnGemm::cpu_isa());
  }
  if (o.backend_name != "cuda") {
    if (const std::string note = blas_kernel_note(); !note.empty()) fmt::print("note: {}\n", note);
  }
}

#if WEFT_HAVE_CUDA
std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// --gemm-sweep FILE: every shape of plan::gemm_sweep_shapes() timed on this card, as a sweep
// file for `weft calibrate --gemm-sweep`.
int bench_cuda_gemm_sweep(const BenchOptions& o) {
  auto be = cuda::make_cuda_backend();
  plan::GemmSweep sweep;
  sweep.device = gpu::device_name(be->device());
  sweep.date = today_utc();
  for (const plan::GemmShape& g : plan::gemm_sweep_shapes()) {
    const double sec = cuda::time_bf16_gemm(*be, static_cast<int64_t>(g.m), static_cast<int64_t>(g.n),
                                            static_cast<int64_t>(g.k));
    sweep.samples.push_back({g, Precision::kBf16, sec});
    fmt::print("{} x {} x {}: {:.4g} ms, {:.1f} TFLOP/s\n", g.m, g.n, g.k, 1e3 * sec, g.flops() / sec / 1e12);
  }
  write_output_file(o.gemm_sweep, plan::gemm_sweep_csv(sweep));
  fmt::print("wrote {} ({} products on {})\n", o.gemm_sweep, sweep.samples.size(), sweep.device);
  return 0;
}

// --matmul-only: the bf16 GEMM rate of cuBLASLt at gemm_n^3 against the card's peak.
int bench_cuda_matmul(const BenchOptions& o) {
  auto be = cuda::make_cuda_backend();
  const double r = cuda::measure_bf16_gemm_flops(*be, o.gemm_n, 20);
  nlohmann::json j = {{"impl", "weft"}, {"backend", "cuda"}, {"case", "bf16_gemm"},
                      {"device", gpu::device_name(be->device())}, {"n", o.gemm_n}, {"gemm_flops_per_s", r},
                      {"fraction_of_peak", r / (o.peak_tflops * 1e12)}, {"peak_tflops", o.peak_tflops}};
  if (o.format == "json") {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{}: cuBLASLt bf16 GEMM {}^3: {:.1f} TFLOP/s ({:.0f}% of the {:.0f} TFLOP/s peak)\n",
               j["device"].get<std::string>(), o.gemm_n, r / 1e12, 100.0 * r / (o.peak_tflops * 1e12), o.peak_tflops);
  }
  return 0;
}
#endif

// The median seconds of `steps` calls of f after `warmup`, the backend synchronised around each.
template <typename F>
double median_seconds(Backend& be, int64_t warmup, int64_t steps, F&& f) {
  std::vector<double> times;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// --quant, --codecs: checks the sizes, then quant_n standard normal values times `scale` (so
// every block has its own scale; 1e-3 looks like gradients).
std::vector<float> quant_inputs(const BenchOptions& o, float scale) {
  if (o.quant_n <= 0 || o.steps <= 0 || o.warmup < 0) {
    throw_input("--quant-n {} and --steps {} must be positive, --warmup {} >= 0", o.quant_n, o.steps, o.warmup);
  }
  std::vector<float> host(static_cast<size_t>(o.quant_n));
  for (int64_t i = 0; i < o.quant_n; ++i) {
    host[static_cast<size_t>(i)] = scale * Philox::normal(1337, kRngStreamBench + (1ull << 31), static_cast<uint64_t>(i));
  }
  return host;
}

// --quant: quantize_blocks and dequantize_blocks of quant_n floats (random normal, block
// quant_block) on the backend, int8 and int4; the median of --steps calls after --warmup.
// gb_per_s counts the fp32 side (4 n bytes quantized or produced per second); moved_gb_per_s
// adds the wire's bytes. The cpu backends run the serial reference loop (one core), so
// gb_per_s_per_core is gb_per_s over the cores it used (1); cuda states no per-core figure.
int bench_quant(const BenchOptions& o) {
  const QuantSpec q8{8, o.quant_block}, q4{4, o.quant_block};
  check_quant_spec(q8, "--quant-block");
  const int nthreads = set_threads(o.threads);
  std::unique_ptr<Backend> be = make_backend(o.backend_name);
  const int64_t n = o.quant_n;
  DeviceBuffer x = to_device(*be, quant_inputs(o, 1.0f), DType::kF32), out(*be, DType::kF32, n);
  const bool is_cuda = o.backend_name == "cuda";
  const int cores = is_cuda ? 0 : 1;  // the cpu backends' reference is one serial loop
  for (const QuantSpec& q : {q8, q4}) {
    DeviceBuffer wire(*be, DType::kI8, quant_wire_bytes(n, q));
    for (const bool quantize : {true, false}) {
      const double t = median_seconds(*be, o.warmup, o.steps, [&] {
        if (quantize) be->quantize_blocks(wire.raw(), x.data<float>(), n, q, nullptr);
        else be->dequantize_blocks(out.data<float>(), wire.raw(), n, q, false);
      });
      const double fp32_bytes = 4.0 * static_cast<double>(n), wire_bytes = static_cast<double>(wire.bytes());
      nlohmann::json j = {{"impl", "weft"}, {"backend", o.backend_name}, {"case", quantize ? "quantize" : "dequantize"},
                          {"bits", q.bits}, {"block", q.block}, {"n", n}, {"threads", nthreads}, {"steps", o.steps},
                          {"ms", t * 1e3}, {"gb_per_s", fp32_bytes / t / 1e9},
                          {"moved_gb_per_s", (fp32_bytes + wire_bytes) / t / 1e9}};
      if (cores > 0) j["gb_per_s_per_core"] = fp32_bytes / t / 1e9 / cores;
      if (o.format == "json") {
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{} int{} block {} n {} on {}: {:.3f} ms, {:.2f} GB/s of fp32{}\n", j["case"].get<std::string>(),
                   q.bits, q.block, n, o.backend_name, t * 1e3, fp32_bytes / t / 1e9, cores > 0 ? " (one core)" : "");
      }
    }
  }
  return 0;
}

// --codecs: every codec of compressed collectives (comm/codec.h) on quant_n floats of
// gradient-like data (standard normal scaled by 1e-3), encode and decode; gb_per_s is the
// fp32 side per second, ratio the wire bytes over the fp32 bytes. The codecs run serially
// (one core) on the cpu backends: gb_per_s_per_core = gb_per_s there.
int bench_codecs(const BenchOptions& o) {
  const int nthreads = set_threads(o.threads);
  std::unique_ptr<Backend> be = make_backend(o.backend_name);
  const int64_t n = o.quant_n;
  DeviceBuffer x = to_device(*be, quant_inputs(o, 1e-3f), DType::kF32), out(*be, DType::kF32, n);
  const bool cpu = o.backend_name == "cpu" || o.backend_name == "cpu-guarded";
  for (const char* name : {"bf16", "fp16", "int8", "int4", "zfp:4", "zfp:8", "zfp:16", "zstd"}) {
    const CodecSpec spec = parse_codec(name, "--codecs", o.quant_block);
    if (!backend_has_codec(o.backend_name, spec.kind)) continue;
    std::unique_ptr<Codec> codec = make_codec(spec, *be, "--codecs");
    DeviceBuffer wire(*be, DType::kI8, codec->max_wire_bytes(n));
    int64_t bytes = 0;
    const double te = median_seconds(*be, o.warmup, o.steps, [&] { bytes = codec->encode(wire.raw(), x.data<float>(), n, nullptr); });
    const double td = median_seconds(*be, o.warmup, o.steps, [&] { codec->decode(out.data<float>(), wire.raw(), bytes, n, false); });
    const double fp32 = 4.0 * static_cast<double>(n);
    for (const auto& [dir, t] : {std::pair{"encode", te}, std::pair{"decode", td}}) {
      nlohmann::json j = {{"impl", "weft"}, {"backend", o.backend_name}, {"codec", name}, {"case", dir}, {"n", n},
                          {"threads", nthreads}, {"steps", o.steps}, {"ms", t * 1e3}, {"gb_per_s", fp32 / t / 1e9},
                          {"ratio", static_cast<double>(bytes) / fp32}};
      if (cpu) j["gb_per_s_per_core"] = fp32 / t / 1e9;
      if (o.format == "json") {
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{:7} {} n {} on {}: {:.3f} ms, {:.2f} GB/s of fp32, wire/fp32 {:.4f}\n", name, dir, n,
                   o.backend_name, t * 1e3, fp32 / t / 1e9, static_cast<double>(bytes) / fp32);
      }
    }
  }
  return 0;
}

// The machine's matrix-product rate for the fraction printed beside the step rate, measured
// by a single process only: on cuda the card's bf16 GEMM rate (cuBLASLt, gemm_n^3) with the
// MFU against --peak-tflops, otherwise the host's sgemm rate.
void add_peak(nlohmann::json& j, const BenchOptions& o, Backend& be, const StepRate& r) {
#if WEFT_HAVE_CUDA
  if (auto* cb = dynamic_cast<cuda::CudaBackend*>(&be)) {
    j["device"] = gpu::device_name(cb->device());
    j["peak_tflops"] = o.peak_tflops;
    j["mfu_peak"] = r.model_flops_per_s / (o.peak_tflops * 1e12);
    if (o.no_peak) return;
    const double g = cuda::measure_bf16_gemm_flops(*cb, o.gemm_n, 20);
    j["gemm_n"] = o.gemm_n;
    j["gemm_flops_per_s"] = g;
    j["mfu_gemm"] = r.model_flops_per_s / g;
    return;
  }
#endif
  if (o.no_peak) return;
  add_cpu_product_rates(j);
  j["fraction_of_sgemm"] = r.model_flops_per_s / j["sgemm_flops_per_s"].get<double>();
  j["fraction_of_best_fp32"] = r.model_flops_per_s / j["best_fp32_flops_per_s"].get<double>();
}

// Training steps (AdamW, clipping) through the engine, as `weft train` runs them, in any
// layout and on the backend --backend names (backend/registry.h); --batch sequences per step
// over every replica. Rank 0 prints.
int bench_engine(const ModelConfig& mc, const BenchOptions& o, Communicator& world) {
  const int nthreads = set_threads(o.threads);
  EngineRequest req;
  req.model = mc;
  req.seq = o.seq;
  req.batch = o.batch;
  req.precision = o.precision;
  req.matmul = o.matmul;
  req.fp32_kernel = o.fp32_kernel;
  req.head_chunk = o.head_chunk;
  EngineRun run(layout_engine_config(o.layout, req, world.size()), world, o.backend_name, o.comm);
  Engine& engine = *run.engine;
  Backend& be = *run.backend;
  engine.init_params(1337);
  const int64_t T = o.seq;
  const auto times = time_steps(o, mc.vocab_size, [&](int64_t, const auto& in, const auto& tg) {
    engine.step(1e-4f, token_batches([&](int64_t first, int64_t count, int32_t* i, int32_t* t) {
      std::copy(in.begin() + first * T, in.begin() + (first + count) * T, i);
      std::copy(tg.begin() + first * T, tg.begin() + (first + count) * T, t);
    }));
    be.synchronize();  // a device backend's work of the step is done before the clock stops
  });
  const StepRate r = step_rate(times, o, mc);
  nlohmann::json j = engine_result(o, engine.config(), nthreads, world.size(), r);
  j["product_kernel"] = be.product_kernel();
  if (world.size() == 1) add_peak(j, o, be, r);
  if (world.rank() == 0) print_result(j, o, nthreads, r);
  return 0;
}

// --peer torch: the default single-process fp32 layout on the cpu backend, the peer alongside
// (run_bench_peer refuses a model the peer has no preset of).
int bench_with_peer(const BenchOptions& o, Communicator& world) {
  const RunConfig plain = layout_defaults();
  const RunConfig& l = o.layout;
  const Layout asked = run_layout(l);
  if (world.size() != 1 || o.backend_name != "cpu" || o.precision != "fp32" || l.tp != 1 ||
      l.pp != 1 || l.dp > 1 || l.zero != 0 || l.micro_batch != 0 || l.recompute != plain.recompute ||
      asked.zeropp_on() || asked.compression.any()) {
    throw_input("--peer {} compares one process on the cpu backend in fp32 in the default layout "
                "(got {} ranks, --backend {}, --precision {}, tp {}, pp {}, dp {}, zero {}, micro-batch {}, "
                "recompute {})", o.peer.name, world.size(), o.backend_name, o.precision, l.tp, l.pp, l.dp,
                l.zero, l.micro_batch, l.recompute);
  }
  PeerShapes s;
  s.model = o.model_name;
  s.batch = o.batch;
  s.seq = o.seq;
  s.threads = o.threads;
  s.steps = o.steps;
  s.warmup = o.warmup;
  s.head_chunk = o.head_chunk;
  s.fp32_kernel = o.fp32_kernel;
  s.format = o.format;
  return run_bench_peer(o.peer, s);
}

}  // namespace

int cmd_bench(CLI::App& app, int argc, char** argv, Communicator& world) {
  BenchOptions o;
  add_bench_options(app, o);
  app.parse(argc - 1, argv + 1);
  if (o.no_graphs) {
    throw_input("--no-graphs is gone: CUDA graphs belonged to GptCuda, the second GPT that was removed; "
                "`weft bench --backend cuda` runs the one GPT through the engine, without graphs (docs/cuda.md)");
  }
  if (o.peak_tflops <= 0 || o.gemm_n <= 0) {
    throw_input("--peak-tflops {} and --gemm-n {} must be positive", o.peak_tflops, o.gemm_n);
  }
  if (!o.gemm_sweep.empty()) {
#if WEFT_HAVE_CUDA
    check_output_file(o.gemm_sweep, "--gemm-sweep");
    return bench_cuda_gemm_sweep(o);
#else
    throw_input("--gemm-sweep {} times the CUDA backend's bf16 products: this weft was built without CUDA "
                "(-DWEFT_CUDA=ON)", o.gemm_sweep);
#endif
  }
  if (o.matmul_only) {
#if WEFT_HAVE_CUDA
    return bench_cuda_matmul(o);
#else
    throw_input("--matmul-only measures the CUDA backend's bf16 GEMM rate: this weft was built without CUDA "
                "(-DWEFT_CUDA=ON)");
#endif
  }
  if (o.quant) return bench_quant(o);
  if (o.codecs) return bench_codecs(o);
  const ModelConfig mc = model_preset(o.model_name);
  check_step_sizes(o, mc);
  if (!o.peer.name.empty()) return bench_with_peer(o, world);
  return bench_engine(mc, o, world);
}

}  // namespace weft
