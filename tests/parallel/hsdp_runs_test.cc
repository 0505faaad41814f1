// HSDP (Hybrid-STOP's data-parallel split, parallel/grid.h and parallel/dp/data_parallel.h)
// through `weft train` under mpirun: dp = dp_shard x dp_replicate, ZeRO inside each dp_shard
// group, the replicas all-reducing their shards' gradients. By layout parity against one
// process (fp32, 1e-5 relative): dp_shard 2 x dp_replicate 2 with ZeRO 0-3 on 4 ranks, and
// tp 2 x dp_shard 2 x dp_replicate 2 with ZeRO-3 on 8; a checkpoint written under HSDP
// resumes under plain dp and the reverse; a ZeRO-3 HSDP rank's parameter, gradient and
// optimizer bytes are the predicted ones exactly; the replicate axis carries 1/dp_shard of the
// gradient that a plain all-reduce carries, and the communication model matches the trace.
// A model smaller than the tiny preset (2 layers, C 64) and 6 steps: 8 ranks share 2 cores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
namespace fs = std::filesystem;

constexpr const char* kModel = "--n_layer 2 --n_head 4 --n_embd 64 --n_ctx 32 --steps 6";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

nlohmann::json memory_report(const std::string& run) {
  nlohmann::json r;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("memory_report")) r = j["memory_report"];
  }
  return r;
}

// The largest relative difference of `a`'s values from `ref`'s over the steps of `a`, after
// checking each is within 1e-5 (fp32 layout parity). Printed for the record.
double expect_parity(const std::string& run, const std::string& ref, const std::string& what, int64_t from_step = 1) {
  double worst = 0.0;
  int compared = 0;
  for (const char* key : {"loss", "val_loss"}) {
    const auto a = test::metric_series(run, key), r = test::metric_series(ref, key);
    for (const auto& [step, v] : a) {
      if (step < from_step) continue;
      if (!r.count(step)) {
        ADD_FAILURE() << what << ": the reference has no " << key << " at step " << step;
        continue;
      }
      const double want = r.at(step);
      EXPECT_NEAR(v, want, 1e-5 * want) << what << ": " << key << " at step " << step;
      worst = std::max(worst, std::fabs(v - want) / want);
      ++compared;
    }
  }
  EXPECT_GE(compared, 2) << what;
  std::printf("[ parity ] %s: %d values, max relative difference %.3g\n", what.c_str(), compared, worst);
  return worst;
}

// Bytes of world rank `rank`'s training calls of step `step` on `axis` ("" any) of kind `kind`.
int64_t traced_bytes(const std::string& run, int rank, int64_t step, const std::string& axis, const std::string& kind) {
  std::ifstream in(fmt::format("{}/trace-rank{}.jsonl", run, rank));
  EXPECT_TRUE(in) << run << ": no trace of rank " << rank;
  int64_t b = 0;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["phase"] != "train" || j["step"] != step || j["kind"] != kind) continue;
    if (!axis.empty() && j["axis"] != axis) continue;
    b += j["bytes"].get<int64_t>();
  }
  return b;
}

class HsdpRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("hsdp", "seq_len = 32\nglobal_batch = 8\nmicro_batch = 1\nseed = 4242\n", 1); }
  std::string run(int np, const std::string& name, const std::string& args) {
    const std::string out = *tmp / name;
    RunResult r = train(np, fmt::format("{} --out {} {}", kModel, out, args));
    EXPECT_EQ(r.code, 0) << name << ": " << r.err;
    last_log = r.out + r.err;
    return out;
  }
  std::string reference() { return run(0, "ref", "--val_every 3 --ckpt_every 3"); }
  std::string last_log;
};

// dp 4 = dp_shard 2 x dp_replicate 2 (2 micro-batches per rank: ZeRO-2/3 reduce-scatter each
// inside the shard group, the replicas all-reduce once).
TEST_F(HsdpRuns, ShardTwoReplicateTwoOnFourRanksMatchesOneProcessForEveryZeroStage) {
  const std::string ref = reference();
  for (int z : {0, 1, 2, 3}) {
    const std::string out = run(4, fmt::format("hsdp-z{}", z), fmt::format("--val_every 3 --dp-shard 2 --dp-replicate 2 --zero {}", z));
    expect_parity(out, ref, fmt::format("dp_shard 2 x dp_replicate 2, zero {} (4 ranks)", z));
    EXPECT_NE(last_log.find("dp 4 = dp_shard 2 x dp_replicate 2"), std::string::npos) << last_log;
  }
  // --dp 4 --dp-replicate 2 is the same split (dp_shard derived).
  const std::string derived = run(4, "derived", "--val_every 3 --dp 4 --dp-replicate 2 --zero 3");
  expect_parity(derived, ref, "dp 4, dp_replicate 2 (dp_shard derived), zero 3");
}

