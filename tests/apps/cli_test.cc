// The command line on bad input: one clear line on stderr naming the values, exit code 2,
// nothing already written damaged. And the commands' normal output formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "ckpt/manifest.h"
#include "ckpt/safetensors.h"
#include "model/params.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

// Exit code 2, one line on stderr, containing every expected fragment.
void expect_bad_input(const RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, 2) << "stderr: " << r.err;
  std::string first = r.err.substr(0, r.err.find('\n'));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr should be one line: " << r.err;
  for (const auto& f : fragments) EXPECT_NE(first.find(f), std::string::npos) << "missing '" << f << "' in: " << first;
}

class Cli : public test::CliFixture {
 protected:
  Cli() : CliFixture("cli") {}
};

TEST_F(Cli, ConfigErrors) {
  expect_bad_input(weft("train " + *tmp / "nope.toml"), {"nope.toml", "does not exist"});
  std::ofstream(*tmp / "unknown.toml") << "[train]\nlrr = 1.0\n";
  expect_bad_input(weft("train " + *tmp / "unknown.toml"), {"unknown.toml", "unknown key 'train.lrr'"});
  std::ofstream(*tmp / "type.toml") << "[train]\nlr = \"fast\"\n";
  expect_bad_input(weft("train " + *tmp / "type.toml"), {"train.lr", "must be a number", "fast"});
  std::ofstream(*tmp / "syntax.toml") << "[train\nlr = 1\n";
  expect_bad_input(weft("train " + *tmp / "syntax.toml"), {"syntax.toml", "invalid TOML"});
  expect_bad_input(weft("train " + config + " --lrr 3"), {"unknown option --lrr"});
  expect_bad_input(weft("train " + config + " --steps many"), {"--steps", "integer", "many"});
  expect_bad_input(weft("train " + config + " --seq_len 64"), {"seq_len 64", "context", "16"});
  expect_bad_input(weft("train " + config + " --global_batch 3"), {"global batch 3", "micro batch 2 x dp 1"});
  expect_bad_input(weft("train " + config + " --model gpt-9"), {"unknown model preset 'gpt-9'"});
  expect_bad_input(weft("train " + config + " --n_head 3"), {"32", "heads 3"});
  expect_bad_input(weft("frobnicate"), {"unknown command 'frobnicate'"});
  expect_bad_input(weft("bench --model tiny --batch 0"), {"--batch 0"});
  EXPECT_FALSE(fs::exists(*tmp / "run"));  // nothing was started
}

