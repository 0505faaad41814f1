#include "train/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace weft {

int32_t pick_token(const float* logits, int64_t V, double temperature, int64_t top_k, float u) {
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  int64_t k = (top_k > 0 && top_k < V) ? top_k : V;
  if (k < V) {
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    idx.resize(k);
  }
  float mx = -INFINITY;
  for (int32_t i : idx) mx = std::max(mx, logits[i]);
  std::vector<double> p(idx.size());
  double z = 0.0;
  for (size_t j = 0; j < idx.size(); ++j) z += (p[j] = std::exp((logits[idx[j]] - mx) / temperature));
  double target = static_cast<double>(u) * z, acc = 0.0;
  for (size_t j = 0; j < idx.size(); ++j) {
    acc += p[j];
    if (acc >= target) return idx[j];
  }
  return idx.back();
}

std::vector<int32_t> sample_tokens(const LogitsFn& logits_of, int64_t vocab, int64_t n_ctx,
                                   const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                   const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw_input("sampling needs a prompt of at least one token");
  if (!(opt.temperature > 0)) throw_input("temperature must be positive, got {}", opt.temperature);
  std::vector<int32_t> tokens = prompt;
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < opt.max_tokens; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), n_ctx);
    logits_of(tokens.data() + tokens.size() - T, T, logits.data());
    const float u = Philox::uniform(opt.seed, kRngStreamSample, static_cast<uint64_t>(i));
    const int32_t next = pick_token(logits.data(), vocab, opt.temperature, opt.top_k, u);
    tokens.push_back(next);
    if (on_token) on_token(next);
    if (next == opt.stop_token) break;
  }
  return tokens;
}

std::vector<int32_t> sample_tokens(Model& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                   const std::function<void(int32_t)>& on_token) {
  const ModelConfig& c = model.config();
  model.reserve_generation(c.n_ctx);
  const LogitsFn f = [&](const int32_t* t, int64_t T, float* out) { model.forward_logits(t, T, T - 1, out); };
  return sample_tokens(f, c.vocab_size, c.n_ctx, prompt, opt, on_token);
}

std::vector<int32_t> sample_tokens(Engine& engine, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                   const std::function<void(int32_t)>& on_token) {
  const ModelConfig& c = engine.config().model;
  engine.begin_generation();
  const LogitsFn f = [&](const int32_t* t, int64_t T, float* out) { engine.last_logits(t, T, out); };
  return sample_tokens(f, c.vocab_size, c.n_ctx, prompt, opt, on_token);
}

}  // namespace weft
