// Every number read from a checkpoint's JSON (safetensors header, config.json, trainer.json)
// is range-checked, with the file and the key named: 1e999, -1, 2^63, a float for an integer,
// a huge header length, overlapping or out-of-file offsets.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "ckpt_test_util.h"
#include "core/error.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"
#include "train/run_folder.h"

namespace weft {
namespace {

using testing_ckpt::make_unverified;
using testing_ckpt::read_bytes;
using testing_ckpt::safetensors_bytes;
using testing_ckpt::TempDir;
using testing_ckpt::write_bytes;

using testing_ckpt::input_error_message;

// The error of opening a safetensors file whose header is `header` over a 16-byte buffer.
std::string header_error(const TempDir& tmp, const std::string& header, uint64_t header_len = 0) {
  const std::string path = tmp / "x.safetensors";
  write_bytes(path, safetensors_bytes(header, std::string(16, '\0'), header_len ? header_len : header.size()));
  return input_error_message([&] { SafetensorsFile f(path); });
}

TEST(CheckpointNumbers, SafetensorsHeaderNumbers) {
  TempDir tmp;
  const std::string path = tmp / "x.safetensors";
  auto entry = [](const std::string& offsets, const std::string& shape = "[4]") {
    return "{\"a\": {\"dtype\": \"F32\", \"shape\": " + shape + ", \"data_offsets\": " + offsets + "}}";
  };
  std::string m = header_error(tmp, entry("[0, 1e999]"));
  EXPECT_NE(m.find(path + ": header (") , std::string::npos) << m;
  EXPECT_NE(m.find("number overflow"), std::string::npos) << m;
  m = header_error(tmp, entry("[-1, 16]"));
  EXPECT_NE(m.find("tensor 'a' has data_offsets [-1,16], expected [begin, end] with non-negative integers"),
            std::string::npos) << m;
  m = header_error(tmp, entry("[0, 16.0]"));
  EXPECT_NE(m.find("tensor 'a' has data_offsets [0,16.0]"), std::string::npos) << m;
  m = header_error(tmp, entry("[9223372036854775808, 9223372036854775824]"));
  EXPECT_NE(m.find("beyond the data buffer of 16 bytes"), std::string::npos) << m;
  m = header_error(tmp, entry("[0, 16]", "[9223372036854775808]"));
  EXPECT_NE(m.find("expected non-negative integers"), std::string::npos) << m;
  m = header_error(tmp, entry("[0, 16]", "[4294967296, 4294967296]"));
  EXPECT_NE(m.find("has too many elements"), std::string::npos) << m;
  m = header_error(tmp, entry("[0, 8]"));
  EXPECT_NE(m.find("needs 16 bytes but its data_offsets [0, 8] span 8 bytes"), std::string::npos) << m;
  m = header_error(tmp, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                        " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}");
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;
  m = header_error(tmp, entry("[8, 24]"));
  EXPECT_NE(m.find("data_offsets [8, 24] beyond the data buffer of 16 bytes"), std::string::npos) << m;
  m = header_error(tmp, entry("[0, 16]"), uint64_t{1} << 62);
  EXPECT_NE(m.find("header length 4611686018427387904 bytes is above the limit"), std::string::npos) << m;
  m = header_error(tmp, entry("[0, 16]"), 1000);
  EXPECT_NE(m.find("header length 1000 bytes is more than the"), std::string::npos) << m;
}

// config.json's sizes: each bad value names the file and the key.
TEST(CheckpointNumbers, ConfigJsonNumbers) {
  TempDir tmp;
  const ModelConfig layout_cfg = make_model_config("micro", 2, 2, 32, 16, 100, 0);
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params(static_cast<size_t>(layout.total()), 0.0f);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, params.data(), nullptr, nullptr, {}});
  make_unverified(dir);  // reach the parser's checks behind the checksum
  const std::string path = dir + "/config.json";
  const std::string good = read_bytes(path);
  auto with = [&](const std::string& key, const std::string& value) {
    const std::string needle = "\"" + key + "\": ";
    std::string text = good;
    const size_t at = text.find(needle) + needle.size();
    text.replace(at, text.find_first_of(",\n", at) - at, value);
    write_bytes(path, text);
    return input_error_message([&] { load_checkpoint_config(dir); });
  };
  EXPECT_NE(with("n_layer", "1e999").find(path + ": the model config is not valid JSON"), std::string::npos);
  EXPECT_EQ(with("n_layer", "-1"), path + ": key 'n_layer' is -1, expected an integer from 1 to 100000");
  EXPECT_EQ(with("n_head", "9223372036854775808"),
            path + ": key 'n_head' is 9223372036854775808, expected an integer from 1 to 65536");
  EXPECT_EQ(with("n_embd", "32.0"), path + ": key 'n_embd' is 32.0, expected an integer");
  EXPECT_EQ(with("vocab_size", "100000000000"),
            path + ": key 'vocab_size' is 100000000000, expected an integer from 1 to 67108864");
  EXPECT_EQ(with("n_positions", "0"), path + ": key 'n_positions' is 0, expected an integer from 1 to 16777216");
  EXPECT_EQ(with("n_layer", "200000"), path + ": key 'n_layer' is 200000, expected an integer from 1 to 100000");
  EXPECT_NE(with("n_head", "3").find("hidden size 32 is not divisible by the number of heads 3"), std::string::npos);
  EXPECT_NE(with("layer_norm_epsilon", "1e300").find("key 'layer_norm_epsilon' is 1e+300, expected a positive number"),
            std::string::npos);
}

