// DataParallel (parallel/dp/data_parallel.h), ZeRO 0-3, driven directly without a model, on
// device buffers of cpu, cpu-guarded (MPI works on the unfenced buffers) and
// cpu-guarded-staged (host access refused, as on a GPU: every collective is staged). Each
// step follows the ParamStore order (model/param_store.h) over two micro-batches; the
// gradients are written by backend ops only (copy_device, scale, add, embedding_backward with
// device tokens), so cpu-guarded faults if the store touches device memory from the host.
//
// Closed forms: the flat buffer holds pattern(i) (multiples of 1/4); group g's backward on
// rank r in micro-batch m adds weight(g, r, m) * pattern(i), and the embedding lookup adds the
// rows dres(r, m, row, c) (multiples of 1/2) at token(r, m, row) and position row % T. Every
// partial sum is exact in f32, so the summed gradient is known exactly in any order; the
// norm, the AdamW update (t = 1: p -= lr wd p + lr g / (|g| + eps)) and its first moment
// ((1 - beta1) g) are checked against plain loops in double. The three backends must agree
// bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/backend_test_util.h"
#include "backend/device_buffer.h"
#include "comm/device_comm.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"
#include "mpi_test_util.h"
#include "optim/optim.h"
#include "parallel/dp/data_parallel.h"

namespace weft {
namespace {

constexpr int kMicro = 2;
constexpr int64_t B = 2, T = 4, N = B * T;
constexpr float kLr = 1e-2f, kGradScale = 0.5f;

float pattern(int64_t i) { return static_cast<float>((i * 7) % 13 - 6) * 0.25f; }
float weight(int g, int r, int m) { return static_cast<float>(1 + (g + 2 * r + 3 * m) % 5); }
int32_t token(int r, int m, int64_t row, int V) { return static_cast<int32_t>((r * 11 + m * 5 + row * 3) % V); }
float dres_value(int r, int m, int64_t row, int64_t c) {
  return static_cast<float>((r + 2 * m + row + c) % 7 - 3) * 0.5f;
}

// What one run produced on this rank (compared bitwise between backends).
struct Outcome {
  std::vector<float> acquired;  // every group's parameters as acquired in the first forward
  std::vector<float> grads;     // opt_grads() after finish_step_gradients
  double norm_sq = 0, norm_sq_skip = 0;
  std::vector<float> params;    // gather_full_params after the AdamW step
  std::vector<float> exp_avg;   // gather_opt_range of the first moment
  std::vector<float> reacquired;  // every group's parameters acquired after the step
  int64_t opt_begin = 0, opt_end = 0;
};

struct Variant {
  int zero;
  bool tied;  // zero 0/1: a (one-member) tied-embedding group, reduced at the end of the step
  int replicate = 1;  // HSDP: dp_replicate (the dp group is replicate x dp_shard consecutive ranks)
};

class MpiDataParallel : public ::testing::TestWithParam<Variant> {
 protected:
  std::unique_ptr<Communicator> comm = test::fresh_world("dp");
  int rank = comm->rank(), P = comm->size();
  const ModelConfig cfg = make_model_config("t", 2, 2, 16, 8, 50);
  const ParamLayout layout = param_layout(cfg);
  const int64_t n = layout.total();
  const int L = cfg.n_layer, C = cfg.n_embd, V = cfg.vocab_size, Vp = cfg.padded_vocab;

