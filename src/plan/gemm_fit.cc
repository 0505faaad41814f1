#include "plan/gemm_fit.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace weft::plan {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) out.push_back(trim(f));
  return out;
}

double field(const std::string& path, int line, const char* column, const std::string& v, bool whole) {
  try {
    size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos != v.size() || !std::isfinite(x) || x <= 0 || (whole && x != std::floor(x))) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw_input("{}:{}: column '{}' = '{}': expected a positive {}", path, line, column, v,
                whole ? "whole number" : "finite number");
  }
}

Precision dtype(const std::string& path, int line, const std::string& v) {
  if (v == "bf16") return Precision::kBf16;
  if (v == "fp16") return Precision::kFp16;
  if (v == "fp32") return Precision::kFp32;
  throw_input("{}:{}: column 'dtype' = '{}': expected bf16, fp16 or fp32", path, line, v);
}

void comment(GemmSweep& s, const std::string& line) {
  const std::string body = trim(line.substr(1));
  for (const char* key : {"device:", "date:"}) {
    if (body.rfind(key, 0) == 0) (key[1] == 'e' ? s.device : s.date) = trim(body.substr(std::string(key).size()));
  }
}

// Mean squared log error of the model over the samples.
double loss(const Device& d, const std::vector<GemmSample>& samples) {
  double sum = 0;
  for (const GemmSample& g : samples) {
    const double r = std::log(gemm_time(d, g.precision, g.shape, elem_bytes(g.precision)) / g.seconds);
    sum += r * r;
  }
  return sum / static_cast<double>(samples.size());
}

// The efficiency minimising the loss at a fixed k overhead (golden-section: the loss is
// unimodal in the efficiency, the times being max(compute / eff, memory) + latency).
double best_efficiency(Device d, const std::vector<GemmSample>& samples) {
  double a = 0.02, b = 1.0;
  const double g = (std::sqrt(5.0) - 1) / 2;
  for (int i = 0; i < 60; ++i) {
    const double x1 = b - g * (b - a), x2 = a + g * (b - a);
    d.matmul_efficiency = x1;
    const double f1 = loss(d, samples);
    d.matmul_efficiency = x2;
    const double f2 = loss(d, samples);
    (f1 <= f2 ? b : a) = f1 <= f2 ? x2 : x1;
  }
  return (a + b) / 2;
}

}  // namespace

std::vector<GemmShape> gemm_sweep_shapes() {
  std::vector<GemmShape> out;
  auto add = [&](double m, double n, double k) {
    for (const GemmShape& g : out) {
      if (g.m == m && g.n == n && g.k == k) return;
    }
    out.push_back({m, n, k, 1});
  };
  for (double s : {512, 1024, 2048, 4096, 8192, 16384}) add(s, s, s);
  for (double tokens : {2048, 8192}) {
    for (double h : {1024, 4096, 12288}) {
      for (double t : {1, 8}) {
        add(tokens, 3 * h / t, h);
        add(tokens, h, h / t);
        add(tokens, 4 * h / t, h);
        add(tokens, h, 4 * h / t);
      }
    }
  }
  for (double k : {64, 128}) add(2048, 2048, k);
  for (double rows : {16, 128}) add(rows, 8192, 8192);
  return out;
}

GemmSweep read_gemm_sweep(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input("gemm sweep {} cannot be read (missing file or no permission)", path);
  GemmSweep s;
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++n;
    if (trim(line).empty()) continue;
    if (trim(line)[0] == '#') {
      comment(s, trim(line));
      continue;
    }
    const std::vector<std::string> f = split(line);
    if (!header) {
      if (f != std::vector<std::string>{"m", "n", "k", "batch", "dtype", "seconds"}) {
        throw_input("{}:{}: expected the header 'm,n,k,batch,dtype,seconds', got '{}'", path, n, trim(line));
      }
      header = true;
      continue;
    }
    if (f.size() != 6) throw_input("{}:{}: expected 6 columns (m,n,k,batch,dtype,seconds), got {}", path, n, f.size());
    GemmSample g;
    g.shape = {field(path, n, "m", f[0], true), field(path, n, "n", f[1], true), field(path, n, "k", f[2], true),
               field(path, n, "batch", f[3], true)};
    g.precision = dtype(path, n, f[4]);
    g.seconds = field(path, n, "seconds", f[5], false);
    s.samples.push_back(g);
  }
  if (s.samples.empty()) throw_input("gemm sweep {} has no samples (header 'm,n,k,batch,dtype,seconds' and rows)", path);
  return s;
}

std::string gemm_sweep_csv(const GemmSweep& s) {
  std::string out = fmt::format("# device: {}\n# date: {}\nm,n,k,batch,dtype,seconds\n", s.device, s.date);
  for (const GemmSample& g : s.samples) {
    out += fmt::format("{},{},{},{},{},{:.9g}\n", g.shape.m, g.shape.n, g.shape.k, g.shape.batch,
                       precision_name(g.precision), g.seconds);
  }
  return out;
}

GemmFit fit_gemm_model(const Device& base, const std::vector<GemmSample>& samples) {
  if (base.compute_units <= 0 || base.gemm_tiles.empty()) {
    throw_input("the per-shape product model needs the device's compute_units and gemm_tiles (device '{}' has {} units)",
                base.name, base.compute_units);
  }
  if (samples.empty()) throw_input("no GEMM samples to fit");
  GemmFit best{base, {}, 0, 0};
  double best_loss = INFINITY;
  for (double k0 = 0; k0 <= 1024; k0 += 8) {
    Device d = base;
    d.gemm_k_overhead = k0;
    d.matmul_efficiency = best_efficiency(d, samples);
    const double l = loss(d, samples);
    if (l < best_loss) {
      best_loss = l;
      best.device = d;
    }
  }
  for (const GemmSample& g : samples) {
    const double e = gemm_time(best.device, g.precision, g.shape, elem_bytes(g.precision)) / g.seconds - 1;
    best.errors.push_back(e);
    best.mean_abs_error += std::abs(e) / static_cast<double>(samples.size());
    best.worst_abs_error = std::max(best.worst_abs_error, std::abs(e));
  }
  return best;
}

}  // namespace weft::plan
