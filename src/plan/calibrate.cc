#include "plan/calibrate.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

#include "backend/cpu/decoder_ops.h"
#include "backend/cpu/gelu_ops.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/pointwise_ops.h"
#include "backend/device_buffer.h"
#include "backend/registry.h"
#include "comm/codec.h"
#include "core/rng.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/precision.h"
#include "plan/kernel_model.h"
#include "plan/predict.h"
#include "plan/scale_model.h"

namespace weft::plan {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Repeated samples of one measurement: the best (the machine undisturbed) and the median, whose
// ratio to the best tells how much the samples were disturbed (another process taking a core,
// a descheduled OpenMP thread).
struct Samples {
  double best = 1e30, median = 1e30;
  double spread() const { return best > 0 && best < 1e30 ? median / best - 1.0 : 0.0; }
};

// Times `once` reps + 1 times (the first warms up: caches, page faults, oneDNN's primitive) after
// a barrier each, on every rank at once. Each sample starts after a pause of 1 ms: the rank's
// threads (OpenMP's workers stop spinning and sleep) wake with the scheduler's credit for the
// time they slept, so a process that keeps a core busy yields it to them at the sample's start
// instead of holding it through a timeslice while the others wait at the join (measured: with
// a process spinning on one of 2 cores, 2-thread products at 80-87 GFLOP/s against 475 idle
// without the pause).
// A pause of 1 ms, then every OpenMP thread woken (an empty parallel region) before the timing.
void pause_and_wake() {
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  volatile int touched = 0;
#pragma omp parallel
  { touched = 1; }
  (void)touched;
}

template <typename F>
Samples sample_seconds(int reps, Communicator& world, F&& once) {
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    pause_and_wake();
    world.barrier();
    const auto t0 = Clock::now();
    once();
    const double dt = seconds_since(t0);
    if (r > 0) t.push_back(dt);
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

double max_over_ranks(Communicator& world, double v);

// sample_seconds, measured again (up to 3 more rounds of twice the samples, the best kept) while
// any rank's samples spread more than 25% (median over best): a figure taken while another
// process held a core part of the time gets more chances at a quiet moment. The decision is
// collective: every rank measures the same rounds.
template <typename F>
Samples steady_seconds(int reps, Communicator& world, F&& once) {
  Samples t = sample_seconds(reps, world, once);
  for (int round = 0; round < 3 && max_over_ranks(world, t.spread()) > 0.25; ++round) {
    const Samples again = sample_seconds(2 * reps, world, once);
    t.best = std::min(t.best, again.best);
    t.median = std::min(t.median, again.median);
  }
  return t;
}

// CPU seconds the whole machine spent busy (/proc/stat's cpu line: user, nice, system, irq,
// softirq; not steal, a hypervisor's neighbours) and this process (/proc/self/stat: utime +
// stime of all its threads), and the wall clock.
struct CpuTimes {
  double machine_busy = 0, own = 0, steal = 0;
  Clock::time_point wall = Clock::now();
};
CpuTimes cpu_times() {
  CpuTimes t;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream st("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (st >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq && cpu == "cpu") {
    t.machine_busy = (user + nice + system + irq + softirq) / tick;
    if (st >> steal) t.steal = steal / tick;
  }
  std::ifstream self("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces
  if (close != std::string::npos) {
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::atof(field.c_str());
      if (i == 15) stime = std::atof(field.c_str());
    }
    t.own = (utime + stime) / tick;
  }
  return t;
}

// Cores that other processes kept busy between a and b: the machine's busy CPU time less every
// rank's own (the ranks of one calibration share a machine), over the wall time.
double other_load(const CpuTimes& a, const CpuTimes& b, Communicator& world) {
  double own = b.own - a.own;
  world.all_reduce(&own, 1, CommDType::kF64, ReduceOp::kSum);
  const double wall = std::chrono::duration<double>(b.wall - a.wall).count();
  return wall > 0 ? std::max(0.0, (b.machine_busy - a.machine_busy - own) / wall) : 0.0;
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double one = 0;
  f >> one;
  return one;
}

double mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024.0;
  }
  return 8e9;
}

double min_over_ranks(Communicator& world, double v);

// Seconds of one product (n x n) @ (n x n) through the backend's gemm (the cpu backend with its
// products set), best and median of `reps` short timings (every rank runs at once): short
// timings let the best of them find moments when no other process holds a core. Small products
// are repeated within one timing (about 2e7 FLOPs, 0.1-0.3 ms); a product of more than 4e8
// FLOPs (n >= 1024) is timed as its blocks of rows (256, 128 or 64 rows: at most about 6e8
// FLOPs), (rows x n) @ (n x n) each, and its time is the sum of each block's best (the same
// work, in pieces short enough to find a quiet moment).
Samples time_product(Backend& be, int n, int reps, Communicator& world) {
  std::vector<float> host(static_cast<size_t>(n) * n);
  for (size_t i = 0; i < host.size(); ++i) host[i] = round_bf16(0.001f * static_cast<float>(i % 997));
  DeviceBuffer a = to_device(be, host, DType::kF32), b = to_device(be, host, DType::kF32);
  DeviceBuffer c(be, DType::kF32, static_cast<int64_t>(n) * n);
  const double flops = 2.0 * n * n * static_cast<double>(n);
  int rows = 256;  // a block's rows: at most about 6e8 FLOPs (1-2 ms), at least 64 rows
  while (rows > 64 && 2.0 * rows * n * static_cast<double>(n) > 6e8) rows /= 2;
  if (flops > 4e8 && n % rows == 0) {
    Samples total{0.0, 0.0};
    for (int r0 = 0; r0 < n; r0 += rows) {
      const Samples t = sample_seconds(reps, world, [&] {
        be.gemm(false, false, rows, n, n, 1.0f, a.data<float>() + static_cast<int64_t>(r0) * n, n, b.data<float>(), n,
                0.0f, c.data<float>() + static_cast<int64_t>(r0) * n, n);
      });
      total.best += t.best, total.median += t.median;
    }
    return total;
  }
  const int inner = std::max(1, static_cast<int>(2e7 / flops));
  Samples t = sample_seconds(reps, world, [&] {
    for (int i = 0; i < inner; ++i) {
      be.gemm(false, false, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f, c.data<float>(), n);
    }
  });
  t.best /= inner, t.median /= inner;
  return t;
}

// One product library's rates over the calibration sizes: (FLOPs per call, FLOP/s per rank,
// the slowest rank's), and its best rate.
struct ProductRates {
  std::string name;
  std::vector<std::pair<double, double>> rates;
  double peak = 0;
  // Seconds of one call of each size of at least 256^3 (the model's products): what the
  // choice between libraries compares.
  double large_seconds = 0;
  double spread = 0;  // the worst of its sizes' (Samples::spread)
};

