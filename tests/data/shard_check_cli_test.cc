// Token ids checked before training, through the command line: a shard with an id outside the
// model's vocabulary is refused at open (exit 2, one line naming the file, the token index and
// the value, no run folder); a body corrupted after `weft prepare` recorded its largest id is
// caught when the batch is read, before the embedding lookup.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "data/shard.h"
#include "test_util.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

void expect_one_line_exit2(const test::RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr should be one line: " << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

// Overwrites token `index` of a uint16 shard in place (the header, record included, untouched).
void poke_token(const std::string& path, int64_t index, uint16_t value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(kShardHeaderBytes + 2 * index);
  f.write(reinterpret_cast<const char*>(&value), 2);
  ASSERT_TRUE(f.good()) << path;
}

class ShardCheckCli : public test::CliFixture {
 protected:
  ShardCheckCli() : CliFixture("data") {}
};

TEST_F(ShardCheckCli, IdOutsideVocabularyRefusedAtOpen) {
  // A plain llm.c shard (no weft record: scanned) whose token 77 is 50300: inside GPT-2's
  // padded vocabulary (50304), outside its 50257 real tokens.
  const std::string val = *tmp / "data/x_val_000000.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = kShardMagicU16;
  header[1] = kShardVersionU16;
  header[2] = 1200;
  std::vector<uint16_t> toks(1200, 11);
  toks[77] = 50300;
  {
    std::ofstream f(val, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(reinterpret_cast<const char*>(toks.data()), 2400);
  }
  expect_one_line_exit2(weft("train " + config), {val, "token 77 is 50300", "outside the vocabulary [0, 50257)"});
  EXPECT_FALSE(fs::exists(*tmp / "run"));  // refused before the run folder was made
  // A recorded shard whose largest id is 65535, for a model of 50257 tokens: refused in O(1)
  // with the position of the first bad id.
  std::vector<int32_t> ids(1200, 11);
  ids[500] = 65535;
  write_shard(val, ids, 65536);
  expect_one_line_exit2(weft("train " + config), {val, "token 500 is 65535"});
  EXPECT_FALSE(fs::exists(*tmp / "run"));
}

TEST_F(ShardCheckCli, CorruptedBodyCaughtWhenRead) {
  // Token 3 of the validation shard, read by the validation at step 0, is changed after the
  // record was written: open trusts the record, the read catches the id.
  const std::string val = *tmp / "data/x_val_000000.bin";
  poke_token(val, 3, 60000);
  expect_one_line_exit2(weft("train " + config), {val, "token 3 is 60000", "corrupted"});
}

}  // namespace
}  // namespace weft