TEST_F(HsdpRuns, TpTwoShardTwoReplicateTwoOnEightRanksMatchesOneProcess) {
  const std::string ref = reference();
  const std::string out = run(8, "tp2-hsdp-z3", "--val_every 3 --tp 2 --dp-shard 2 --dp-replicate 2 --zero 3");
  expect_parity(out, ref, "tp 2 x dp_shard 2 x dp_replicate 2, zero 3 (8 ranks)");
  EXPECT_NE(last_log.find("world 8 = tp 2 x dp 4 x pp 1 (order tp-dp-pp; dp 4 = dp_shard 2 x dp_replicate 2)"),
            std::string::npos)
      << last_log;
}

// Checkpoints are layout-free: HSDP (ZeRO-3) -> plain dp 2 (ZeRO-1), and one process -> HSDP (ZeRO-2).
TEST_F(HsdpRuns, CheckpointsMoveBetweenHsdpAndPlainLayouts) {
  const std::string ref = reference();
  const std::string hsdp = run(4, "hsdp", "--val_every 3 --ckpt_every 3 --dp-shard 2 --dp-replicate 2 --zero 3");
  const std::string plain = *tmp / "plain";
  fs::create_directories(plain);
  fs::copy(hsdp + "/step-000003", plain + "/step-000003", fs::copy_options::recursive);
  RunResult r = train(2, fmt::format("{} --val_every 3 --dp 2 --zero 1 --resume --out {}", kModel, plain));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(test::metric_series(plain, "loss").begin()->first, 4);
  expect_parity(plain, ref, "HSDP 2x2 zero 3 -> dp 2 zero 1, steps 4-6", 4);

  const std::string back = *tmp / "back";
  fs::create_directories(back);
  fs::copy(ref + "/step-000003", back + "/step-000003", fs::copy_options::recursive);
  r = train(4, fmt::format("{} --val_every 3 --dp-shard 2 --dp-replicate 2 --zero 2 --resume --out {}", kModel, back));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(test::metric_series(back, "loss").begin()->first, 4);
  expect_parity(back, ref, "one process -> HSDP 2x2 zero 2, steps 4-6", 4);
}

// A ZeRO-3 rank under HSDP holds 1/dp_shard of the model (twice a plain dp 4 rank's 1/4):
// parameters, gradients and optimizer state measured equal the closed form byte for byte.
TEST_F(HsdpRuns, Zero3HsdpRankStateBytesArePredictedExactly) {
  const std::string plain = run(4, "z3-dp4", "--steps 1 --val_batches 0 --dp 4 --zero 3");
  const std::string hsdp = run(4, "z3-hsdp", "--steps 1 --val_batches 0 --dp-shard 2 --dp-replicate 2 --zero 3");
  std::map<std::string, nlohmann::json> by_run;
  for (const auto& [name, dir] : {std::pair<std::string, std::string>{"dp 4", plain}, {"dp_shard 2 x dp_replicate 2", hsdp}}) {
    const nlohmann::json rep = memory_report(dir);
    ASSERT_EQ(rep.size(), 4u) << dir;
    for (const auto& rr : rep) {
      const auto& m = rr["measured"];
      const auto& p = rr["predicted"];
      for (const char* k : {"params", "grads", "optimizer"}) {
        EXPECT_EQ(m[k].get<int64_t>(), static_cast<int64_t>(p[k].get<double>())) << name << ", rank " << rr["rank"] << ": " << k;
      }
      std::printf("[ memory ] zero 3, %s, rank %d: params %lld / %lld, grads %lld / %lld, optimizer %lld / %lld "
                  "(measured / predicted bytes)\n",
                  name.c_str(), rr["rank"].get<int>(), static_cast<long long>(m["params"].get<int64_t>()),
                  static_cast<long long>(p["params"].get<double>()), static_cast<long long>(m["grads"].get<int64_t>()),
                  static_cast<long long>(p["grads"].get<double>()), static_cast<long long>(m["optimizer"].get<int64_t>()),
                  static_cast<long long>(p["optimizer"].get<double>()));
    }
    by_run[name] = rep;
  }
  // Rank r of HSDP holds shard r % 2 of 2; rank r of dp 4 shard r of 4: the optimizer state of
  // ranks 0 and 1 of HSDP equals that of ranks 0+1 and 2+3 of dp 4.
  auto opt = [&](const std::string& run, int rank) {
    return by_run[run][static_cast<size_t>(rank)]["measured"]["optimizer"].get<int64_t>();
  };
  EXPECT_EQ(opt("dp_shard 2 x dp_replicate 2", 0), opt("dp 4", 0) + opt("dp 4", 1));
  EXPECT_EQ(opt("dp_shard 2 x dp_replicate 2", 1), opt("dp 4", 2) + opt("dp 4", 3));
  EXPECT_EQ(opt("dp_shard 2 x dp_replicate 2", 2), opt("dp_shard 2 x dp_replicate 2", 0));  // replica 1 = replica 0
}