ProductRates measure_products(const std::string& name, const ProductSettings& ps, const std::vector<int>& sizes,
                              int reps, Communicator& world, std::vector<std::string>& notes) {
  ProductRates p;
  p.name = name;
  std::unique_ptr<Backend> be = make_backend("cpu");
  be->set_products(ps);
  for (int n : sizes) {
    const double flops = 2.0 * n * n * static_cast<double>(n);
    Samples t = time_product(*be, n, reps, world);
    // Disturbed on any rank: all of them measure once more (the decision is collective: a rank
    // that measured again alone would meet the others' next barrier with its own), the better kept.
    if (max_over_ranks(world, t.spread()) > 0.25) {
      const Samples again = time_product(*be, n, reps, world);
      if (again.best < t.best) t.best = again.best;
      t.median = std::min(t.median, again.median);
    }
    p.rates.emplace_back(flops, min_over_ranks(world, flops / t.best));
    p.spread = std::max(p.spread, t.spread());
  }
  // A size far below both neighbours was measured while another process shared its core the
  // whole time (every sample slow alike, so the spread did not show it): measured again, up to
  // twice, the better kept. The rates are the same on every rank (min over ranks): one decision.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const double left = i > 0 ? p.rates[i - 1].second : 0, right = i + 1 < sizes.size() ? p.rates[i + 1].second : 0;
      if (!(p.rates[i].second < 0.7 * std::max(left, right))) continue;
      const double again = min_over_ranks(world, p.rates[i].first / time_product(*be, sizes[i], reps, world).best);
      p.rates[i].second = std::max(p.rates[i].second, again);
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double flops = p.rates[i].first, rate = p.rates[i].second;
    p.peak = std::max(p.peak, rate);
    if (sizes[i] >= 256) p.large_seconds += flops / rate;
    notes.push_back(fmt::format("{} {}^3: {:.2f} GFLOP/s per rank", name, sizes[i], rate / 1e9));
  }
  return p;
}

// STREAM triad (McCalpin 1995): a[i] = b[i] + s c[i], 3 x 4 bytes per element (2 reads, 1
// write; write-allocate traffic not counted, as STREAM reports it).
// The triad over the whole arrays, each pass timed in 16 consecutive chunks (each still far
// larger than the caches' share it can reuse: every pass streams all three arrays): the time is
// the sum of each chunk's best over the passes, so a pass disturbed in one chunk loses only it.
Samples triad_seconds(int64_t n, int reps, Communicator& world) {
  Buffer<float> a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 0;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  constexpr int kChunks = 16;
  const int64_t chunk = (n + kChunks - 1) / kChunks;
  std::vector<std::vector<double>> t(kChunks);
  for (int r = 0; r < reps + 1; ++r) {
    for (int k = 0; k < kChunks; ++k) {
      const int64_t i0 = k * chunk, i1 = std::min(n, i0 + chunk);
      pause_and_wake();  // as sample_seconds
      world.barrier();
      const auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
      for (int64_t i = i0; i < i1; ++i) pa[i] = pb[i] + 0.5f * pc[i];
      if (r > 0) t[static_cast<size_t>(k)].push_back(seconds_since(t0));
    }
  }
  volatile float sink = a[n / 2];
  (void)sink;
  Samples total{0.0, 0.0};
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    total.best += v.front(), total.median += v[v.size() / 2];
  }
  return total;
}

// Seconds of one elementwise kernel f(y, x, g) of the cpu backend over n elements (x in
// [-4, 4], g the output gradient), best of `reps`.
using PointwiseKernel = std::function<void(float* y, const float* x, const float* g, int64_t n)>;
Samples pointwise_seconds(const PointwiseKernel& f, int64_t n, int reps, Communicator& world) {
  Buffer<float> x(n), y(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i % 2001) - 1000) * 0.004f;
    g[i] = 1.0f;
  }
  const Samples t = steady_seconds(reps, world, [&] { f(y.data(), x.data(), g.data(), n); });
  volatile float sink = y[n / 2];
  (void)sink;
  return t;
}

// The cpu backend's activation `a` (forward, or backward) as such a kernel.
PointwiseKernel activation_kernel(Activation a, bool backward) {
  if (backward) {
    return [a](float* y, const float* x, const float* g, int64_t n) { cpu::activation_backward(y, x, g, n, a, false); };
  }
  return [a](float* y, const float* x, const float*, int64_t n) { cpu::activation_forward(y, x, n, a); };
}

Samples activation_seconds(Activation a, bool backward, int64_t n, int reps, Communicator& world) {
  return pointwise_seconds(activation_kernel(a, backward), n, reps, world);
}

// Every elementwise function the planner prices by its rate (model/description.h's
// Kernel::function; plan/predict.cc's block): the graph networks' activations, forward and
// backward, and the transformer MLP's GELUs (GPT-2's tanh form, the exact erf form).
std::vector<std::pair<std::string, PointwiseKernel>> pointwise_functions() {
  std::vector<std::pair<std::string, PointwiseKernel>> r;
  for (const Activation a : kActivationsAll) {
    r.emplace_back(activation_name(a), activation_kernel(a, false));
    r.emplace_back(activation_backward_name(a), activation_kernel(a, true));
  }
  r.emplace_back("gelu", [](float* y, const float* x, const float*, int64_t n) { cpu::gelu_tanh_forward(y, x, n); });
  r.emplace_back("gelu_backward",
                 [](float* y, const float* x, const float* g, int64_t n) { cpu::gelu_tanh_backward(y, x, g, n); });
  r.emplace_back("gelu_exact", [](float* y, const float* x, const float*, int64_t n) { cpu::gelu_erf_forward(y, x, n); });
  r.emplace_back("gelu_exact_backward",
                 [](float* y, const float* x, const float* g, int64_t n) { cpu::gelu_erf_backward(y, x, g, n); });
  return r;
}

