// AdamW on device buffers: the same updates on the cpu-guarded backend (device memory fenced
// from the host, so any host access by the optimizer faults) as on the cpu backend, bit for
// bit, over six steps of a ZeRO-like shard, in fp32 and with bf16 master weights; moments
// loaded from the host land where the updates read them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu_guarded/guarded_backend.h"
#include "backend/device_buffer.h"
#include "model/config.h"
#include "model/params.h"
#include "optim/optim.h"

namespace weft {
namespace {

struct AdamRun {
  std::vector<float> params, master, m, v;
};

// Six AdamW steps over [begin, end) of the tiny model's flat buffer on `be`, from fixed values.
AdamRun six_steps(Backend& be, Precision prec, int64_t begin, int64_t end) {
  ModelConfig mc = model_preset("tiny");
  mc.vocab_size = 500;
  mc.padded_vocab = 512;
  const ParamLayout layout = param_layout(mc);
  const int64_t n = end - begin;
  std::vector<float> host(static_cast<size_t>(n)), g(static_cast<size_t>(n)), m0(host.size()), v0(host.size());
  for (int64_t i = 0; i < n; ++i) {
    host[i] = 0.02f * std::sin(0.37f * static_cast<float>(i));
    m0[i] = 1e-3f * std::cos(0.11f * static_cast<float>(i));
    v0[i] = 1e-6f * (1.0f + std::sin(0.05f * static_cast<float>(i)) * std::sin(0.05f * static_cast<float>(i)));
  }
  DeviceBuffer p(be, DType::kF32, n, MemCategory::kParams), grads(be, DType::kF32, n, MemCategory::kGrads);
  p.upload(host);
  AdamWConfig cfg;
  AdamW opt(layout, cfg, be, begin, end);
  opt.use_master_weights(prec, host.data(), /*from_host=*/true);
  be.round_to(p.data<float>(), n, prec);
  opt.load_moments(m0.data(), v0.data());
  for (int t = 1; t <= 6; ++t) {
    for (int64_t i = 0; i < n; ++i) g[i] = 0.01f * std::cos(0.23f * static_cast<float>(i) + static_cast<float>(t));
    grads.upload(g);
    opt.step(p.data<float>(), grads.data<float>(), 1e-3f, t, 0.75f);
  }
  AdamRun r;
  r.params = p.download<float>();
  auto down = [&](float* d) {
    std::vector<float> out(static_cast<size_t>(n));
    be.copy_to_host(out.data(), d, 0, out.size() * sizeof(float));
    return out;
  };
  if (opt.master()) r.master = down(opt.master());
  r.m = down(opt.exp_avg());
  r.v = down(opt.exp_avg_sq());
  return r;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(AdamWDevice, GuardedBackendGivesTheCpuBits) {
  auto cpu = make_cpu_backend();
  auto guarded = make_cpu_guarded_backend();
  for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
    const AdamRun a = six_steps(*cpu, prec, 1000, 41000), b = six_steps(*guarded, prec, 1000, 41000);
    expect_bitwise(a.params, b.params, "params");
    expect_bitwise(a.master, b.master, "master weights");
    expect_bitwise(a.m, b.m, "exp_avg");
    expect_bitwise(a.v, b.v, "exp_avg_sq");
    EXPECT_EQ(a.master.empty(), prec == Precision::kFp32);
    // The update moved the parameters (the moments were loaded, not left at zero).
    EXPECT_NE(a.m[5], 1e-3f * std::cos(0.11f * 5.0f));
  }
}

}  // namespace
}  // namespace weft
