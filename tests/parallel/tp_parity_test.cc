// Tensor parallelism by layout parity (fp32, 1e-5 relative, 12 steps): tp 2 and 4, tp 2 x dp 2
// with ZeRO-1; checkpoints are layout-free (tp 2 resumes from tp 1 and the reverse, writing the
// same model.safetensors); the trace has 4 all-reduces of B*T*C per layer and micro-batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "model/params.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

using test::expect_same_series;
using test::metric_series;

class TensorParallelRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("tp", "seq_len = 64\nglobal_batch = 4\nmicro_batch = 2\nseed = 777\n", 2); }
};

TEST_F(TensorParallelRuns, Tp2Tp4AndTp2xDp2MatchOneProcess) {
  RunResult r = train(0, "--out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss"), ref_val = metric_series(*tmp / "ref", "val_loss");
  ASSERT_EQ(ref.size(), 12u);
  const std::vector<std::pair<int, std::string>> layouts = {
      {2, "--tp 2"},
      {4, "--tp 4"},
      {2, "--tp 2 --sequence_parallel true"},
      {4, "--tp 4 --sequence_parallel true"},
      {4, "--tp 2 --dp 2 --zero 1 --micro_batch 1"},
      {4, "--tp 2 --dp 2 --zero 3 --micro_batch 1 --sequence_parallel true"}};
  for (const auto& [np, args] : layouts) {
    const std::string out = *tmp / fmt::format("run{}", n);
    r = train(np, args + " --out " + out);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    expect_same_series(metric_series(out, "loss"), ref, args);
    expect_same_series(metric_series(out, "val_loss"), ref_val, args + " (validation)");
  }
}