// An OpenMP parallel loop over a few elements (fork and join): 400 samples in groups of 10, a
// pause of 0.2 ms between groups, so that the best finds a moment with every thread on a core.
Samples fork_join_seconds() {
  float x[64] = {};
  std::vector<double> t;
  for (int r = 0; r < 400; ++r) {
    if (r % 10 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const auto t0 = Clock::now();
#pragma omp parallel for
    for (int i = 0; i < 64; ++i) x[i] += 1.0f;
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

// Half round trip between ranks 0 and 1 (others idle) of `bytes`, best of `reps`.
double ping_pong(Communicator& world, int64_t bytes, int reps) {
  std::vector<uint8_t> buf(static_cast<size_t>(bytes), 1);
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    world.barrier();
    const auto t0 = Clock::now();
    if (world.rank() == 0) {
      world.send(buf.data(), bytes, CommDType::kU8, 1, 7);
      world.recv(buf.data(), bytes, CommDType::kU8, 1, 8);
    } else if (world.rank() == 1) {
      world.recv(buf.data(), bytes, CommDType::kU8, 0, 7);
      world.send(buf.data(), bytes, CommDType::kU8, 0, 8);
    }
    const double dt = seconds_since(t0) / 2;
    if (r > 0) best = std::min(best, dt);
  }
  double v = world.rank() == 0 ? best : 0.0;
  world.all_reduce(&v, 1, CommDType::kF64, ReduceOp::kMax);  // rank 0's figure everywhere
  return v;
}

// The smallest value over the ranks (each rank's share: the slowest one bounds a step).
double min_over_ranks(Communicator& world, double v) {
  world.all_reduce(&v, 1, CommDType::kF64, ReduceOp::kMin);
  return v;
}

double max_over_ranks(Communicator& world, double v) {
  world.all_reduce(&v, 1, CommDType::kF64, ReduceOp::kMax);
  return v;
}

// Best-of-`reps` bytes of fp32 input per second of `pass` over n values (one thread).
template <typename F>
double codec_rate(int64_t n, int reps, Communicator& world, F&& pass) {
  return min_over_ranks(world, 4.0 * static_cast<double>(n) / sample_seconds(reps, world, pass).best);
}

// One core's codec speeds for the compressed collectives (plan/compression.h), each codec as
// the runtime runs it (comm/codec.h on the cpu backend, one thread): bf16, fp16, int8, int4
// (block 2048), zfp at 4, 8 and 16 bits per value (the family key "zfp" takes zfp:8's speed),
// zstd at its default level, whose measured ratio becomes zstd_ratio. The input: n
// gradient-like values, normal with sigma 1e-3 (random, so the lossless and the transform
// codecs meet data as hard to compress as real gradients, not a smooth test signal).
void measure_codecs(Calibration& cal, bool quick, Communicator& world) {
  const int64_t n = quick ? (int64_t{1} << 20) : (int64_t{1} << 23);
  const int reps = quick ? 2 : 4;
  std::unique_ptr<Backend> be = make_backend("cpu");
  DeviceBuffer x(*be, DType::kF32, n), y(*be, DType::kF32, n);
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    host[static_cast<size_t>(i)] = 1e-3f * Philox::normal(2024, kRngStreamBench + (1ull << 30), static_cast<uint64_t>(i));
  }
  x.upload(host);
  CodecRates& c = cal.system.codecs;
  c.cores = 1;
  for (const char* name : {"bf16", "fp16", "int8", "int4", "zfp:4", "zfp:8", "zfp:16", "zstd"}) {
    const CodecSpec spec = parse_codec(name, "calibrate", 2048);
    std::unique_ptr<Codec> codec = make_codec(spec, *be, "calibrate");
    DeviceBuffer wire(*be, DType::kI8, codec->max_wire_bytes(n));
    int64_t bytes = 0;
    const double enc = codec_rate(n, reps, world, [&] { bytes = codec->encode(wire.raw(), x.data<float>(), n, nullptr); });
    const double dec =
        codec_rate(n, reps, world, [&] { codec->decode(y.data<float>(), wire.raw(), bytes, n, false); });
    const double ratio = static_cast<double>(bytes) / (4.0 * static_cast<double>(n));
    c.per_core[name] = CodecSpeed{enc, dec};
    if (spec.kind == CodecKind::kZfp && spec.rate == 8) c.per_core["zfp"] = CodecSpeed{enc, dec};
    if (spec.kind == CodecKind::kZstd) c.zstd_ratio = ratio;
    cal.notes.push_back(fmt::format("codec {} (one core): encode {:.2f} GB/s, decode {:.2f} GB/s of fp32 input, wire/raw {:.4f}",
                                    name, enc / 1e9, dec / 1e9, ratio));
  }
}

// The matrix products: the cpu backend's two fp32 libraries (OpenBLAS's sgemm, oneDNN's
// matmul) over square sizes, the faster on the large sizes becoming the system's fp32_kernel,
// its best rate peak_flops_32 and its rates the matmul_curve; with a native bf16 product (oneDNN
// on AVX512-BF16 or AMX: `--matmul fast`), its best rate is peak_flops_16, else peak_flops_16 =
// peak_flops_32 (16-bit storage computes fp32 products).
void measure_matmul(Calibration& cal, bool quick, Communicator& world) {
  const std::vector<int> sizes = quick ? std::vector<int>{32, 64, 128, 256, 512}
                                       : std::vector<int>{32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};
  const int reps = quick ? 6 : 15;
  const ProductSettings fp32{Precision::kFp32, MatmulMode::kExact, "openblas"};
  ProductRates blas = measure_products("openblas sgemm", fp32, sizes, reps, world, cal.notes);
  ProductRates dnnl = measure_products("onednn fp32", {Precision::kFp32, MatmulMode::kExact, "onednn"}, sizes, reps,
                                       world, cal.notes);
  const bool pick_dnnl = dnnl.large_seconds < blas.large_seconds;
  const ProductRates& best = pick_dnnl ? dnnl : blas;
  Device& d = cal.system.device;
  d.fp32_kernel = pick_dnnl ? "onednn" : "openblas";
  cal.notes.push_back(fmt::format("fp32 products: {} (the sizes >= 256^3 take {:.2f} ms against {:.2f} ms)", best.name,
                                  1e3 * best.large_seconds, 1e3 * (pick_dnnl ? blas : dnnl).large_seconds));
  d.peak_flops_32 = best.peak;
  d.matmul_efficiency = 1.0;
  cal.spread = std::max(cal.spread, best.spread);
  for (const auto& r : best.rates) d.matmul_curve.emplace_back(r.first, r.second / best.peak);
  // Every rank reads the same CPU; the slowest rank's answer would be the same.
  if (OnednnGemm::native_bf16()) {
    const ProductRates bf16 = measure_products("onednn bf16", {Precision::kBf16, MatmulMode::kFast, ""}, sizes, reps,
                                               world, cal.notes);
    d.peak_flops_16 = bf16.peak;
    d.native_bf16 = true;
    cal.notes.push_back(fmt::format("bf16 products (--matmul fast): onednn bf16, {:.2f} GFLOP/s per rank; priced with the "
                                    "fp32 curve's shape", bf16.peak / 1e9));
  } else {
    d.peak_flops_16 = d.peak_flops_32;
    cal.notes.push_back(fmt::format("no native bf16 product on this CPU (oneDNN sees {}): 16-bit runs compute fp32 "
                                    "products, peak_flops_16 = peak_flops_32", OnednnGemm::cpu_isa()));
  }
}

// The product rates by shape (Device::gemm_table): every m x n x k of a grid, in each operand
// layout weft's linear layers use (forward A B, input gradient A B^T, weight gradient A^T B),
// through the backend's gemm with the chosen fp32 library, the best of short samples (small
// products repeated within a sample). A product above `cap` FLOPs is timed on its first rows
// only: at least `cap` FLOPs of them and at least kSettledRows rows, where the rate has settled
// (OpenBLAS here: nt 64 x 32768 x 512 at 85 GFLOP/s, 1024 rows at 155; 120 x 65536 x 256 at
// 96, 512-4096 rows at 127-137; the 64-120 rows the FLOPs cap alone left priced the GPT head's
// products 30-45% slow). The grid's larger m that come to the same rows are measured once. The
// square curve prices a product by its FLOPs alone; a layer's products are narrow (the head's
// k = C against n = V, the weight gradients' inner dimension the micro-batch's rows), and their
// rates differ.
void measure_gemm_table(Calibration& cal, bool quick, Communicator& world) {
  Device& d = cal.system.device;
  GemmTable& t = d.gemm_table;
  // m up to 65536: a weight gradient's output is the weight (m = the vocabulary for the head's),
  // and an output larger than the caches runs below the rate of the same FLOPs on few rows.
  t.m = quick ? std::vector<double>{16, 256, 4096, 65536} : std::vector<double>{16, 64, 256, 1024, 4096, 16384, 65536};
  t.n = quick ? std::vector<double>{64, 512, 4096, 32768} : std::vector<double>{64, 256, 1024, 4096, 16384, 65536};
  t.k = t.n;
  const double cap = quick ? 1e9 : 4e9;      // FLOPs of one timed product
  constexpr double kSettledRows = 512;       // rows of a product cut to its first rows, at least
  const int64_t most = int64_t{1} << 26;     // elements of an operand (256 MiB)
  const int reps = quick ? 2 : 3;
  std::unique_ptr<Backend> be = make_backend("cpu");
  be->set_products({Precision::kFp32, MatmulMode::kExact, d.fp32_kernel});
  std::vector<float> host(static_cast<size_t>(most));
  for (size_t i = 0; i < host.size(); ++i) host[i] = 1e-3f * static_cast<float>(i % 997);
  DeviceBuffer a = to_device(*be, host, DType::kF32), b = to_device(*be, host, DType::kF32);
  host = {};
  DeviceBuffer c(*be, DType::kF32, most);
  std::string slowest;
  double worst = 1e30, best = 0;
  for (size_t tr = 0; tr < t.rates.size(); ++tr) {
    const bool ta = tr == static_cast<size_t>(GemmTrans::kTN), tb = tr == static_cast<size_t>(GemmTrans::kNT);
    std::vector<double>& rates = t.rates[tr];
    std::map<std::array<double, 3>, double> measured;  // rows, n, k -> rate
    for (double m : t.m) {
      for (double n : t.n) {
        for (double k : t.k) {
          if (k * n > static_cast<double>(most)) {  // a weight larger than 256 MiB: the rate of the widest one measured
            rates.push_back(rates.back());
            continue;
          }
          // Rows: the grid's m, or as many as the FLOPs cap and the operands' size allow (at least
          // kSettledRows).
          const double rows = std::min({m, std::max(kSettledRows, std::ceil(cap / (2 * n * k))),
                                        std::floor(static_cast<double>(most) / std::max(n, k))});
          if (const auto it = measured.find({rows, n, k}); it != measured.end()) {
            rates.push_back(it->second);
            continue;
          }
          const int64_t M = static_cast<int64_t>(rows), N = static_cast<int64_t>(n), K = static_cast<int64_t>(k);
          const double flops = 2.0 * rows * n * k;
          const int inner = std::max(1, static_cast<int>(4e7 / flops));
          // Row-major operands as weft stores them: A is M x K (K x M transposed), B K x N (N x K).
          const int64_t lda = ta ? M : K, ldb = tb ? K : N;
          const float beta = ta ? 1.0f : 0.0f;  // weight gradients accumulate into the gradient (C read too)
          const Samples sm = steady_seconds(reps, world, [&] {
            for (int i = 0; i < inner; ++i) {
              be->gemm(ta, tb, M, N, K, 1.0f, a.data<float>(), lda, b.data<float>(), ldb, beta, c.data<float>(), N);
            }
          });
          const double rate = min_over_ranks(world, flops * inner / sm.best);
          rates.push_back(rate);
          measured[{rows, n, k}] = rate;
          best = std::max(best, rate);
          if (rate < worst) worst = rate, slowest = fmt::format("{} {}x{}x{}", kGemmTransNames[tr], m, n, k);
        }
      }
    }
  }
  cal.notes.push_back(fmt::format("products by shape (m x n x k, {} points in each of nn, nt, tn): {:.1f} to {:.1f} GFLOP/s "
                                  "per rank (slowest {})",
                                  t.m.size() * t.n.size() * t.k.size(), worst / 1e9, best / 1e9, slowest));
}

// Memory bandwidth (STREAM triad), the memory size and the kernel latency (OpenMP fork/join).
void measure_memory_and_latency(Calibration& cal, bool quick, Communicator& world) {
  Device& d = cal.system.device;
  const int ranks = world.size();
  const int64_t n = quick ? (int64_t{1} << 22) : (int64_t{1} << 25);  // 16 or 128 MiB per array
  const Samples triad = triad_seconds(n, quick ? 10 : 30, world);
  d.memory_bandwidth = min_over_ranks(world, 12.0 * static_cast<double>(n) / triad.best);
  cal.spread = std::max(cal.spread, triad.spread());
  cal.notes.push_back(fmt::format("STREAM triad over 3 x {} MiB: {:.2f} GB/s per rank (median sample {:+.0f}%)",
                                  n * 4 >> 20, d.memory_bandwidth / 1e9, 100 * triad.spread()));
  d.memory_bytes = mem_total_bytes() / ranks;
  cal.notes.push_back(fmt::format("memory: MemTotal {:.2f} GB / {} rank(s)", mem_total_bytes() / 1e9, ranks));
  const Samples fj = fork_join_seconds();
  d.kernel_latency = min_over_ranks(world, fj.best);
  cal.notes.push_back(fmt::format("OpenMP fork/join (kernel latency): {:.2f} us (median sample {:.2f} us)",
                                  d.kernel_latency * 1e6, fj.median * 1e6));
}

// The memory-bound kernels' bandwidth by their size (Device::memory_curve): the triad over
// arrays from a few hundred KB (inside a core's L2) to the full calibration size, bytes moved
// (12 per element) over the best pass. On a CPU the layer norms and activations of a small
// micro-batch run from the caches at several times the memory's rate.
void measure_memory_curve(Calibration& cal, bool quick, Communicator& world) {
  Device& d = cal.system.device;
  std::string text;
  const int top = quick ? 22 : 25;
  for (int lg = 13; lg <= top; lg += 2) {  // 32 KiB .. 128 MiB per array
    const int64_t n = int64_t{1} << lg;
    Buffer<float> a(n), b(n), c(n);
    for (int64_t i = 0; i < n; ++i) a[i] = 0, b[i] = 1.0f, c[i] = 2.0f;
    const int inner = static_cast<int>(std::max<int64_t>(1, (int64_t{1} << 22) / n));  // >= 4M elements a sample
    float* pa = a.data();
    const float* pb = b.data();
    const float* pc = c.data();
    const Samples t = steady_seconds(quick ? 4 : 12, world, [&] {
      for (int r = 0; r < inner; ++r) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
      }
    });
    volatile float sink = a[n / 2];
    (void)sink;
    const double bytes = 12.0 * static_cast<double>(n);
    const double bw = min_over_ranks(world, bytes * inner / t.best);
    d.memory_curve.emplace_back(bytes, bw);
    text += fmt::format("{}{:.3g} MB {:.1f}", text.empty() ? "" : ", ", bytes / 1e6, bw / 1e9);
  }
  cal.notes.push_back(fmt::format("memory-bound kernels by bytes moved (triad), GB/s per rank: {}", text));
}