TEST_F(Cli, DataErrors) {
  expect_bad_input(weft("train " + config + " --data " + *tmp / "missing"), {"missing"});
  // a shard with a bad magic number
  fs::create_directories(*tmp / "bad");
  {
    std::ofstream f(*tmp / "bad/x_train_000000.bin", std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 12345;
    header[1] = 1;
    header[2] = 10;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    std::vector<uint16_t> toks(10, 1);
    f.write(reinterpret_cast<const char*>(toks.data()), 20);
  }
  expect_bad_input(weft("train " + config + " --data " + *tmp / "bad"), {"x_train_000000.bin", "12345"});
  // a truncated shard: header says more tokens than the file holds
  fs::create_directories(*tmp / "trunc");
  fs::copy_file(*tmp / "data/x_train_000000.bin", *tmp / "trunc/x_train_000000.bin");
  fs::resize_file(*tmp / "trunc/x_train_000000.bin", 1024 + 1000);
  expect_bad_input(weft("train " + config + " --data " + *tmp / "trunc"), {"x_train_000000.bin", "6000"});
  expect_bad_input(weft("prepare --input " + *tmp / "nothing-here --out " + *tmp / "prep"), {"nothing-here"});
}

TEST_F(Cli, TrainEvalGenerateAndCheckpointErrors) {
  RunResult r = weft("train " + config);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step     2/2"), std::string::npos) << r.out;
  const std::string ckpt = *tmp / "run/step-000002";
  ASSERT_TRUE(fs::exists(ckpt + "/model.safetensors"));
  const std::string model_bytes = test::read_text(ckpt + "/model.safetensors");
  const std::string metrics = test::read_text(*tmp / "run/metrics.jsonl");

  // A second run into the same folder is refused and leaves it as it was.
  expect_bad_input(weft("train " + config), {*tmp / "run", "--resume", "--overwrite"});
  // Resuming with another model shape is refused before anything is written.
  expect_bad_input(weft("train " + config + " --resume --steps 4 --n_embd 64"), {ckpt, "hidden 32", "hidden 64"});
  EXPECT_EQ(test::read_text(ckpt + "/model.safetensors"), model_bytes);
  EXPECT_EQ(test::read_text(*tmp / "run/metrics.jsonl"), metrics);

  // eval: JSON with loss and tokens; window count checked.
  r = weft("eval --checkpoint " + *tmp / "run --data " + *tmp / "data/x_val_000000.bin --windows 10 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].get<int64_t>(), 160);
  EXPECT_GT(j["loss"].get<double>(), 0.0);
  expect_bad_input(weft("eval --checkpoint " + ckpt + " --data " + *tmp / "data/x_val_000000.bin --windows 100000"), {"100000", "windows"});

  // eval --logits: the logits of every position of the windows scored, with their input ids (the
  // shard's windows); their mean cross-entropy is the loss eval prints.
  const std::string val = *tmp / "data/x_val_000000.bin";
  r = weft("eval --checkpoint " + ckpt + " --data " + val + " --windows 3 --format json --logits " + *tmp / "logits.st");
  ASSERT_EQ(r.code, 0) << r.err;
  {
    const double loss = nlohmann::json::parse(r.out)["loss"].get<double>();
    SafetensorsFile f(*tmp / "logits.st");
    const int64_t W = 3, T = 16, V = 50257;
    ASSERT_EQ(f.info("logits").shape, (std::vector<int64_t>{W, T, V}));
    ASSERT_EQ(f.info("input_ids").shape, (std::vector<int64_t>{W, T}));
    ASSERT_EQ(f.info("input_ids").dtype, StDType::kI32);
    std::vector<float> logits(static_cast<size_t>(W * T * V));
    std::vector<int32_t> ids(static_cast<size_t>(W * T));
    std::memcpy(logits.data(), f.data("logits"), logits.size() * sizeof(float));
    std::memcpy(ids.data(), f.data("input_ids"), ids.size() * sizeof(int32_t));
    const std::string shard = test::read_text(val);
    auto token = [&](int64_t i) {
      uint16_t t = 0;
      std::memcpy(&t, shard.data() + 1024 + 2 * i, 2);
      return static_cast<int32_t>(t);
    };
    double sum = 0;
    for (int64_t w = 0; w < W; ++w) {
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(ids[static_cast<size_t>(w * T + t)], token(w * T + t)) << "window " << w << " position " << t;
        const float* row = logits.data() + (w * T + t) * V;
        const double mx = *std::max_element(row, row + V);
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
        sum += mx + std::log(z) - row[token(w * T + t + 1)];
      }
    }
    EXPECT_NEAR(sum / static_cast<double>(W * T), loss, 1e-5 * loss);
  }
  expect_bad_input(weft("eval --checkpoint " + ckpt + " --data " + val + " --logits " + *tmp / "l.st --windows 1 --split val"),
                   {"--split", "ClimaX"});

  // generate prints text
  r = weft("generate --checkpoint " + ckpt + " --prompt Hello --tokens 5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Hello", 0), 0u);

  // A checkpoint whose tensors do not match its config.json: the message names the tensor and shapes.
  fs::copy(ckpt, *tmp / "mismatch", fs::copy_options::recursive);
  {
    auto cfg = nlohmann::json::parse(test::read_text(ckpt + "/config.json"));
    cfg["n_embd"] = 64;
    cfg.erase("weft");  // a Hugging Face style folder: no manifest to catch the edit first
    std::ofstream(*tmp / "mismatch/config.json") << cfg.dump();
    fs::remove(*tmp / "mismatch/manifest.json");
  }
  expect_bad_input(weft("eval --checkpoint " + *tmp / "mismatch --data " + *tmp / "data/x_val_000000.bin"),
                   {"model.safetensors", "32]", "64]"});
  // A truncated model file.
  fs::copy(ckpt, *tmp / "trunc", fs::copy_options::recursive);
  fs::resize_file(*tmp / "trunc/model.safetensors", fs::file_size(*tmp / "trunc/model.safetensors") / 2);
  expect_bad_input(weft("generate --checkpoint " + *tmp / "trunc --tokens 2"), {"trunc/model.safetensors"});
  // A missing checkpoint.
  expect_bad_input(weft("generate --checkpoint " + *tmp / "nowhere"), {"nowhere"});
}

// Every file's bytes under a folder, by relative path (the run folder before and after).
std::map<std::string, std::string> folder_bytes(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) m[fs::relative(e.path(), dir).string()] = test::read_text(e.path().string());
  }
  return m;
}

// Rewrites a checkpoint's manifest.json after `edit` changed its "files" (with a valid own checksum,
// as weft's ManifestWriter computes it), so that only the edit is wrong.
template <class F>
void rewrite_manifest(const fs::path& ckpt, F&& edit) {
  nlohmann::json j = nlohmann::json::parse(test::read_text((ckpt / "manifest.json").string()));
  nlohmann::json files = j["files"];
  edit(files);
  const std::string canonical = files.dump();
  j["files"] = files;
  j["files_xxh3"] = ckpt_io::format_checksum(ckpt_io::checksum(canonical.data(), canonical.size()));
  std::ofstream((ckpt / "manifest.json").string(), std::ios::trunc) << j.dump(1) << "\n";
}

// A resume that is refused changes nothing (issue 34 class 2): every file the resume loads must be
// listed in the manifest and match it, and the checkpoint's format version be one this weft reads,
// checked before metrics.jsonl or anything else in the run folder is touched.
TEST_F(Cli, RefusedResumeChangesNothing) {
  RunResult r = weft("train " + config + " --out " + *tmp / "base");
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path base = *tmp / "base";
  const std::string ckpt_name = "step-000002";
  struct Case {
    std::string name, fragment;
    std::function<void(const fs::path&)> damage;
  };
  const std::vector<Case> cases = {
      {"optimizer unlisted", "optimizer.safetensors: present but not listed",
       [&](const fs::path& c) { rewrite_manifest(c, [](nlohmann::json& f) { f.erase("optimizer.safetensors"); }); }},
      {"model unlisted", "model.safetensors: present but not listed",
       [&](const fs::path& c) { rewrite_manifest(c, [](nlohmann::json& f) { f.erase("model.safetensors"); }); }},
      {"feedback unlisted", "feedback.safetensors: present but not listed",
       [&](const fs::path& c) { fs::copy_file(c / "optimizer.safetensors", c / "feedback.safetensors"); }},
      {"feedback corrupted", "feedback.safetensors",
       [&](const fs::path& c) {
         rewrite_manifest(c, [](nlohmann::json& f) { f["feedback.safetensors"] = f["optimizer.safetensors"]; });
         fs::copy_file(c / "optimizer.safetensors", c / "feedback.safetensors");
         std::fstream fb((c / "feedback.safetensors").string(), std::ios::in | std::ios::out | std::ios::binary);
         fb.seekp(-3, std::ios::end);
         fb.put('\x7f');
       }},
      {"newer format", "format version 99, this weft reads versions up to 2",
       [&](const fs::path& c) {
         nlohmann::json cfg = nlohmann::json::parse(test::read_text((c / "config.json").string()));
         cfg["weft"]["format_version"] = 99;
         const std::string text = cfg.dump();
         std::ofstream((c / "config.json").string(), std::ios::trunc) << text;
         rewrite_manifest(c, [&](nlohmann::json& f) {
           f["config.json"] = {{"size", text.size()},
                               {"xxh3", ckpt_io::format_checksum(ckpt_io::checksum(text.data(), text.size()))}};
         });
       }},
      {"no optimizer", "has no optimizer state",
       [&](const fs::path& c) {
         fs::remove(c / "optimizer.safetensors");
         rewrite_manifest(c, [](nlohmann::json& f) { f.erase("optimizer.safetensors"); });
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const fs::path run = *tmp / ("resume-" + std::to_string(&k - cases.data()));
    fs::copy(base, run, fs::copy_options::recursive);
    k.damage(run / ckpt_name);
    const auto before = folder_bytes(run);
    expect_bad_input(weft("train " + config + " --resume --steps 4 --out " + run.string()), {ckpt_name, k.fragment});
    EXPECT_EQ(folder_bytes(run), before) << "a refused resume changed the run folder";
  }
}

// A path the filesystem library cannot follow ends in one line naming the path and the reason
// (exit 2), never the library's raw "filesystem error: status: ..." text (issue 34 class 7).
TEST_F(Cli, UnfollowablePathsAreOneLine) {
  const fs::path loop = *tmp / "loop";
  fs::create_symlink(loop.filename(), loop);  // loop -> loop
  for (const std::string& args : {"report " + loop.string(), "train " + config + " --data " + loop.string() + "/x",
                                  "eval --checkpoint " + loop.string() + " --data " + *tmp / "data/x_val_000000.bin"}) {
    SCOPED_TRACE(args);
    const RunResult r = weft(args);
    expect_bad_input(r, {loop.string()});
    EXPECT_EQ(r.err.find("filesystem error"), std::string::npos) << r.err;
  }
}

// Hyphenated option names are the config keys; a true/false key is also a bare flag.
TEST_F(Cli, HyphenatedOptionsAndBareFlags) {
  RunResult r = weft("train " + config + " --log-every 1 --trace --out " + *tmp / "flags");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(*tmp / "flags/trace-rank0.jsonl"));
  const std::string resolved = test::read_text(*tmp / "flags/config.toml");
  EXPECT_NE(resolved.find("trace = true"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("log_every = 1"), std::string::npos) << resolved;
  expect_bad_input(weft("train " + config + " --trace maybe"), {"--trace", "true or false", "maybe"});
  // The resolved config is a loadable config: a run from it resolves to the same text.
  r = weft("train " + *tmp / "flags/config.toml" + " --steps 1 --out " + *tmp / "again");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string again = test::read_text(*tmp / "again/config.toml");
  again.replace(again.find("steps = 1"), 9, "steps = 2");
  const std::string out_key = "out = '" + *tmp / "again" + "'";  // TOML literal strings
  again.replace(again.find(out_key), out_key.size(), "out = '" + *tmp / "flags" + "'");
  EXPECT_EQ(again, resolved);
}

}  // namespace
}  // namespace weft