TEST_F(TensorParallelRuns, CheckpointsAreLayoutFree) {
  // tp 1 for 6 steps, then tp 2 resumes; tp 2 for 6 steps, then tp 1 resumes: both reach the
  // single-process curve, and the tp 2 run's checkpoint equals the tp 1 run's to float tolerance.
  RunResult r = train(0, "--ckpt_every 6 --out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss");
  fs::create_directories(*tmp / "a");
  fs::copy(*tmp / "ref/step-000006", *tmp / "a/step-000006", fs::copy_options::recursive);
  r = train(2, "--tp 2 --resume --out " + *tmp / "a");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_series(metric_series(*tmp / "a", "loss"), ref, "tp 1 -> tp 2");

  r = train(2, "--tp 2 --ckpt_every 6 --out " + *tmp / "b");
  ASSERT_EQ(r.code, 0) << r.err;
  fs::create_directories(*tmp / "c");
  fs::copy(*tmp / "b/step-000006", *tmp / "c/step-000006", fs::copy_options::recursive);
  r = train(0, "--resume --out " + *tmp / "c");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_series(metric_series(*tmp / "c", "loss"), ref, "tp 2 -> tp 1");
  // The tp 2 checkpoint holds the same tensors (names, shapes) as the tp 1 one, values within fp32 tolerance.
  const std::string a = test::read_text(*tmp / "ref/step-000006/model.safetensors");
  const std::string b = test::read_text(*tmp / "b/step-000006/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  uint64_t hlen = 0;
  std::memcpy(&hlen, a.data(), 8);
  EXPECT_EQ(a.substr(0, 8 + hlen), b.substr(0, 8 + hlen));  // identical header: names, shapes, offsets
  const float* fa = reinterpret_cast<const float*>(a.data() + 8 + hlen);
  const float* fb = reinterpret_cast<const float*>(b.data() + 8 + hlen);
  const size_t count = (a.size() - 8 - hlen) / 4;
  double num = 0, den = 0;
  for (size_t i = 0; i < count; ++i) {
    num += (double(fa[i]) - fb[i]) * (double(fa[i]) - fb[i]);
    den += double(fa[i]) * fa[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

TEST_F(TensorParallelRuns, TraceHasFourActivationAllReducesPerLayer) {
  const std::string out = *tmp / "trace";
  RunResult r = train(2, "--tp 2 --steps 2 --val_batches 0 --trace true --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const int64_t B = 2, T = 64, C = 256, L = 4, micro = 2;  // global 4 / micro 2, one dp replica
  std::ifstream in(out + "/trace-rank0.jsonl");
  std::string line;
  int64_t full = 0, calls = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["step"] != 2 || j["axis"] != "tp" || j["phase"] != "train") continue;  // the step, not its checkpoint
    ++calls;
    EXPECT_EQ(j["kind"], "all_reduce");
    if (j["bytes"].get<int64_t>() == B * T * C * 4) ++full;
  }
  // Per micro-batch: 2 per layer forward (after c_proj and mlp.c_proj), 2 per layer backward
  // (the inputs of c_attn and c_fc), plus the vocabulary-parallel embedding (forward) and the
  // head's input gradient.
  EXPECT_EQ(full, micro * (4 * L + 2));
  // Besides: the cross-entropy's per-row maxima and sums (2 small all-reduces per micro-batch,
  // one chunk) and the gradient norm's sum over the tp ranks (once per step).
  EXPECT_EQ(calls, full + micro * 2 + 1);
}

TEST_F(TensorParallelRuns, SequenceParallelTraceHasGathersAndScatters) {
  const std::string out = *tmp / "trace-sp";
  RunResult r = train(2, "--tp 2 --sequence_parallel true --steps 2 --val_batches 0 --trace true --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const int64_t B = 2, T = 64, C = 256, L = 4, micro = 2;
  std::ifstream in(out + "/trace-rank0.jsonl");
  std::string line;
  std::map<std::string, int64_t> full, calls;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["step"] != 2 || j["axis"] != "tp" || j["phase"] != "train") continue;  // the step, not its checkpoint
    ++calls[j["kind"]];
    if (j["bytes"].get<int64_t>() == B * T * C * 4) ++full[j["kind"]];
  }
  // The all-reduces of B*T*C become all-gathers and reduce-scatters of the same volume: per
  // layer and micro-batch 2 + 2 in forward (before c_attn and c_fc / after their row-parallel
  // partners) and 2 + 2 in backward, plus the embedding (scatter), the head's input (gather)
  // and their backward conjugates.
  EXPECT_EQ(full["all_gather"], micro * (4 * L + 2));
  EXPECT_EQ(full["reduce_scatter"], micro * (4 * L + 2));
  EXPECT_EQ(full["all_reduce"], 0);
  // Small all-reduces: cross-entropy statistics (2 per micro-batch), the LayerNorm gradients
  // of the rows each rank holds (2 per layer + the final norm, per micro-batch), the norm.
  EXPECT_EQ(calls["all_reduce"], micro * (2 + 2 * L + 1) + 1);
}

TEST(TensorParallelLayout, SplitMatricesAreOneOverTp) {
  const ModelConfig cfg = model_preset("tiny");
  const ParamLayout whole = param_layout(cfg);
  for (int tp : {2, 4}) {
    int64_t split_local = 0, split_full = 0, repl = 0;
    const ParamLayout part = param_layout(cfg, tp, tp - 1);
    for (size_t k = 0; k < part.tensors().size(); ++k) {
      const ParamTensor& t = part.tensors()[k];
      if (t.split == TpSplit::kReplicated) {
        repl += t.numel;
        EXPECT_EQ(t.numel, whole.tensors()[k].numel) << t.name;
      } else {
        split_local += t.numel;
        split_full += whole.tensors()[k].numel;
      }
    }
    EXPECT_EQ(split_local * tp, split_full);
    EXPECT_EQ(part.total(), repl + split_full / tp);
    // The parts of all ranks tile every whole tensor exactly once.
    std::vector<int> hits(whole.total(), 0);
    for (int r = 0; r < tp; ++r) {
      const ParamLayout p = param_layout(cfg, tp, r);
      for (size_t k = 0; k < p.tensors().size(); ++k) {
        const ParamTensor& t = p.tensors()[k];
        if (t.split == TpSplit::kReplicated) continue;
        for (int64_t i = 0; i < t.numel; ++i) ++hits[whole.tensors()[k].offset + p.global_index(t, i)];
      }
    }
    for (const ParamTensor& t : whole.tensors()) {
      if (t.name.ends_with("ln_1.weight") || t.numel == cfg.n_embd) continue;  // replicated vectors
      if (param_layout(cfg, tp, 0).tensors()[t.id].split == TpSplit::kReplicated) continue;
      for (int64_t i = 0; i < t.numel; ++i) ASSERT_EQ(hits[t.offset + i], 1) << t.name << " element " << i;
    }
  }
}

// Fewer kv heads than ranks (Megatron-LM's replication): each rank holds its query heads and
// kv head r / (tp / kv); every q column once over the ranks, every k and v column on tp / kv
// ranks; the initial values are the whole model's; the parts written back rebuild the whole
// buffer; the copies the gradient norm leaves out are exactly the non-first replicas' kv columns.
TEST(TensorParallelLayout, KvHeadsFewerThanRanksAreReplicated) {
  for (const auto& [kv, tp] : std::vector<std::pair<int, int>>{{1, 2}, {1, 4}, {2, 4}}) {
    ModelConfig cfg = model_preset("llama-tiny");
    cfg.block.n_kv_head = kv;
    const int64_t C = cfg.n_embd, hd = cfg.head_dim(), W = cfg.qkv_width(), rep = tp / kv;
    EXPECT_EQ(cfg.kv_replicas(tp), rep);
    EXPECT_EQ(cfg.qkv_width_local(tp), C / tp + 2 * hd);
    const ParamLayout whole = param_layout(cfg);
    std::vector<float> all(whole.total()), rebuilt(whole.total(), 0.0f);
    init_params(whole, 5, all.data());
    std::vector<int> hits(whole.total(), 0);
    for (int r = 0; r < tp; ++r) {
      const ParamLayout p = param_layout(cfg, tp, r);
      std::vector<float> mine(p.total()), expect(p.total());
      init_params(p, 5, mine.data());
      extract_tp_part(p, whole, all.data(), expect.data());
      EXPECT_EQ(mine, expect) << "kv " << kv << " tp " << tp << " rank " << r;
      insert_tp_part(p, whole, mine.data(), rebuilt.data());
      int64_t copies = 0;
      for (const auto& [b, e] : p.replica_copies()) copies += e - b;
      for (size_t k = 0; k < p.tensors().size(); ++k) {
        const ParamTensor& t = p.tensors()[k];
        if (t.split == TpSplit::kReplicated) continue;
        for (int64_t i = 0; i < t.numel; ++i) ++hits[whole.tensors()[k].offset + p.global_index(t, i)];
        if (!t.name.ends_with("c_attn.weight")) continue;
        ASSERT_EQ(t.shape, (std::vector<int64_t>{C, C / tp + 2 * hd})) << t.name;
        // Local column C/tp (its k) is whole column C + (r / rep) hd; C/tp + hd (its v) is C + KV + ...
        EXPECT_EQ(p.global_index(t, C / tp), C + (r / rep) * hd) << t.name << " rank " << r;
        EXPECT_EQ(p.global_index(t, C / tp + hd), C + kv * hd + (r / rep) * hd) << t.name << " rank " << r;
      }
      // A non-first replica leaves out its k and v columns (C rows of 2 hd a layer; no biases).
      EXPECT_EQ(copies, r % rep == 0 ? 0 : cfg.n_layer * C * 2 * hd) << "kv " << kv << " tp " << tp << " rank " << r;
    }
    EXPECT_EQ(rebuilt, all);
    for (const ParamTensor& t : whole.tensors()) {
      if (!t.name.ends_with("c_attn.weight")) continue;
      for (int64_t i = 0; i < t.numel; ++i) {
        ASSERT_EQ(hits[t.offset + i], i % W < C ? 1 : rep) << t.name << " element " << i;
      }
    }
  }
}

// Heads the ranks split but kv heads that neither split among them nor divide them: refused,
// naming the values, by the model and by the layout rules.
TEST(TensorParallelLayout, KvHeadsNeitherSplitNorReplicatedAreRefused) {
  ModelConfig cfg = model_preset("llama-tiny");
  cfg.n_embd = 384;
  cfg.n_head = 6;
  cfg.block.n_kv_head = 3;
  try {
    check_tp_split(cfg, 2);
    FAIL() << "3 kv heads over tp 2 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("3 key/value heads (n_kv_head) neither divide among tp 2 ranks nor divide tp"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_tp_split(cfg, 3));  // 1 kv head a rank
  EXPECT_NO_THROW(check_tp_split(cfg, 6));  // each on 2 ranks
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {
// Pipeline stage parts of the layout: each stage holds its layers, the first the embedding,
// the last the final norm and (tied head) the embedding too; the values initialised in a
// part equal the whole model's.
TEST(StageLayout, PartsHoldTheirGroupsAndTheWholeModelsValues) {
  const ModelConfig cfg = model_preset("tiny");
  const ParamLayout whole = param_layout(cfg);
  std::vector<float> all(whole.total());
  init_params(whole, 9, all.data());
  const StageSpec stages[] = {{0, 2, true, false}, {2, 1, false, false}, {3, 1, false, true}};
  int64_t layer_elems = 0;
  for (const StageSpec& s : stages) {
    for (int tp : {1, 2}) {
      const ParamLayout part = param_layout(cfg, tp, tp - 1, s);
      EXPECT_EQ(part.has_group(0), s.embedding || s.head);
      EXPECT_EQ(part.has_group(cfg.n_layer + 1), s.head);
      for (int l = 0; l < cfg.n_layer; ++l) {
        EXPECT_EQ(part.has_group(l + 1), l >= s.first_layer && l < s.first_layer + s.num_layers);
      }
      std::vector<float> mine(part.total()), expect(part.total());
      init_params(part, 9, mine.data());
      extract_tp_part(part, whole, all.data(), expect.data());
      EXPECT_EQ(mine, expect);
      if (tp == 1) {
        for (int l = s.first_layer; l < s.first_layer + s.num_layers; ++l) {
          auto [b, e] = part.layer_range(l);
          layer_elems += e - b;
        }
      }
    }
  }
  EXPECT_EQ(layer_elems, whole.layer_range(3).second - whole.layer_range(0).first);
}
}  // namespace
}  // namespace weft