// The optimizer step as the cpu backend runs it: AdamW over shards from cache-sized to
// memory-sized (its 4 fp32 arrays stream from the caches or from memory: seconds per parameter
// by shard size, Device::adamw_curve) and the gradient norm's sum of squares (a double
// accumulation in order, bound by the additions' latency, not the size: one figure).
void measure_optimizer(Calibration& cal, bool quick, Communicator& world) {
  Device& d = cal.system.device;
  const int top = quick ? 22 : 25;
  std::unique_ptr<Backend> be = make_backend("cpu");
  const int64_t most = int64_t{1} << top;
  Buffer<float> p(most), g(most), m(most), v(most);
  for (int64_t i = 0; i < most; ++i) p[i] = 0.01f, g[i] = 1e-3f * static_cast<float>(i % 17), m[i] = 0, v[i] = 0;
  int64_t t = 0;
  std::string text;
  for (int lg = 16; lg <= top; lg += 3) {
    const int64_t n = int64_t{1} << lg;
    const int inner = static_cast<int>(std::max<int64_t>(1, (int64_t{1} << 22) / n));
    const Samples ad = steady_seconds(quick ? 3 : 6, world, [&] {
      for (int r = 0; r < inner; ++r) be->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t, 1.0f);
    });
    const double per = 1.0 / min_over_ranks(world, static_cast<double>(n) * inner / ad.best);
    d.adamw_curve.emplace_back(static_cast<double>(n), per);
    text += fmt::format("{}{} M {:.3g} ns", text.empty() ? "" : ", ", static_cast<double>(n) / (1 << 20), 1e9 * per);
  }
  double sink = 0;
  const int64_t n = int64_t{1} << 22;
  const Samples nm = steady_seconds(quick ? 3 : 6, world, [&] { sink += be->sum_squares(g.data(), n); });
  d.norm_param_seconds = 1.0 / min_over_ranks(world, static_cast<double>(n) / nm.best);
  cal.notes.push_back(fmt::format("optimizer: AdamW per parameter by shard size: {}; gradient norm {:.3g} ns per "
                                  "parameter (sum {:.3g})",
                                  text, 1e9 * d.norm_param_seconds, sink));
}