// trainer.json: every key of the resume state in range, named with the file.
TEST(CheckpointNumbers, TrainerStateNumbers) {
  const std::string path = "run/step-000004/trainer.json";
  auto err = [&](const std::string& text) {
    return input_error_message([&] { parse_resume_state(nlohmann::json::parse(text), path); });
  };
  const ResumeState ok = parse_resume_state(
      nlohmann::json::parse(R"({"step": 4, "optimizer_steps": 3, "loss_scale": 65536.0, "loss_scale_good_steps": 2,
                               "seed": -7, "global_batch": 8})"), path);
  EXPECT_EQ(ok.step, 4);
  EXPECT_EQ(ok.optimizer_steps, 3);
  EXPECT_EQ(ok.loss_scale, 65536.0);
  EXPECT_EQ(ok.loss_scale_good_steps, 2);
  EXPECT_EQ(ok.seed, -7);
  EXPECT_EQ(ok.global_batch, 8);
  EXPECT_EQ(parse_resume_state(nlohmann::json::parse(R"({"step": 6})"), path).optimizer_steps, 6);
  const std::string corrupted = ": the trainer state is corrupted";
  EXPECT_EQ(err(R"({"step": -1})"), path + ": key 'step' is -1, expected an integer from 0 to 1000000000000" + corrupted);
  EXPECT_EQ(err(R"({"step": 9223372036854775808})"),
            path + ": key 'step' is 9223372036854775808, expected an integer from 0 to 1000000000000" + corrupted);
  EXPECT_EQ(err(R"({"step": 4.5})"), path + ": key 'step' is 4.5, expected an integer from 0 to 1000000000000" + corrupted);
  EXPECT_EQ(err(R"({"step": "4"})"), path + ": key 'step' is \"4\", expected an integer from 0 to 1000000000000" + corrupted);
  EXPECT_EQ(err(R"({"step": 4, "optimizer_steps": 5})"),
            path + ": key 'optimizer_steps' is 5, expected an integer from 0 to 4" + corrupted);
  EXPECT_EQ(err(R"({"step": 4, "loss_scale": -2.0})"),
            path + ": key 'loss_scale' is -2.0, expected a positive finite number" + corrupted);
  EXPECT_EQ(err(R"({"step": 4, "loss_scale": 1e300})"),
            path + ": key 'loss_scale' is 1e+300, expected a positive finite number" + corrupted);
  EXPECT_EQ(err(R"({"step": 4, "loss_scale": 2.0, "loss_scale_good_steps": -3})"),
            path + ": key 'loss_scale_good_steps' is -3, expected an integer from 0 to 4" + corrupted);
  EXPECT_NE(err(R"({"step": 4, "seed": 1.5})").find(path + ": key 'seed' is 1.5"), std::string::npos);
  EXPECT_EQ(err(R"({"step": 4, "global_batch": 0})"),
            path + ": key 'global_batch' is 0, expected an integer from 1 to 2147483647" + corrupted);
  EXPECT_EQ(err(R"({"optimizer_steps": 4})"), path + ": key 'step' is missing");
  EXPECT_EQ(err("[4]"), path + ": expected a JSON object, found a array");
}

// trainer.json with a number JSON cannot hold: not valid JSON, named with the file.
TEST(CheckpointNumbers, TrainerJsonOverflow) {
  TempDir tmp;
  const ModelConfig layout_cfg = make_model_config("micro", 2, 2, 32, 16, 100, 0);
  const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params(static_cast<size_t>(layout.total()), 0.0f);
  const std::string dir = tmp / "ck";
  save_checkpoint(dir, {&layout_cfg, &layout, params.data(), nullptr, nullptr, {{"step", 4}}});
  make_unverified(dir);
  write_bytes(dir + "/trainer.json", "{\"step\": 1e999}");
  const std::string m = input_error_message([&] { load_checkpoint_trainer(dir); });
  EXPECT_NE(m.find(dir + "/trainer.json: the trainer state is not valid JSON"), std::string::npos) << m;
}

}  // namespace
}  // namespace weft
