#include "train/icl_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "engine/engine.h"

namespace weft {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The sample standard deviation of 0/1 outcomes over sqrt(n) (lm-evaluation-harness's stderr
// of a mean: sample_stddev / sqrt(n)).
double mean_stderr(int64_t right, int64_t n) {
  if (n < 2) return 0;
  const double p = static_cast<double>(right) / static_cast<double>(n);
  const double var = p * (1 - p) * static_cast<double>(n) / static_cast<double>(n - 1);
  return std::sqrt(var / static_cast<double>(n));
}

// The (context, continuation) of item `it`'s option `o` without few-shot examples.
std::pair<std::string, std::string> option_text(const IclTask& t, const IclItem& it, size_t o, const IclOptions& opt) {
  if (t.kind == IclKind::kSchema) return {it.contexts[o], opt.target_delimiter + it.continuations[0]};
  return {it.contexts[0], opt.target_delimiter + it.continuations[o]};
}

}  // namespace

std::vector<int64_t> icl_fewshot_indices(int64_t items, int64_t i, int k, uint64_t seed) {
  if (k <= 0) return {};
  if (k > items - 1) {
    throw_input("{} few-shot examples: the task has {} other items", k, items - 1);
  }
  uint64_t state = seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(i + 1));
  std::vector<int64_t> out;
  while (static_cast<int>(out.size()) < k) {
    const int64_t j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(items));
    if (j != i && std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> icl_item_texts(const IclTask& task, int64_t i, const IclOptions& o) {
  const int64_t n = static_cast<int64_t>(task.items.size());
  std::string prefix;
  for (int64_t j : icl_fewshot_indices(n, i, o.fewshot, o.seed)) {
    const IclItem& ex = task.items[static_cast<size_t>(j)];
    const auto [c, x] = option_text(task, ex, static_cast<size_t>(ex.gold), o);
    prefix += c + x + o.fewshot_delimiter;
  }
  const IclItem& it = task.items[static_cast<size_t>(i)];
  std::vector<std::pair<std::string, std::string>> out;
  const size_t options = std::max(it.contexts.size(), it.continuations.size());
  for (size_t k = 0; k < options; ++k) {
    auto [c, x] = option_text(task, it, k, o);
    out.emplace_back(prefix + c, x);
  }
  return out;
}

IclRequest icl_request(const std::string& context, const std::string& continuation, const IclEncoder& enc,
                       int64_t n_ctx) {
  // lm-evaluation-harness (models/huggingface.py _encode_pair): trailing whitespace of the
  // context goes to the continuation; the continuation's tokens are the whole's after the
  // context's.
  std::string ctx = context, cont = continuation;
  const size_t keep = ctx.find_last_not_of(" \t\n\r\f\v");
  const size_t cut = keep == std::string::npos ? 0 : keep + 1;
  if (cut < ctx.size()) {
    cont = ctx.substr(cut) + cont;
    ctx.resize(cut);
  }
  std::vector<int32_t> c, x;
  if (ctx.empty()) {
    c = {enc.prefix_token};
    x = enc.encode(cont);
  } else {
    const std::vector<int32_t> whole = enc.encode(ctx + cont);
    c = enc.encode(ctx);
    const size_t n = std::min(c.size(), whole.size());
    x.assign(whole.begin() + static_cast<std::ptrdiff_t>(n), whole.end());
  }
  if (x.empty()) throw_input("the continuation '{}' of context '{}...' encodes to no tokens", continuation, context.substr(0, 40));
  if (static_cast<int64_t>(x.size()) > n_ctx) {
    throw_input("a continuation of {} tokens does not fit the model's context of {}: '{}...'", x.size(), n_ctx,
                continuation.substr(0, 40));
  }
  std::vector<int32_t> all = c;
  all.insert(all.end(), x.begin(), x.end());
  // (context + continuation)[-(n_ctx + 1):][:-1]
  const size_t start = all.size() > static_cast<size_t>(n_ctx + 1) ? all.size() - static_cast<size_t>(n_ctx + 1) : 0;
  IclRequest r;
  r.input.assign(all.begin() + static_cast<std::ptrdiff_t>(start), all.end() - 1);
  r.targets = std::move(x);
  return r;
}

IclScore icl_score(const float* logits, int64_t V, const int32_t* targets, int64_t n) {
  IclScore s;
  s.greedy = true;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits + t * V;
    const int64_t best = std::max_element(row, row + V) - row;
    double sum = 0;
    const double mx = row[best];
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
    s.loglikelihood += static_cast<double>(row[targets[t]]) - mx - std::log(sum);
    if (best != targets[t]) s.greedy = false;
  }
  return s;
}

IclTaskResult icl_accuracy(const IclTask& task, int64_t items, const std::vector<IclScore>& scores) {
  IclTaskResult r;
  r.name = task.name;
  r.format = task.format;
  r.items = items;
  r.requests = static_cast<int64_t>(scores.size());
  r.has_norm = task.kind == IclKind::kMultipleChoice;  // HellaSwag's items are multiple choice
  int64_t right = 0, right_norm = 0;
  size_t at = 0;
  for (int64_t i = 0; i < items; ++i) {
    const IclItem& it = task.items[static_cast<size_t>(i)];
    if (task.kind == IclKind::kLanguageModeling) {
      right += scores.at(at++).greedy ? 1 : 0;
      continue;
    }
    const size_t options = std::max(it.contexts.size(), it.continuations.size());
    size_t best = 0, best_norm = 0;
    double best_ll = -INFINITY, best_ll_norm = -INFINITY;
    for (size_t o = 0; o < options; ++o) {
      const double ll = scores.at(at + o).loglikelihood;
      if (ll > best_ll) best_ll = ll, best = o;
      if (r.has_norm) {
        const double len = static_cast<double>(std::max<int64_t>(1, utf8_length(it.continuations[o])));
        if (ll / len > best_ll_norm) best_ll_norm = ll / len, best_norm = o;
      }
    }
    at += options;
    right += static_cast<int>(best) == it.gold ? 1 : 0;
    right_norm += static_cast<int>(best_norm) == it.gold ? 1 : 0;
  }
  WEFT_CHECK(at == scores.size(), "icl_accuracy: {} scores for {} requests", scores.size(), at);
  r.scores = scores;
  r.acc = items > 0 ? static_cast<double>(right) / static_cast<double>(items) : 0;
  r.acc_stderr = mean_stderr(right, items);
  if (r.has_norm) {
    r.acc_norm = items > 0 ? static_cast<double>(right_norm) / static_cast<double>(items) : 0;
    r.acc_norm_stderr = mean_stderr(right_norm, items);
  }
  return r;
}

IclRequests icl_requests(const IclTask& task, const IclEncoder& enc, const IclOptions& o, int64_t n_ctx) {
  const int64_t n_items = static_cast<int64_t>(task.items.size());
  if (o.limit < 0) throw_input("--limit {}: must be >= 0", o.limit);
  IclRequests out;
  out.items = o.limit > 0 ? std::min(o.limit, n_items) : n_items;
  for (int64_t i = 0; i < out.items; ++i) {
    for (const auto& [c, x] : icl_item_texts(task, i, o)) {
      try {
        out.requests.push_back(icl_request(c, x, enc, n_ctx));
      } catch (const InputError& e) {
        throw_input("{} item {}: {}", task.path, i, e.what());
      }
    }
  }
  return out;
}

IclTaskResult evaluate_icl_task(Engine& engine, const IclTask& task, const IclEncoder& enc, const IclOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const IclRequests reqs = icl_requests(task, enc, o, engine.config().model.n_ctx);
  IclTaskResult r = score_icl_requests(engine, task, reqs, o);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();  // the encoding included
  return r;
}

IclTaskResult score_icl_requests(Engine& engine, const IclTask& task, const IclRequests& prepared, const IclOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = engine.config().model.vocab_size;
  const std::vector<IclRequest>& reqs = prepared.requests;
  // Dealt round-robin over the dp replicas; every replica makes the same number of forward
  // passes (a ZeRO-3 pass gathers over dp), the last ones repeating request 0 when R does not
  // divide.
  Communicator& dp = engine.comm(Axis::kDp);
  const int64_t R = static_cast<int64_t>(reqs.size()), D = dp.size(), me = dp.rank();
  std::vector<double> ll(static_cast<size_t>(R), 0.0), greedy(static_cast<size_t>(R), 0.0);
  std::vector<float> logits;
  engine.begin_generation();
  for (int64_t k = me; k < (R + D - 1) / D * D; k += D) {
    const IclRequest& q = reqs[static_cast<size_t>(k < R ? k : 0)];
    const int64_t T = static_cast<int64_t>(q.input.size()), n = static_cast<int64_t>(q.targets.size());
    logits.resize(static_cast<size_t>(n * V));
    engine.logits(q.input.data(), T, T - n, logits.data());
    if (k >= R) continue;
    const IclScore s = icl_score(logits.data(), V, q.targets.data(), n);
    ll[static_cast<size_t>(k)] = s.loglikelihood;
    greedy[static_cast<size_t>(k)] = s.greedy ? 1.0 : 0.0;
  }
  dp.all_reduce_sum(ll.data(), R);
  dp.all_reduce_sum(greedy.data(), R);
  std::vector<IclScore> scores(static_cast<size_t>(R));
  for (int64_t k = 0; k < R; ++k) scores[static_cast<size_t>(k)] = {ll[static_cast<size_t>(k)], greedy[static_cast<size_t>(k)] > 0.5};
  IclTaskResult r = icl_accuracy(task, prepared.items, scores);
  r.fewshot = o.fewshot;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

nlohmann::json icl_result_json(const IclTaskResult& r) {
  nlohmann::json j{{"task", r.name},         {"format", r.format},         {"items", r.items},
                   {"requests", r.requests}, {"fewshot", r.fewshot},       {"acc", r.acc},
                   {"acc_stderr", r.acc_stderr}, {"seconds", r.seconds}};
  if (r.has_norm) {
    j["acc_norm"] = r.acc_norm;
    j["acc_norm_stderr"] = r.acc_norm_stderr;
  }
  return j;
}

}  // namespace weft