  int group_of(int64_t i) const {
    for (int g = 0; g < layout.num_groups(); ++g) {
      auto [b, e] = layout.group_range(g);
      if (i >= b && i < e) return g;
    }
    return -1;
  }
  std::vector<float> full_params() const {
    std::vector<float> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 101) - 0.5f;
    return p;
  }
  // The summed gradient of the whole buffer: a plain loop over ranks, micro-batches and rows.
  std::vector<double> expected_grads() const {
    std::vector<double> g(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const int grp = group_of(i);
      for (int r = 0; r < P; ++r) {
        for (int m = 0; m < kMicro; ++m) g[static_cast<size_t>(i)] += weight(grp, r, m) * pattern(i);
      }
    }
    const ParamTensor& wte = layout.tensors()[0];
    const ParamTensor& wpe = layout.tensors()[1];
    for (int r = 0; r < P; ++r) {
      for (int m = 0; m < kMicro; ++m) {
        for (int64_t row = 0; row < N; ++row) {
          for (int64_t c = 0; c < C; ++c) {
            const double d = dres_value(r, m, row, c);
            g[static_cast<size_t>(wte.offset + token(r, m, row, V) * C + c)] += d;
            g[static_cast<size_t>(wpe.offset + (row % T) * C + c)] += d;
          }
        }
      }
    }
    return g;
  }

  // Adds w * pattern over the group's range to its gradient accumulator (device ops only).
  static void add_pattern(Backend& be, const DeviceBuffer& pat, float* grads, int64_t b, int64_t e, float w) {
    DeviceBuffer tmp(be, DType::kF32, e - b, MemCategory::kWorkspace);
    be.copy_device(tmp.raw(), 0, pat.raw(), static_cast<size_t>(b) * sizeof(float),
                   static_cast<size_t>(e - b) * sizeof(float));
    be.scale(tmp.data<float>(), w, e - b);
    be.add(grads, grads, tmp.data<float>(), e - b);
  }
  static std::vector<float> read(Backend& be, const float* p, int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    if (count > 0) be.copy_to_host(v.data(), p, 0, v.size() * sizeof(float));
    return v;
  }
  void acquire_all(DataParallel& store, Backend& be, std::vector<float>* out) {
    // forward: acquire(0) held, each layer acquired and released, acquire(L+1)
    auto take = [&](int g, CView view) {
      const float* p = view.as_f32();
      auto [b, e] = layout.group_range(g);
      const std::vector<float> v = read(be, p, e - b);
      out->insert(out->end(), v.begin(), v.end());
    };
    take(0, store.acquire(0));
    for (int l = 1; l <= L; ++l) {
      take(l, store.acquire(l));
      store.release(l);
    }
    take(L + 1, store.acquire(L + 1));
  }