// The collectives as weft's data parallelism issues them (asynchronous all-reduce, reduce-scatter
// and all-gather of 32 MiB, waited for), each against the ring formula on the ping-pong's
// latency and bandwidth: their share of it becomes the level's collective_efficiency. Then how
// much of an all-reduce compute hides (SoftwareDefaults::comm_overlap): products timed alone,
// the all-reduce alone, and both, the products calling progress() between them as the engine
// does between its ops; hidden = (alone + alone - both) / all-reduce.
void measure_collectives(Calibration& cal, LinkLevel& link, bool quick, Communicator& world) {
  const int n = world.size();
  const int64_t count = quick ? (int64_t{1} << 21) : (int64_t{1} << 23);  // floats
  const double bytes = 4.0 * static_cast<double>(count);
  std::vector<float> a(static_cast<size_t>(count), 1e-3f), b(static_cast<size_t>(count));
  const std::vector<int64_t> parts(static_cast<size_t>(n), count / n);
  System one = cal.system;
  one.levels = {link};
  one.levels[0].collective_efficiency.clear();
  const int reps = quick ? 2 : 5;
  auto time_of = [&](Collective c) {
    return sample_seconds(reps, world, [&] {
      CommHandle h = c == Collective::kAllReduce   ? world.iall_reduce(a.data(), count, CommDType::kF32, ReduceOp::kSum)
                     : c == Collective::kAllGather ? world.iall_gather_v(a.data(), b.data(), parts, CommDType::kF32)
                                                   : world.ireduce_scatter_v(a.data(), b.data(), parts, CommDType::kF32,
                                                                             ReduceOp::kSum);
      h->wait();
    });
  };
  std::string text;
  double t_ar = 0;  // the all-reduce's seconds, the overlap's reference below
  for (const auto& [c, key] : {std::pair{Collective::kAllReduce, "all_reduce"}, std::pair{Collective::kAllGather, "all_gather"},
                               std::pair{Collective::kReduceScatter, "reduce_scatter"}}) {
    // An all-gather's buffer is the gathered whole (as the planner prices it): each rank sends 1/n.
    const double measured = std::max(1e-9, max_over_ranks(world, time_of(c).best));
    if (c == Collective::kAllReduce) t_ar = measured;
    const double formula = collective_cost(one, c, n, 1, bytes).seconds;
    const double share = std::clamp(formula / measured, 0.01, 2.0);
    link.collective_efficiency[key] = share;
    text += fmt::format("{}{} {:.3g} ms ({:.2f} of the ring formula's {:.3g} ms)", text.empty() ? "" : ", ", key,
                        1e3 * measured, share, 1e3 * formula);
  }
  cal.notes.push_back(fmt::format("collectives of {} MiB over {} ranks, asynchronous as weft's data parallelism issues "
                                  "them: {}",
                                  count >> 18, n, text));
  // Overlap: 256 x 1024 x 1024 products (about 0.5 GFLOP each) for about 1.5x the all-reduce.
  std::unique_ptr<Backend> be = make_backend("cpu");
  be->set_products({Precision::kFp32, MatmulMode::kExact, cal.system.device.fp32_kernel});
  const int64_t M = 256, K = 1024, N = 1024;
  DeviceBuffer x = to_device(*be, std::vector<float>(static_cast<size_t>(M * K), 0.01f), DType::kF32);
  DeviceBuffer w = to_device(*be, std::vector<float>(static_cast<size_t>(K * N), 0.01f), DType::kF32);
  DeviceBuffer y(*be, DType::kF32, M * N);
  auto product = [&] { be->gemm(false, false, M, N, K, 1.0f, x.data<float>(), K, w.data<float>(), N, 0.0f, y.data<float>(), N); };
  const double one_product = max_over_ranks(world, sample_seconds(reps, world, product).best);  // one count everywhere

  const int products = std::max(4, static_cast<int>(std::ceil(1.5 * t_ar / std::max(1e-6, one_product))));
  const double t_c = max_over_ranks(world, sample_seconds(reps, world, [&] {
                                             for (int i = 0; i < products; ++i) product();
                                           }).best);
  const double t_both = max_over_ranks(world, sample_seconds(reps, world, [&] {
                                                CommHandle h = world.iall_reduce(a.data(), count, CommDType::kF32, ReduceOp::kSum);
                                                for (int i = 0; i < products; ++i) {
                                                  product();
                                                  world.progress();
                                                }
                                                h->wait();
                                              }).best);
  const double hidden = std::clamp((t_c + t_ar - t_both) / t_ar, 0.0, 1.0);
  cal.system.defaults.comm_overlap = hidden;
  cal.notes.push_back(fmt::format("overlap: {} products {:.3g} ms, the all-reduce {:.3g} ms, both {:.3g} ms: compute hides "
                                  "{:.0f}% of the all-reduce (comm_overlap)",
                                  products, 1e3 * t_c, 1e3 * t_ar, 1e3 * t_both, 100 * hidden));
}