// The replicate axis: each rank all-reduces its 1/dp_shard of the gradient once per step,
// where plain data parallelism all-reduces all of it; the communication model says so too.
TEST_F(HsdpRuns, ReplicateAxisCarriesOneShardOfThePlainAllReduce) {
  const std::string plain = run(4, "ar-dp4", "--steps 2 --val_batches 0 --trace --dp 4 --zero 0");
  const std::string hsdp = run(4, "hsdp-z3", "--steps 2 --val_batches 0 --trace --dp-shard 2 --dp-replicate 2 --zero 3");
  const std::string hsdp1 = run(4, "hsdp-z1", "--steps 2 --val_batches 0 --trace --dp-shard 2 --dp-replicate 2 --zero 1");
  // Plain: the gradient all-reduce of the step on the dp axis, less the loss and the 4 ranks'
  // busy times (1 + 4 f64, Engine::step).
  const int64_t all = traced_bytes(plain, 0, 2, "dp", "all_reduce") - 8 * (1 + 4);
  ASSERT_GT(all, 0);
  for (const std::string& run_dir : {hsdp, hsdp1}) {
    // Ranks 0 and 1 hold shards 0 and 1 (ranks 2 and 3 the same shards, the other replica).
    const int64_t r0 = traced_bytes(run_dir, 0, 2, "dp-replicate", "all_reduce");
    const int64_t r1 = traced_bytes(run_dir, 1, 2, "dp-replicate", "all_reduce");
    EXPECT_EQ(r0 + r1, all) << run_dir << ": the shards' all-reduces tile the gradient";
    EXPECT_LE(std::abs(2 * r0 - all), 8) << run_dir;  // 1/dp_shard of it (ceil(n / 2) elements)
    EXPECT_EQ(traced_bytes(run_dir, 2, 2, "dp-replicate", "all_reduce"), r0) << run_dir;
    std::printf("[ bytes ] %s: rank 0 all-reduces %lld bytes across dp_replicate per step, plain dp 4's gradient "
                "all-reduce %lld bytes: ratio %.4f\n",
                run_dir.c_str(), static_cast<long long>(r0), static_cast<long long>(all),
                static_cast<double>(r0) / static_cast<double>(all));
    const nlohmann::json rep = read_json(run_dir + "/comm_report.json");
    EXPECT_EQ(rep["mismatches"].get<int64_t>(), 0) << run_dir << ": the trace differs from the communication model";
  }
}

// What HSDP does not run yet is refused with the values, before any work.
TEST_F(HsdpRuns, UnsupportedCombinationsAreRefusedWithTheNumbers) {
  RunResult r = train(4, fmt::format("{} --out {} --dp-shard 2 --dp-replicate 2 --zero 1 --compression.dp int8", kModel,
                                     *tmp / "refused"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("compression.dp = \"int8\" with dp_replicate 2"), std::string::npos) << r.err;
  r = train(4, fmt::format("{} --out {} --dp 4 --dp-shard 4 --dp-replicate 2", kModel, *tmp / "conflict"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("dp 4 does not equal dp_shard 4 x dp_replicate 2 = 8"), std::string::npos) << r.err;
  r = train(4, fmt::format("{} --out {} --dp-replicate 3", kModel, *tmp / "indivisible"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("dp_replicate 3 does not divide dp 4"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft
