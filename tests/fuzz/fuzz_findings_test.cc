// The findings of the fuzz targets (docs/fuzzing.md), replayed as unit tests in the ordinary
// build: each input once escaped as another exception or undefined behaviour, and must now be
// a refusal (InputError naming the value) or, for the empty shard, a clean no-op. The inputs
// themselves are in fuzz/corpus/<target>/regression_* and replayed by every fuzz run.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "data/shard.h"
#include "test_util.h"
#include "train/config.h"

namespace weft {
namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// `f` throws an InputError whose message contains `part`.
template <typename F>
void expect_input_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no InputError (expected one containing '" << part << "')";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(FuzzFindings, ConfigJsonNumberOverflowIsAnInputError) {
  test::TempDir dir("fuzz");
  write_bytes(dir / "config.json", R"({"n_layer": 1e999, "n_head": 1})");
  expect_input_error([&] { load_checkpoint_config(dir.path().string()); }, "number overflow");
}

TEST(FuzzFindings, SafetensorsHeaderNumberOverflowIsAnInputError) {
  test::TempDir dir("fuzz");
  std::string header = R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x": 1e999})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  write_bytes(dir / "m.safetensors", file + header + std::string(4, '\0'));
  expect_input_error([&] { SafetensorsFile f(dir / "m.safetensors"); }, "not valid JSON");
}

TEST(FuzzFindings, HugeModelOverrideIsAnInputErrorNotAWrap) {
  // n_embd was cast to int and multiplied by 4 (signed overflow); n_layer 2^32 + 2 became 2.
  expect_input_error([] { load_run_config("", {{"n_embd", "1426452631974779854"}}); }, "n_embd = 1426452631974779854 is too large");
  expect_input_error([] { load_run_config("", {{"n_layer", "4294967298"}}); }, "n_layer = 4294967298 is too large");
  expect_input_error([] { load_run_config("", {{"n_embd", "536870912"}}); }, "at most 536870911");
}

TEST(FuzzFindings, NonUtf8StringOverrideIsAnInputError) {
  // config.toml wrote the byte 0xB0 as "\u00B0", which loads back as two other bytes.
  expect_input_error([] { load_run_config("", {{"sample_prompt", "a\xb0z"}}); }, "byte 1 is 0xB0");
}

TEST(FuzzFindings, EmptyShardCopiesNothing) {
  test::TempDir dir("fuzz");
  std::vector<int32_t> header(256, 0);
  header[0] = kShardMagicU32;
  header[1] = kShardVersionU32;
  write_bytes(dir / "empty.bin", std::string(reinterpret_cast<const char*>(header.data()), 1024));
  ShardReader r(dir / "empty.bin");
  EXPECT_EQ(r.size(), 0);
  std::vector<int32_t> none;
  r.copy(0, 0, none.data());  // a null destination for zero tokens: no memcpy(nullptr, ...)
  EXPECT_NO_THROW(r.check_vocab(50257));
}

}  // namespace
}  // namespace weft