// How much the ranks' times for the same work differ between two synchronisations
// (SoftwareDefaults::sync_jitter): every rank runs the same products (128^3, the backend's, on its
// threads) for a segment of about s seconds, after a barrier; the slowest rank's time less the
// ranks' mean, over the samples, is what one synchronisation after such a segment waits
// (measured: 0.2 ms to 0.5 s segments on 2 vCPUs of a VM waited 3-14% of the segment). Divided
// by E[max of the ranks' normal draws] it is the coefficient of variation the planner scales to
// any group size (plan/scale_model.h's sync_wait), by the segment's mean measured length. The
// kept curve is the closest non-increasing one, weighted by each length's samples
// (non_increasing_fit): a long segment has few samples (16 of 0.125 s), and one disturbed sample
// moved a 0.5 s point to 14% while 0.14 s measured 4% (so segments stop at 0.125 s; longer
// ones take its figure).
void measure_sync_jitter(Calibration& cal, bool quick, bool keep, Communicator& world) {
  const int n = world.size();
  std::unique_ptr<Backend> be = make_backend("cpu");
  be->set_products({Precision::kFp32, MatmulMode::kExact, cal.system.device.fp32_kernel});
  const int64_t M = 128;
  DeviceBuffer x = to_device(*be, std::vector<float>(static_cast<size_t>(M * M), 0.01f), DType::kF32);
  DeviceBuffer y(*be, DType::kF32, M * M);
  auto product = [&] { be->gemm(false, false, M, M, M, 1.0f, x.data<float>(), M, x.data<float>(), M, 0.0f, y.data<float>(), M); };
  // One product's time back to back, as the segments run them (after a warm-up loop).
  double one = 0;
  for (int round = 0; round < 2; ++round) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 200; ++i) product();
    one = seconds_since(t0) / 200;
  }
  one = max_over_ranks(world, one);
  const std::vector<double> segments = quick ? std::vector<double>{1e-3, 1e-2, 1e-1}
                                             : std::vector<double>{2e-4, 1e-3, 5e-3, 2.5e-2, 1.25e-1};
  const double budget = quick ? 0.4 : 2.0;  // seconds a segment length
  std::vector<std::pair<double, double>> curve;
  std::vector<double> samples;
  std::string text;
  std::vector<double> own(static_cast<size_t>(n));
  for (double seg : segments) {
    const int k = std::max(1, static_cast<int>(std::lround(seg / std::max(1e-9, one))));
    const int reps = std::clamp(static_cast<int>(budget / seg), quick ? 6 : 8, 1000);
    double excess = 0, mean = 0;
    for (int r = 0; r < reps + 1; ++r) {
      world.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < k; ++i) product();
      const double t = seconds_since(t0);
      world.all_gather(&t, own.data(), 1, CommDType::kF64);
      if (r == 0) continue;  // warm-up
      const double m = std::accumulate(own.begin(), own.end(), 0.0) / n;
      excess += *std::max_element(own.begin(), own.end()) - m;
      mean += m;
    }
    excess /= reps;
    mean /= reps;
    const double cv = std::clamp(excess / (mean * expected_max_normal(n)), 0.0, 0.99);
    if (curve.empty() || mean > curve.back().first) {
      curve.emplace_back(mean, cv);
      samples.push_back(reps);
    }
    text += fmt::format("{}{:.3g} ms: {:.3g} ms ({:.1f}%, cv {:.3f})", text.empty() ? "" : ", ", 1e3 * mean, 1e3 * excess,
                        100 * excess / mean, cv);
  }
  const std::vector<std::pair<double, double>> fitted = non_increasing_fit(curve, samples);
  if (keep) cal.system.defaults.sync_jitter = fitted;
  std::string kept;
  for (const auto& [seg, cv] : fitted) kept += fmt::format("{}{:.3f}", kept.empty() ? "" : ", ", cv);
  cal.notes.push_back(fmt::format("synchronisation of {} ranks after segments of products: the slowest rank over the mean "
                                  "by segment, {} (cv = wait / E[max of {}] {:.3f}; non-increasing, weighted by samples: "
                                  "{}; {})",
                                  n, text, n, expected_max_normal(n), kept,
                                  keep ? "kept as sync_jitter" : "not priced: `weft calibrate --sync-jitter` keeps it"));
}