  Outcome run(const std::string& backend_name) {
    const Variant v = GetParam();
    std::unique_ptr<Backend> be = test::make_test_backend(backend_name);
    DeviceCommunicator dp(*comm, *be);
    std::unique_ptr<Communicator> tied_host = comm->split(rank, 0, "pp-embedding");  // one member
    DeviceCommunicator tied(*tied_host, *be);
    const int64_t comm_before = memory_tracker().snapshot()[MemCategory::kComm];
    Outcome out;
    {
      DataParallelConfig dc;
      dc.zero = v.zero;
      dc.bucket_bytes = 4096;  // several buckets
      dc.dp_replicate = v.replicate;
      DataParallel store(layout, dp, dc, *be);
      if (v.tied) store.set_tied_embedding(&tied);
      const std::vector<float> full = full_params();
      store.load_full_params(full.data());
      std::vector<float> pat_host(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pat_host[static_cast<size_t>(i)] = pattern(i);
      const DeviceBuffer pat = to_device(*be, pat_host, DType::kF32);

      store.begin_step();
      for (int m = 0; m < kMicro; ++m) {
        store.begin_micro_batch(m == kMicro - 1);
        std::vector<int32_t> tok(static_cast<size_t>(N));
        std::vector<float> dres(static_cast<size_t>(N * C));
        for (int64_t row = 0; row < N; ++row) {
          tok[static_cast<size_t>(row)] = token(rank, m, row, V);
          for (int64_t c = 0; c < C; ++c) dres[static_cast<size_t>(row * C + c)] = dres_value(rank, m, row, c);
        }
        const DeviceBuffer dtok = to_device(*be, tok, DType::kI32), ddres = to_device(*be, dres, DType::kF32);
        std::vector<float> acquired;
        acquire_all(store, *be, &acquired);
        if (m == 0) out.acquired = acquired;
        // backward: the head's part of group 0, the final norm, the layers L..1, the lookup
        float* g0 = store.grads(0);
        add_pattern(*be, pat, g0, layout.group_range(0).first, layout.group_range(0).second, weight(0, rank, m));
        store.head_done();
        {
          auto [b, e] = layout.group_range(L + 1);
          add_pattern(*be, pat, store.grads(L + 1), b, e, weight(L + 1, rank, m));
          store.ready(L + 1);
        }
        for (int l = L; l >= 1; --l) {
          store.acquire(l);
          auto [b, e] = layout.group_range(l);
          add_pattern(*be, pat, store.grads(l), b, e, weight(l, rank, m));
          store.release(l);
          store.ready(l);
        }
        if (!store.embedding_backward(dtok.data<int32_t>(), ddres.data<float>(), B, T, 0, Vp)) {
          float *dwte, *dwpe;
          layout.embedding_ptrs(g0, &dwte, &dwpe);
          be->embedding_backward(dwte, dwpe, ddres.data<float>(), dtok.data<int32_t>(), B, T, C, 0, Vp);
        }
        store.ready(0);
        store.release(L + 1);
        store.release(0);
      }
      store.finish_step_gradients();
      out.opt_begin = store.opt_begin();
      out.opt_end = store.opt_end();
      out.grads = read(*be, store.opt_grads(), out.opt_end - out.opt_begin);
      out.norm_sq = store.grad_norm_sq();
      store.set_norm_skip({{n / 2, n / 2 + 100}, {40, 60}, {10, 50}, {n - 5, n}});  // unsorted, overlapping
      out.norm_sq_skip = store.grad_norm_sq();
      store.set_norm_skip({});

      AdamWConfig ac;
      ac.lr = kLr;
      AdamW opt(layout, ac, *be, store.opt_begin(), store.opt_end());
      opt.step(store.opt_params(), store.opt_grads(), kLr, 1, kGradScale);
      store.after_optimizer_step();
      out.params.resize(static_cast<size_t>(n));
      store.gather_full_params(out.params.data());
      out.exp_avg.resize(static_cast<size_t>(n));
      store.gather_opt_range(opt.exp_avg(), out.exp_avg.data());

      store.begin_step();
      store.begin_micro_batch(true);
      acquire_all(store, *be, &out.reacquired);
      store.release(L + 1);
      store.release(0);
    }
    EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kComm], comm_before) << backend_name << ": comm bytes leaked";
    return out;
  }
};

