// Every key of a run config is checked before any work: each key below is written down with
// the bad values it must refuse, and a test fails when a key is added without a line here.
// The references are the documented ranges (docs/configuration.md, "What is checked"), not
// the code under test.
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/config.h"

namespace weft {
namespace {

struct BadValue {
  const char* key;
  std::string value;      // as given on the command line (--key value)
  std::string fragment;   // what the message must contain
};

// The message of load_run_config("", {{key, value}}), or "" when it is accepted.
std::string refusal(const std::string& key, const std::string& value) {
  try {
    load_run_config("", {{key, value}});
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kHuge = "99999999999";                  // above INT_MAX
const std::string kInt64Huge = "4611686018427387904";     // 2^62

// The keys whose values are checked without files (validate()), one group per class.
const std::vector<BadValue>& bad_values() {
  static const std::vector<BadValue> v = {
      // [model]: a known preset; shape overrides >= 0 and within int.
      {"model", "gpt-9", "unknown model preset 'gpt-9'"},
      {"init_from", "/nonexistent/checkpoint", "/nonexistent/checkpoint"},
      {"n_layer", "-1", "n_layer -1"}, {"n_layer", kHuge, "n_layer = 99999999999 is too large"},
      {"n_head", "-2", "n_head -2"}, {"n_head", kHuge, "n_head = 99999999999 is too large"},
      {"n_embd", "-1", "n_embd -1"}, {"n_embd", kHuge, "n_embd = 99999999999 is too large"},
      {"n_ctx", "-1", "n_ctx -1"}, {"n_ctx", kHuge, "n_ctx = 99999999999 is too large"},
      {"vocab_size", "-1", "vocab_size -1"}, {"vocab_size", kHuge, "vocab_size = 99999999999 is too large"},
      // [data]
      {"data", "", "data (the shard folder) must not be empty"},
      // [train]
      {"seq_len", "-1", "seq_len"}, {"seq_len", "100000", "longer than the context"},
      {"global_batch", kHuge, "global_batch = 99999999999 is too large"},
      {"micro_batch", kHuge, "micro_batch = 99999999999 is too large"},
      {"steps", "0", "steps must be >= 1"}, {"steps", "-5", "steps must be >= 1"},
      {"steps", kInt64Huge, "tokens of the run = steps 4611686018427387904 x global_batch 8"},
      {"lr", "inf", "train.lr must be a finite number, got inf"}, {"lr", "nan", "train.lr must be a finite number"},
      {"lr", "0", "lr must be positive"}, {"lr", "-1e-3", "lr must be positive"}, {"lr", "1e39", "lr must be positive"},
      {"min_lr_ratio", "nan", "min_lr_ratio must be a finite"}, {"min_lr_ratio", "1.5", "min_lr_ratio must lie in [0, 1]"},
      {"min_lr_ratio", "-0.1", "min_lr_ratio must lie in [0, 1]"},
      {"warmup_steps", "-1", "warmup_steps -1"}, {"lr_decay_steps", "-1", "lr_decay_steps -1"},
      {"weight_decay", "-0.1", "weight_decay must be >= 0"}, {"weight_decay", "inf", "weight_decay must be a finite"},
      {"weight_decay", "nan", "weight_decay must be a finite"},
      {"beta1", "1", "beta1 1"}, {"beta1", "-0.5", "beta1 -0.5"}, {"beta1", "nan", "beta1 must be a finite"},
      {"beta2", "1.5", "beta2 1.5"}, {"beta2", "-inf", "beta2 must be a finite"},
      {"eps", "0", "eps must be positive"}, {"eps", "-1e-8", "eps must be positive"}, {"eps", "1e-50", "eps must be positive"},
      {"eps", "inf", "eps must be a finite"},
      {"grad_clip", "-1", "grad_clip must be >= 0"}, {"grad_clip", "inf", "grad_clip must be a finite"},
      {"grad_clip", "nan", "grad_clip must be a finite"},
      {"seed", "-1", "seed must be >= 0"},
      {"threads", "-1", "threads = -1 must lie in [0, 4096]"}, {"threads", "100000", "threads = 100000 must lie in [0, 4096]"},
      {"head_chunk", "-1", "head_chunk must be >= 0"},
      {"recompute", "sometimes", "sometimes"},
      {"recompute_layers", kHuge, "recompute_layers = 99999999999 is too large"},
      {"precision", "fp8", "fp8"},
      {"loss_scale", "-1", "loss_scale must be >= 0"}, {"loss_scale", "inf", "loss_scale must be a finite"},
      {"initial_loss_scale", "0", "initial_loss_scale 0"}, {"initial_loss_scale", "inf", "initial_loss_scale must be a finite"},
      {"loss_scale_window", "0", "loss_scale_window must be >= 1"},
      {"min_loss_scale", "0", "min_loss_scale 0"}, {"min_loss_scale", "1e9", "min <= initial"},
      {"spike_policy", "maybe", "spike_policy \"maybe\" is not one of"},
      {"spike_zscore", "0", "spike_zscore must be a finite number > 0"}, {"spike_zscore", "inf", "spike_zscore must be a finite"},
      {"spike_window", "1", "spike_window 1 and spike_min_steps 32"},
      {"spike_min_steps", "1", "must satisfy 2 <= spike_min_steps <= spike_window"},
      // [parallel]: the layout rules check divisibility with the world size (layout_rules_test);
      // here the ranges.
      {"tp", kHuge, "tp = 99999999999 is too large"}, {"pp", kHuge, "pp = 99999999999 is too large"},
      {"dp", kHuge, "dp = 99999999999 is too large"}, {"zero", kHuge, "zero = 99999999999 is too large"},
      {"dp_shard", kHuge, "dp_shard = 99999999999 is too large"},
      {"dp_replicate", kHuge, "dp_replicate = 99999999999 is too large"},
      {"virtual_stages", kHuge, "virtual_stages = 99999999999 is too large"},
      {"bucket_mb", "0", "bucket_mb must lie in (0, 1048576]"}, {"bucket_mb", "1e300", "bucket_mb must lie in (0, 1048576]"},
      {"bucket_mb", "nan", "bucket_mb must be a finite"},
      {"prefetch", "-1", "prefetch must be >= 0"}, {"prefetch", kHuge, "prefetch = 99999999999 is too large"},
      {"comm_timeout", "-1", "comm_timeout must lie in [0, 10000000]"}, {"comm_timeout", "1e300", "comm_timeout must lie"},
      {"comm_timeout", "inf", "comm_timeout must be a finite"},
      {"quantized_weights", "maybe", "must be true or false"}, {"quantized_gradients", "2", "must be true or false"},
      {"hpz_partition_size", "0", "zero.hpz_partition_size must lie in [1, 1048576]"},
      {"hierarchy", "4,2", "each level must be a larger multiple"}, {"hierarchy", "1", "every level must hold 2 to"},
      {"hierarchy", "2;8", "must be a list of integers"},
      {"block_size", "0", "zero.block_size must lie in [1, 16777216]"}, {"weight_bits", "6", "zero.weight_bits must be 8 or 4"},
      {"gradient_bits", "3", "zero.gradient_bits must be 8 or 4"},
      {"error_feedback", "true", "zero.error_feedback needs zero.quantized_gradients"},
      // [compression]
      {"params", "int3", "compression.params = \"int3\": not a codec"},
      {"compression.dp", "zfp:0", "compression.dp = \"zfp:0\": zfp needs a rate in bits per value from 1 to 32"},
      {"compression.tp", "zstd:20", "zstd's level must be an integer from 1 to 19"},
      {"compression.pp", "int8:2", "the codec int8 takes no argument"},
      {"compression.block_size", "0", "compression.block_size must lie in [1, 16777216]"},
      {"compression.error_feedback", "true", "compression.error_feedback needs a lossy compression.dp codec"},
      // [data] (ClimaX runs)
      {"balance", "random", "data.balance must be 'count' or 'cost', got 'random'"},
      {"balance", "cost", "data.balance 'cost' deals graphs to ranks by their cost; model 'tiny' (GPT) reads tokens"},
      {"lead_hours", "0", "lead_hours must be positive, got 0"}, {"lead_hours", "6;12", "must be a list of integers"},
      // [eval]
      {"val_every", "-1", "val_every -1"}, {"val_batches", "-1", "val_batches -1"},
      {"val_batches", kInt64Huge, "validation tokens = val_batches 4611686018427387904"},
      {"tasks", "a.jsonl,,b.jsonl", "option --tasks must be a comma-separated list like a.jsonl,b.jsonl"},
      {"tasks_every", "-1", "tasks_every -1"}, {"fewshot", "-1", "fewshot -1"}, {"tasks_limit", "-1", "tasks_limit -1"},
      {"tasks_seed", "-1", "tasks_seed -1"}, {"fewshot", kHuge, "fewshot 99999999999 is too large"},
      // [checkpoint]
      {"ckpt_every", "-1", "ckpt_every -1"}, {"keep_last", "-1", "keep_last -1"},
      // [run]
      {"out", "", "out (the run folder) must not be empty"},
      {"log_every", "0", "log_every must be positive"},
      {"ranks_per_node", "-1", "ranks_per_node must be >= 0"},
      {"ranks_per_node", kHuge, "ranks_per_node = 99999999999 is too large"},
      {"backend", "tpu", "tpu"}, {"comm", "carrier-pigeon", "carrier-pigeon"},
      {"memory_check", "maybe", "memory_check must be on, warn or off, got 'maybe'"},
      // [precision]
      {"matmul", "turbo", "unknown matmul mode 'turbo', expected one of: exact, fast"},
      {"fp32_kernel", "mkl", "unknown fp32_kernel 'mkl', expected one of: openblas, onednn"},
      {"wires", "bf16", "unknown wires 'bf16', expected one of: storage, fp32"},
      {"reduce_dtype", "fp16", "unknown reduce_dtype 'fp16', expected one of: fp32, bf16"},
      // [sample]
      {"sample_tokens", "-1", "sample_tokens must be >= 0"}, {"sample_tokens", kHuge, "sample_tokens = 99999999999 is too large"},
      {"temperature", "0", "temperature must be positive"}, {"temperature", "inf", "temperature must be a finite"},
      {"top_k", "-1", "top_k must be >= 0"}, {"top_k", kHuge, "top_k = 99999999999 is too large"},
  };
  return v;
}

// Keys that take any value of their type (validated elsewhere, or free).
const std::set<std::string> kFreeKeys = {
    "val_data",           // a path, opened with the data (tests/apps/cli_test.cc DataErrors)
    "variables",          // field names, checked against the NetCDF file when it is opened (weather_test)
    "order",              // the layout rules (layout_rules_test)
    "sequence_parallel",  // a bool; the layout rules check it needs tp > 1
    "schedule",           // the layout rules
    "trace",              // a bool
    "on_signal",          // a bool
    "system",             // a path, loaded before the engine (cli_validation_test)
    "sample_prompt",      // any text
    "tokenizer",          // a path, loaded with the tasks before the run (train_tasks_test)
};

TEST(ConfigValidation, EveryKeyHasItsChecksWrittenDown) {
  std::set<std::string> covered(kFreeKeys.begin(), kFreeKeys.end());
  for (const BadValue& b : bad_values()) covered.insert(b.key);
  for (const std::string& full : run_config_keys()) {
    const std::string key = full.substr(full.find('.') + 1);
    EXPECT_TRUE(covered.count(key)) << "key " << full << " has no bad value in this test (add one, or list it as free)";
  }
}

TEST(ConfigValidation, EveryBadValueIsRefusedWithItsValue) {
  for (const BadValue& b : bad_values()) {
    const std::string msg = refusal(b.key, b.value);
    EXPECT_NE(msg.find(b.fragment), std::string::npos) << "--" << b.key << " " << b.value << ": got '" << msg << "'";
  }
}

// Sizes that fit int one by one but whose products leave int64 are refused naming the factors.
TEST(ConfigValidation, OverflowingProductsAreRefused) {
  auto refuse = [](const std::vector<std::pair<std::string, std::string>>& o) {
    try {
      load_run_config("", o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string m = refuse({{"n_layer", "2000000000"}, {"n_embd", "500000000"}, {"n_head", "1"}});
  EXPECT_NE(m.find("overflows a 64-bit integer"), std::string::npos) << m;
  EXPECT_NE(m.find("n_embd 500000000 x n_layer 2000000000"), std::string::npos) << m;
  m = refuse({{"n_embd", "2000000000"}});  // its MLP width 4 x n_embd leaves int
  EXPECT_NE(m.find("model.n_embd = 2000000000 is too large (at most 536870911)"), std::string::npos) << m;
  m = refuse({{"global_batch", "2000000000"}, {"micro_batch", "2000000000"}, {"steps", "4000000000"}});
  EXPECT_NE(m.find("tokens of the run = steps 4000000000 x global_batch 2000000000"), std::string::npos) << m;
}

TEST(ConfigValidation, TheDefaultsAndTheLimitsThemselvesAreAccepted) {
  EXPECT_EQ(refusal("steps", "1"), "");
  EXPECT_EQ(refusal("threads", "4096"), "");
  EXPECT_EQ(refusal("eps", "1e-30"), "");
  EXPECT_EQ(refusal("grad_clip", "0"), "");
  EXPECT_EQ(refusal("comm_timeout", "0"), "");
  EXPECT_EQ(refusal("memory_check", "off"), "");
  EXPECT_EQ(refusal("memory_check", "warn"), "");
}

}  // namespace
}  // namespace weft