// The activations' rates: their exp and log1p, not the memory, set their time on a CPU.
void measure_functions(Calibration& cal, bool quick, Communicator& world) {
  Device& d = cal.system.device;
  std::string rates;
  double spread = 0;
  const int64_t n = quick ? (int64_t{1} << 18) : (int64_t{1} << 21);
  for (const auto& [name, kernel] : pointwise_functions()) {
    const Samples t = pointwise_seconds(kernel, n, quick ? 4 : 10, world);
    const double rate = min_over_ranks(world, static_cast<double>(n) / t.best);
    spread = std::max(spread, t.spread());
    d.function_rates[name] = rate;
    rates += fmt::format("{}{} {:.3g}", rates.empty() ? "" : ", ", name, rate / 1e9);
  }
  cal.spread = std::max(cal.spread, spread);
  cal.notes.push_back(fmt::format("elementwise functions (the cpu backend's activations and GELUs), G elements/s per rank: {} "
                                  "(median samples up to {:+.0f}%)",
                                  rates, 100 * spread));
}

// Kernels in a chain against the planner's price of each: a check of the model, written into
// the file's comments (not used for pricing). The figures above time each kernel back to back
// on its own operands; a step runs hundreds of different kernels one after the other, whose
// operands the previous kernel left in the other core's cache, partitioned differently
// (OpenBLAS's rows are not OpenMP's). A chain like a layer's (a product, SiLU, the weight
// gradient's product accumulating, the input gradient's, an add) over rows x width
// activations, the best of many samples of several passes, over the sum of the planner's
// prices of its five kernels from the figures the file keeps (docs/planner.md, stop 59: 0.65 to
// 1.30 on this VM, by shape, not by size alone).
struct ChainSample {
  int64_t rows = 0, width = 0;
  double seconds = 0;  // one pass of the chain, the best sample
};

// The chain's five kernels as the planner prices them on `d`.
double chain_price(const Device& d, int64_t rows, int64_t width) {
  const double e = 4, r = static_cast<double>(rows), c = static_cast<double>(width), a = r * c;
  const GemmShape nn{r, c, c, 1, GemmTrans::kNN}, tn{c, c, r, 1, GemmTrans::kTN}, nt{r, c, c, 1, GemmTrans::kNT};
  return gemm_time(d, Precision::kFp32, nn, e) + elementwise_time(d, 2 * e * a, "silu", a) +
         gemm_time(d, Precision::kFp32, tn, e) + gemm_time(d, Precision::kFp32, nt, e) + memory_time(d, 3 * e * a);
}

std::vector<ChainSample> measure_chain(const Device& d, bool quick, Communicator& world) {
  std::unique_ptr<Backend> be = make_backend("cpu");
  be->set_products({Precision::kFp32, MatmulMode::kExact, d.fp32_kernel});
  const std::vector<int64_t> rows = quick ? std::vector<int64_t>{256, 4096} : std::vector<int64_t>{64, 256, 1024, 4096, 16384};
  std::vector<ChainSample> out;
  for (int64_t C : {int64_t{64}, int64_t{256}}) {
    for (int64_t R : rows) {
      const int64_t act = R * C;
      DeviceBuffer x = to_device(*be, std::vector<float>(static_cast<size_t>(act), 0.01f), DType::kF32);
      DeviceBuffer w = to_device(*be, std::vector<float>(static_cast<size_t>(C * C), 0.01f), DType::kF32);
      DeviceBuffer g = to_device(*be, std::vector<float>(static_cast<size_t>(C * C), 0.0f), DType::kF32);
      DeviceBuffer y(*be, DType::kF32, act), z(*be, DType::kF32, act), x2(*be, DType::kF32, act);
      float *px = x.data<float>(), *pw = w.data<float>(), *pg = g.data<float>();
      float *py = y.data<float>(), *pz = z.data<float>(), *px2 = x2.data<float>();
      auto chain = [&] {
        be->gemm(false, false, R, C, C, 1.0f, px, C, pw, C, 0.0f, py, C);   // y = x w
        be->activation_forward_f32(pz, py, act, Activation::kSilu);         // z = silu(y)
        be->gemm(true, false, C, C, R, 1.0f, px, C, pz, C, 1.0f, pg, C);    // g += x^T z
        be->gemm(false, true, R, C, C, 1.0f, pz, C, pw, C, 0.0f, px2, C);   // x2 = z w^T
        be->add_f32(px, px, px2, act);                                      // x += x2
      };
      // Passes a sample: about 2 ms of the chain at the planner's price (the same on every rank).
      const int passes = std::max(2, static_cast<int>(std::ceil(2e-3 / chain_price(d, R, C))));
      const Samples t = steady_seconds(quick ? 5 : 12, world, [&] {
        for (int i = 0; i < passes; ++i) chain();
      });
      out.push_back({R, C, max_over_ranks(world, t.best / passes)});
    }
  }
  return out;
}

// The check's line, priced from the device as the file keeps it (after a busy machine's table
// was dropped).
std::string chain_check_note(const Device& d, const std::vector<ChainSample>& chain) {
  std::string text;
  for (const ChainSample& c : chain) {
    text += fmt::format("{}{} x {} {:.3g}", text.empty() ? "" : ", ", c.rows, c.width,
                        c.seconds / chain_price(d, c.rows, c.width));
  }
  return fmt::format("check: kernels in a chain (product, SiLU, weight-gradient product, input-gradient product, add; "
                     "rows x width), measured over the planner's price from this file: {}",
                     text);
}

}  // namespace

