// In-context-learning scoring (train/icl_eval.h): lm-evaluation-harness's request encoding,
// the few-shot draw, acc and acc_norm, and the log-likelihoods of a tiny model against a hand
// computation from its logits.
#include "train/icl_eval.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "comm/self_comm.h"
#include "core/error.h"
#include "engine/engine.h"
#include "train/engine_config.h"

namespace weft {
namespace {

// A byte tokenizer (one id per byte, 1 + the byte) whose merges are known: "ab" is one token,
// 300, so that encode(context + continuation) may differ from encode(context) + encode(cont).
IclEncoder byte_encoder() {
  IclEncoder e;
  e.prefix_token = 0;
  e.encode = [](std::string_view s) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == 'a' && i + 1 < s.size() && s[i + 1] == 'b') {
        out.push_back(300);
        ++i;
      } else {
        out.push_back(1 + static_cast<unsigned char>(s[i]));
      }
    }
    return out;
  };
  return e;
}

std::vector<int32_t> ids(std::string_view s) { return byte_encoder().encode(s); }

TEST(IclEval, RequestsAreEncodedAsTheHarnessDoes) {
  const IclEncoder enc = byte_encoder();
  // The continuation's tokens are the whole's after the context's: "xa" + "b" -> [x, ab]: the
  // context's last token merges away and the continuation is what follows the context's count.
  IclRequest r = icl_request("xa", "bc", enc, 64);
  EXPECT_EQ(r.targets, (std::vector<int32_t>{1 + 'c'}));
  EXPECT_EQ(r.input, (std::vector<int32_t>{1 + 'x', 1 + 'a'}));
  // Trailing whitespace of the context moves to the continuation.
  r = icl_request("Q: hi ", "yes", enc, 64);
  EXPECT_EQ(r.targets, ids(" yes"));
  EXPECT_EQ(r.input.size(), ids("Q: hi").size() + ids(" yes").size() - 1);
  // An empty context reads the prefix token.
  r = icl_request("", "hi", enc, 64);
  EXPECT_EQ(r.input, (std::vector<int32_t>{0, 1 + 'h'}));
  EXPECT_EQ(r.targets, ids("hi"));
  // Cut from the left to n_ctx + 1 tokens, the last dropped: n_ctx inputs.
  r = icl_request("0123456789", " xy", enc, 6);
  EXPECT_EQ(r.input.size(), 6u);
  EXPECT_EQ(r.input.back(), 1 + 'x');
  EXPECT_EQ(r.targets, ids(" xy"));
  EXPECT_THROW(icl_request("c", " too long", enc, 4), InputError);
}

TEST(IclEval, FewShotExamplesAreDrawnAlikeAndNeverTheItem) {
  for (int64_t i = 0; i < 20; ++i) {
    const std::vector<int64_t> a = icl_fewshot_indices(20, i, 5, 7);
    EXPECT_EQ(a, icl_fewshot_indices(20, i, 5, 7));
    ASSERT_EQ(a.size(), 5u);
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_NE(a[k], i);
      EXPECT_GE(a[k], 0);
      EXPECT_LT(a[k], 20);
      for (size_t l = 0; l < k; ++l) EXPECT_NE(a[k], a[l]);
    }
  }
  EXPECT_NE(icl_fewshot_indices(1000, 3, 5, 7), icl_fewshot_indices(1000, 3, 5, 8));
  EXPECT_THROW(icl_fewshot_indices(3, 0, 3, 1), InputError);
  // The texts: examples (gold continuation) joined by the few-shot delimiter, then the item.
  IclTask t;
  t.kind = IclKind::kMultipleChoice;
  t.format = "multiple_choice";
  t.items = {{{"Q1"}, {"a1", "b1"}, 1}, {{"Q2"}, {"a2", "b2"}, 0}};
  IclOptions o;
  o.fewshot = 1;
  const auto texts = icl_item_texts(t, 0, o);
  ASSERT_EQ(texts.size(), 2u);
  EXPECT_EQ(texts[0].first, "Q2 a2\n\nQ1");
  EXPECT_EQ(texts[1].second, " b1");
  // Schema items score one continuation after each context option.
  t.kind = IclKind::kSchema;
  t.format = "schema";
  t.items = {{{"c1", "c2"}, {"end"}, 1}};
  o.fewshot = 0;
  const auto sch = icl_item_texts(t, 0, o);
  ASSERT_EQ(sch.size(), 2u);
  EXPECT_EQ(sch[1].first, "c2");
  EXPECT_EQ(sch[1].second, " end");
}