// Counts mismatches and reports the first few (one failure line per kind, not thousands).
template <typename F>
void expect_all(int64_t count, const std::string& what, F&& ok) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    std::string msg;
    if (!ok(i, &msg)) {
      if (++bad <= 3) ADD_FAILURE() << what << " element " << i << ": " << msg;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST_P(MpiDataParallel, EveryBackendMatchesTheClosedFormAndEachOther) {
  const Variant v = GetParam();
  // The binary runs on 2, 3, 4 and 8 ranks: 3 ranks have no dp_shard x 2 split, which the 2-, 4-
  // and 8-rank runs cover (a layout that cannot exist, reported as skipped with the reason).
  if (P % v.replicate != 0) GTEST_SKIP() << "dp_replicate " << v.replicate << " does not divide " << P << " ranks";
  const Outcome cpu = run("cpu");
  const std::vector<double> g = expected_grads();
  const std::vector<float> full = full_params();

  // The optimizer range: the whole buffer for zero 0, this rank's shard of ceil(n / dp_shard)
  // otherwise, by its index in its dp_shard group (HSDP: rank % dp_shard; plain: the rank).
  const int dp_shard = P / v.replicate, me = rank % dp_shard;
  const int64_t S = (n + dp_shard - 1) / dp_shard;
  EXPECT_EQ(cpu.opt_begin, v.zero == 0 ? 0 : std::min(n, me * S));
  EXPECT_EQ(cpu.opt_end, v.zero == 0 ? n : std::min(n, (me + 1) * S));
  EXPECT_EQ(cpu.acquired, full);
  EXPECT_EQ(cpu.reacquired, cpu.params);
  expect_all(cpu.opt_end - cpu.opt_begin, "summed gradient", [&](int64_t i, std::string* msg) {
    const float want = static_cast<float>(g[static_cast<size_t>(cpu.opt_begin + i)]);
    *msg = std::to_string(cpu.grads[static_cast<size_t>(i)]) + " != " + std::to_string(want);
    return cpu.grads[static_cast<size_t>(i)] == want;
  });
  double sq = 0.0, sq_skip = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<float>(g[static_cast<size_t>(i)]);
    sq += x * x;
    const bool skipped = (i >= n / 2 && i < n / 2 + 100) || (i >= 10 && i < 60) || i >= n - 5;
    if (!skipped) sq_skip += x * x;
  }
  EXPECT_NEAR(cpu.norm_sq, sq, 1e-12 * sq);
  EXPECT_NEAR(cpu.norm_sq_skip, sq_skip, 1e-12 * sq_skip);

  std::vector<bool> decay(static_cast<size_t>(n), false);
  for (const ParamTensor& t : layout.tensors()) {
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) decay[static_cast<size_t>(i)] = t.weight_decay;
  }
  const AdamWConfig ac;
  expect_all(n, "parameters after AdamW", [&](int64_t i, std::string* msg) {
    const double gs = static_cast<double>(static_cast<float>(g[static_cast<size_t>(i)])) * kGradScale;
    double p = full[static_cast<size_t>(i)];
    if (decay[static_cast<size_t>(i)]) p -= static_cast<double>(kLr) * ac.weight_decay * p;
    p -= kLr * gs / (std::fabs(gs) + ac.eps);
    const double got = cpu.params[static_cast<size_t>(i)];
    *msg = std::to_string(got) + " vs " + std::to_string(p);
    return std::fabs(got - p) <= 1e-6 + 1e-5 * std::fabs(p);
  });
  expect_all(n, "first moment", [&](int64_t i, std::string* msg) {
    const double want = (1.0 - ac.beta1) * static_cast<float>(g[static_cast<size_t>(i)]) * kGradScale;
    const double got = cpu.exp_avg[static_cast<size_t>(i)];
    *msg = std::to_string(got) + " vs " + std::to_string(want);
    return std::fabs(got - want) <= 1e-6 * std::max(1.0, std::fabs(want));
  });

  for (const char* name : {"cpu-guarded", "cpu-guarded-staged"}) {
    const Outcome o = run(name);
    EXPECT_EQ(o.acquired, cpu.acquired) << name;
    EXPECT_EQ(o.grads, cpu.grads) << name;
    EXPECT_EQ(o.norm_sq, cpu.norm_sq) << name;
    EXPECT_EQ(o.norm_sq_skip, cpu.norm_sq_skip) << name;
    EXPECT_EQ(o.params, cpu.params) << name;
    EXPECT_EQ(o.exp_avg, cpu.exp_avg) << name;
    EXPECT_EQ(o.reacquired, cpu.reacquired) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, MpiDataParallel,
                         ::testing::Values(Variant{0, false}, Variant{1, false}, Variant{2, false}, Variant{3, false},
                                           Variant{0, true}, Variant{1, true},
                                           // HSDP: 2 replicas of dp_shard P / 2 (1, 2 and 4 on 2, 4 and 8 ranks)
                                           Variant{0, false, 2}, Variant{1, false, 2}, Variant{2, false, 2},
                                           Variant{3, false, 2}, Variant{1, true, 2}),
                         [](const auto& info) {
                           return "zero" + std::to_string(info.param.zero) + (info.param.tied ? "_tied" : "") +
                                  (info.param.replicate > 1 ? "_replicate" + std::to_string(info.param.replicate) : "");
                         });

}  // namespace
}  // namespace weft