Calibration calibrate(const CalibrationOptions& o, Communicator& world) {
  if (o.threads < 0) throw_input("--threads must be >= 0, got {}", o.threads);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = omp_get_max_threads();
  openblas_set_num_threads(threads);
  const int ranks = world.size();
  Calibration cal;
  System& s = cal.system;
  s.name = o.name;
  const unsigned hw = std::thread::hardware_concurrency();
  s.description = fmt::format("this machine as measured by weft calibrate: {} rank(s) x {} thread(s), {} hardware threads",
                              ranks, threads, hw);
  Device& d = s.device;
  d.name = fmt::format("CPU rank ({} threads)", threads);
  cal.notes.push_back(fmt::format("Written by `weft calibrate` ({} rank(s) x {} thread(s) on {} hardware threads).",
                                  ranks, threads, hw));
  cal.notes.push_back("A device is one MPI rank with its threads; every rank measured at the same time.");
  const double load_at_start = load_average();
  const CpuTimes start = cpu_times();
  measure_matmul(cal, o.quick, world);
  measure_gemm_table(cal, o.quick, world);
  measure_memory_and_latency(cal, o.quick, world);
  measure_memory_curve(cal, o.quick, world);
  measure_optimizer(cal, o.quick, world);
  measure_functions(cal, o.quick, world);
  const std::vector<ChainSample> chain = measure_chain(d, o.quick, world);

  // Links between ranks.
  LinkLevel link;
  link.name = "machine";
  link.devices = 0;
  if (ranks >= 2) {
    const double lat = ping_pong(world, 8, o.quick ? 10 : 200);
    const int64_t big = o.quick ? (int64_t{1} << 20) : (int64_t{1} << 24);
    const double t_big = ping_pong(world, big, o.quick ? 3 : 10);
    link.latency = lat;
    link.bandwidth = static_cast<double>(big) / std::max(1e-12, t_big - lat);
    cal.link_measured = true;
    cal.notes.push_back(fmt::format("MPI ping-pong ranks 0-1: latency {:.2f} us (8 B), bandwidth {:.2f} GB/s ({} MiB)",
                                    lat * 1e6, link.bandwidth / 1e9, big >> 20));
    measure_collectives(cal, link, o.quick, world);
    measure_sync_jitter(cal, o.quick, o.sync_jitter, world);
  } else {
    // Not measured: a copy through shared memory reads and writes each byte once.
    link.latency = 1e-6;
    link.bandwidth = d.memory_bandwidth / 2;
    cal.notes.push_back(
        "NOT MEASURED: the link level (run `mpirun -np 2 weft calibrate` to measure it); estimated as half the memory "
        "bandwidth and 1 us");
  }
  s.levels.push_back(link);
  measure_codecs(cal, o.quick, world);

  // How busy the machine was: other processes' cores while measuring, and the samples' spread.
  const CpuTimes end = cpu_times();
  cal.other_load = other_load(start, end, world);
  const double wall = std::chrono::duration<double>(end.wall - start.wall).count();
  const double steal = wall > 0 ? (end.steal - start.steal) / wall : 0.0;  // a virtual machine's host took them
  cal.notes.push_back(fmt::format("load: other processes kept {:.2f} of {} hardware threads busy while measuring (load "
                                  "average {:.2f} at the start; the hypervisor took {:.2f}); the samples' median was "
                                  "at most {:+.0f}% over their best",
                                  cal.other_load, hw, load_at_start, steal, 100 * cal.spread));
  if (cal.other_load > 0.25 || steal > 0.25) {
    // Another process held a core: the per-shape products and the optimizer's curve, a few
    // samples each, were slowed point by point (here: a busy table priced the default job at
    // +79%, the square curve at +14%). They are dropped: the planner prices the products from
    // the square curve (the best of 15 samples a size, measured again when disturbed) and the
    // optimizer as memory traffic, as before they were measured.
    cal.system.device.gemm_table = GemmTable{};
    cal.system.device.adamw_curve.clear();
    cal.system.device.norm_param_seconds = 0;
    cal.notes.push_back("NOT KEPT (the machine was busy): the products by shape and the optimizer's curve; calibrate "
                        "again on a quiet machine to measure them");
  }
  if (cal.other_load > 0.25 || steal > 0.25 || cal.spread > 1.0) {
    cal.warning = fmt::format(
        "the machine was busy while calibrating: other processes kept {:.2f} of {} hardware threads busy (the "
        "hypervisor {:.2f}) and the median samples were up to {:+.0f}% over the best; the figures are the best of "
        "many short samples (each disturbed product size measured twice). Check them on a quiet machine with `weft "
        "calibrate --check FILE`",
        cal.other_load, hw, steal, 100 * cal.spread);
    cal.notes.push_back("WARNING: " + cal.warning);
  }
  cal.notes.push_back(chain_check_note(d, chain));
  s.machine = this_machine(ranks, threads);
  s.machine.other_load = cal.other_load;
  s.machine.spread = cal.spread;
  s.defaults.flash_attention = false;  // weft's CPU attention materialises the scores
  s.defaults.attention_16 = false;     // and computes them with fp32 products in every mode
  s.defaults.dropout = false;
  s.defaults.fp32_grad_accumulation = false;
  s.defaults.overlap_dp = true;
  s.defaults.memory_model = "weft";  // weft's own buffers (plan/weft_memory.h)
  s.defaults.tp_comm = "weft";       // weft's own tensor-parallel calls (plan/comm_model.h)
  s.validate();
  return cal;
}

}  // namespace weft::plan

namespace weft::plan {

bool CalibrationCheck::holds() const {
  return std::all_of(rows.begin(), rows.end(), [](const CheckRow& r) { return r.ok; });
}

CalibrationCheck check_calibration(const System& sys, int threads, Communicator& world) {
  const int use = threads > 0 ? threads : sys.machine.threads > 0 ? sys.machine.threads : omp_get_max_threads();
  omp_set_num_threads(use);
  openblas_set_num_threads(use);
  CalibrationCheck c;
  c.differences = fingerprint_differences(sys.machine, this_machine(world.size(), use));
  const CpuTimes start = cpu_times();
  const Device& d = sys.device;
  const auto within = [](double now, double file, double f) { return file > 0 && now <= file * f && now >= file / f; };
  std::unique_ptr<Backend> be = make_backend("cpu");
  be->set_products({Precision::kFp32, MatmulMode::kExact, d.fp32_kernel.empty() ? "openblas" : d.fp32_kernel});
  for (int n : {256, 512}) {
    const double flops = 2.0 * n * n * static_cast<double>(n);
    const double now = min_over_ranks(world, flops / time_product(*be, n, 10, world).best);
    const double file = d.peak_flops_32 * matmul_curve_fraction(d, flops);
    c.rows.push_back({fmt::format("fp32 product {}^3 ({}), FLOP/s", n, d.fp32_kernel.empty() ? "openblas" : d.fp32_kernel),
                      file, now, within(now, file, 1.25)});
  }
  const int64_t n = int64_t{1} << 25;
  const double bw = min_over_ranks(world, 12.0 * static_cast<double>(n) / triad_seconds(n, 10, world).best);
  // A virtual machine's memory bandwidth wanders more than its products (here 32-42 GB/s between
  // idle calibrations of one hour): 35% for it.
  c.rows.push_back({"memory bandwidth (STREAM triad), B/s", d.memory_bandwidth, bw, within(bw, d.memory_bandwidth, 1.35)});
  const double lat = min_over_ranks(world, fork_join_seconds().best);
  c.rows.push_back({"kernel latency (OpenMP fork/join), s", d.kernel_latency, lat,
                    d.kernel_latency <= 0 || within(lat, d.kernel_latency, 2.0)});
  const auto silu = d.function_rates.find("silu");
  if (silu != d.function_rates.end()) {
    const int64_t m = int64_t{1} << 21;
    const double rate = min_over_ranks(world, static_cast<double>(m) / activation_seconds(Activation::kSilu, false, m, 6, world).best);
    c.rows.push_back({"silu, elements/s", silu->second, rate, within(rate, silu->second, 1.25)});
  }
  c.other_load = other_load(start, cpu_times(), world);
  return c;
}

}  // namespace weft::plan