TEST(IclEval, AccuracyAndLengthNormalisedAccuracy) {
  IclTask t;
  t.kind = IclKind::kMultipleChoice;
  t.format = "multiple_choice";
  // Item 0: raw picks the short wrong choice, per-character the long gold one. Item 1: a tie
  // goes to the first (numpy's argmax).
  t.items = {{{"q"}, {"xx", "yyyyyyyy"}, 1}, {{"q"}, {"a", "b"}, 1}};
  const IclTaskResult r = icl_accuracy(t, 2, {{-4.0, false}, {-8.0, false}, {-1.0, false}, {-1.0, false}});
  EXPECT_DOUBLE_EQ(r.acc, 0.0);
  EXPECT_DOUBLE_EQ(r.acc_norm, 0.5);
  EXPECT_TRUE(r.has_norm);
  EXPECT_NEAR(r.acc_norm_stderr, std::sqrt(0.25 * 2 / 1 / 2), 1e-12);
  // Language modelling: right when greedy.
  IclTask lm;
  lm.kind = IclKind::kLanguageModeling;
  lm.format = "language_modeling";
  lm.items = {{{"c"}, {"x"}, 0}, {{"c"}, {"y"}, 0}, {{"c"}, {"z"}, 0}};
  const IclTaskResult l = icl_accuracy(lm, 3, {{-1.0, true}, {-9.0, false}, {-2.0, true}});
  EXPECT_NEAR(l.acc, 2.0 / 3.0, 1e-12);
  EXPECT_FALSE(l.has_norm);
  // icl_score: log-softmax sums and greedy.
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 0.0f};
  const std::vector<int32_t> targets = {2, 1};
  const IclScore s = icl_score(logits.data(), 3, targets.data(), 2);
  const double want = (2 - std::log(1 + std::exp(1.0) + std::exp(2.0))) + (0 - std::log(std::exp(3.0) + 2));
  EXPECT_NEAR(s.loglikelihood, want, 1e-12);
  EXPECT_FALSE(s.greedy);
}

// A tiny GPT (random weights) scores a task; each request's log-likelihood equals the sum of
// log-softmax of its continuation's tokens computed here from the logits of the whole sequence.
TEST(IclEval, TinyModelMatchesAHandComputation) {
  auto be = make_cpu_backend();
  auto world = make_self_communicator();
  RunConfig rc;
  rc.model = "tiny";
  rc.seq_len = 32;
  rc.global_batch = 1;
  rc.micro_batch = 1;
  EngineConfig ec = engine_config(rc, 1);
  ec.training = false;
  Engine engine(ec, *world, *be);
  engine.init_params(5);
  IclTask t;
  t.name = "hand";
  t.kind = IclKind::kMultipleChoice;
  t.format = "multiple_choice";
  t.items = {{{"The cab"}, {"in", "abba", "xyz"}, 2}, {{"ab ab "}, {"q", "ab"}, 0}};
  const IclEncoder enc = byte_encoder();
  IclOptions o;
  const IclTaskResult r = evaluate_icl_task(engine, t, enc, o);
  ASSERT_EQ(r.scores.size(), 5u);
  const int64_t V = engine.config().model.vocab_size;
  size_t k = 0;
  std::vector<double> lls;
  for (int64_t i = 0; i < 2; ++i) {
    for (const auto& [c, x] : icl_item_texts(t, i, o)) {
      const IclRequest q = icl_request(c, x, enc, engine.config().model.n_ctx);
      std::vector<int32_t> seq = q.input;
      const int64_t T = static_cast<int64_t>(seq.size()), n = static_cast<int64_t>(q.targets.size());
      std::vector<float> all(static_cast<size_t>(T * V));
      engine.logits(seq.data(), T, 0, all.data());
      double ll = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float* row = all.data() + (T - n + j) * V;
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]));
        ll += static_cast<double>(row[q.targets[static_cast<size_t>(j)]]) - std::log(z);
      }
      EXPECT_NEAR(r.scores[k].loglikelihood, ll, 1e-6 * std::abs(ll)) << "item " << i << " request " << k;
      lls.push_back(ll);
      ++k;
    }
  }
  // And the accuracies follow from them.
  const auto pick = [](const std::vector<double>& v, std::vector<double> len) {
    size_t b = 0;
    for (size_t j = 0; j < v.size(); ++j) {
      if (v[j] / len[j] > v[b] / len[b]) b = j;
    }
    return b;
  };
  const size_t a0 = pick({lls[0], lls[1], lls[2]}, {1, 1, 1}), a1 = pick({lls[3], lls[4]}, {1, 1});
  const size_t n0 = pick({lls[0], lls[1], lls[2]}, {2, 4, 3}), n1 = pick({lls[3], lls[4]}, {1, 2});
  EXPECT_DOUBLE_EQ(r.acc, ((a0 == 2) + (a1 == 0)) / 2.0);
  EXPECT_DOUBLE_EQ(r.acc_norm, ((n0 == 2) + (n1 == 0)) / 2.0);
}

}  // namespace
}  // namespace weft
