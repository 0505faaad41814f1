// Token shards: llm.c's header, both token widths, and one clear error per bad file.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/data_test_util.h"
#include "data/shard.h"
#include "data/text_util.h"

namespace weft {
namespace {

using testing::ScratchDir;
using testing::write_bytes;

constexpr int64_t kNoRecord = INT64_MIN;

// FNV-1a (32 bit) over a byte string, written out here as the reference for the record's check.
uint32_t fnv1a(const std::string& bytes) {
  uint32_t h = 0x811c9dc5u;
  for (unsigned char c : bytes) h = (h ^ c) * 0x01000193u;
  return h;
}

// A shard built by hand, byte by byte (independent of write_shard). With record_max, weft's
// record in header ints 252..255: "WEFT", version 1, the max id, FNV-1a of ints 0-2, 252-254.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, const std::vector<uint32_t>& tokens,
                        int width, int64_t record_max = kNoRecord) {
  std::string out(1024, '\0');
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 4);
  std::memcpy(out.data() + 8, &count, 4);
  if (record_max != kNoRecord) {
    const int32_t rec[3] = {1413891415 /* 'W','E','F','T' */, 1, static_cast<int32_t>(record_max)};
    std::memcpy(out.data() + 1008, rec, 12);
    const uint32_t check = fnv1a(out.substr(0, 12) + out.substr(1008, 12));
    std::memcpy(out.data() + 1020, &check, 4);
  }
  for (uint32_t t : tokens) {
    if (width == 2) {
      uint16_t v = static_cast<uint16_t>(t);
      out.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      out.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  return out;
}

// Expects ShardReader(path) to throw InputError whose message holds the path and `fragment`.
void expect_bad_shard(const std::string& path, const std::string& fragment) {
  try {
    ShardReader r(path);
    FAIL() << "expected InputError for " << path;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << "missing \"" << fragment << "\" in: " << msg;
  }
}

TEST(Shard, RoundTripUint16) {
  ScratchDir dir;
  const std::string path = dir / "a_train_000000.bin";
  std::vector<int32_t> tokens = {0, 1, 50256, 65535, 12345, 7};
  write_shard(path, tokens, 65536);  // the largest vocabulary that still fits uint16
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // The bytes on disk are llm.c's layout, checked against a hand-built file.
  EXPECT_EQ(read_file(path), shard_bytes(20240520, 1, 6, {0, 1, 50256, 65535, 12345, 7}, 2, 65535));
  ShardReader r(path);
  EXPECT_EQ(r.size(), 6);
  EXPECT_EQ(r.token_bytes(), 2);
  EXPECT_EQ(r.magic(), 20240520);
  EXPECT_EQ(r.version(), 1);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(r.token(static_cast<int64_t>(i)), tokens[i]);
  std::vector<int32_t> got(3);
  r.copy(2, 3, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{50256, 65535, 12345}));
  EXPECT_TRUE(r.has_record());
  EXPECT_EQ(r.max_id(), 65535);
  EXPECT_NO_THROW(r.check_vocab(65536));
  try {
    r.check_vocab(50257);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token 3 is 65535"), std::string::npos) << e.what();
  }
}

TEST(Shard, RoundTripUint32) {
  ScratchDir dir;
  const std::string path = dir / "big_train_000000.bin";
  std::vector<int32_t> tokens;
  for (int i = 0; i < 3000; ++i) tokens.push_back((i * 7919) % 128256);
  write_shard(path, tokens, 128256);  // Llama-3's vocabulary needs 4 bytes
  const std::string bytes = read_file(path);
  ASSERT_EQ(bytes.size(), 1024u + 4 * 3000);
  std::vector<uint32_t> expect(tokens.begin(), tokens.end());
  EXPECT_EQ(bytes, shard_bytes(20240801, 7, 3000, expect, 4, *std::max_element(tokens.begin(), tokens.end())));
  ShardReader r(path);
  EXPECT_EQ(r.size(), 3000);
  EXPECT_EQ(r.token_bytes(), 4);
  std::vector<int32_t> all(3000);
  r.copy(0, 3000, all.data());
  EXPECT_EQ(all, tokens);
  EXPECT_EQ(r.token(2999), (2999 * 7919) % 128256);
}

TEST(Shard, FormatChoiceByVocab) {
  EXPECT_EQ(shard_token_bytes(50257), 2);
  EXPECT_EQ(shard_token_bytes(65536), 2);
  EXPECT_EQ(shard_token_bytes(65537), 4);
}

TEST(Shard, EmptyShard) {
  ScratchDir dir;
  const std::string path = dir / "e.bin";
  write_shard(path, std::vector<int32_t>{}, 50257);
  ShardReader r(path, 50257);
  EXPECT_EQ(r.size(), 0);
  EXPECT_EQ(r.max_id(), -1);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u);
}

TEST(Shard, WriteRejectsTokensOutsideVocab) {
  ScratchDir dir;
  const std::string path = dir / "bad.bin";
  try {
    write_shard(path, std::vector<int32_t>{5, 70000, 3}, 50257);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("token 1 of 3 is 70000"), std::string::npos) << msg;
  }
  EXPECT_THROW(write_shard(path, std::vector<int32_t>{-1}, 50257), InputError);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Shard, BadFilesNamePathAndNumbers) {
  ScratchDir dir;
  const std::vector<uint32_t> five = {1, 2, 3, 4, 5};

  expect_bad_shard(dir / "missing.bin", "cannot open");

  write_bytes(dir / "empty.bin", "");
  expect_bad_shard(dir / "empty.bin", "holds 0 bytes, shorter than the 1024-byte shard header");

  write_bytes(dir / "short.bin", std::string(1000, '\0'));
  expect_bad_shard(dir / "short.bin", "holds 1000 bytes");

  write_bytes(dir / "magic.bin", shard_bytes(12345, 1, 5, five, 2));
  expect_bad_shard(dir / "magic.bin", "bad magic number 12345");

  write_bytes(dir / "version.bin", shard_bytes(20240520, 3, 5, five, 2));
  expect_bad_shard(dir / "version.bin", "says version 3");

  write_bytes(dir / "mismatch16.bin", shard_bytes(20240520, 7, 5, five, 2));
  expect_bad_shard(dir / "mismatch16.bin", "magic 20240520 (uint16 tokens) goes with version 1");

  write_bytes(dir / "mismatch32.bin", shard_bytes(20240801, 1, 5, five, 4));
  expect_bad_shard(dir / "mismatch32.bin", "magic 20240801 (uint32 tokens) goes with version 7");

  write_bytes(dir / "negative.bin", shard_bytes(20240520, 1, -4, five, 2));
  expect_bad_shard(dir / "negative.bin", "-4 tokens");

  // 1000 uint16 tokens promised, 750 present.
  std::vector<uint32_t> many(750, 9);
  write_bytes(dir / "truncated.bin", shard_bytes(20240520, 1, 1000, many, 2));
  expect_bad_shard(dir / "truncated.bin",
                   "header says 1000 tokens (2000 bytes) but the file holds 1500 bytes after the "
                   "header (truncated)");

  // 5 uint32 tokens promised, 6 present.
  write_bytes(dir / "trailing.bin", shard_bytes(20240801, 7, 5, {1, 2, 3, 4, 5, 6}, 4));
  expect_bad_shard(dir / "trailing.bin",
                   "header says 5 tokens (20 bytes) but the file holds 24 bytes after the header "
                   "(trailing bytes)");

  std::filesystem::create_directories(dir / "folder.bin");
  expect_bad_shard(dir / "folder.bin", "not a regular file");
}

TEST(Shard, AccessOutsideRangeThrows) {
  ScratchDir dir;
  const std::string path = dir / "r.bin";
  write_shard(path, std::vector<int32_t>{1, 2, 3}, 50257);
  ShardReader r(path);
  EXPECT_THROW(r.token(3), InputError);
  EXPECT_THROW(r.token(-1), InputError);
  int32_t out[4];
  EXPECT_THROW(r.copy(1, 3, out), InputError);
  EXPECT_NO_THROW(r.copy(3, 0, out));
  // Moving keeps the mapping valid.
  ShardReader moved(std::move(r));
  EXPECT_EQ(moved.token(2), 3);
}

// Expects `f` to throw InputError whose message holds every fragment.
template <typename F>
void expect_input_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& frag : fragments) {
      EXPECT_NE(msg.find(frag), std::string::npos) << "missing \"" << frag << "\" in: " << msg;
    }
  }
}

TEST(ShardCheck, PlainLlmcShardIsScannedAtOpen) {
  ScratchDir dir;
  const std::string good = dir / "llmc_good.bin", bad = dir / "llmc_bad.bin";
  write_bytes(good, shard_bytes(20240520, 1, 4, {7, 50256, 0, 3}, 2));
  ShardReader r(good, 50257);
  EXPECT_FALSE(r.has_record());
  EXPECT_EQ(r.max_id(), 50256);
  EXPECT_EQ(r.scan_max_id(), 50256);
  // 50300 is inside the padded vocabulary (50304) but not a GPT-2 token: refused at open.
  write_bytes(bad, shard_bytes(20240520, 1, 6, {7, 1, 2, 3, 50300, 9}, 2));
  expect_input_error([&] { ShardReader s(bad, 50257); }, {bad, "token 4 is 50300", "outside the vocabulary [0, 50257)"});
  // Without a vocabulary the header is still checked, the ids are not.
  EXPECT_NO_THROW(ShardReader{bad});
}

TEST(ShardCheck, RecordMakesOpenO1AndNamesTheBadId) {
  ScratchDir dir;
  const std::string path = dir / "rec.bin";
  write_shard(path, std::vector<int32_t>{5, 60000, 3}, 65536);
  ShardReader ok(path, 65536);
  EXPECT_TRUE(ok.has_record());
  EXPECT_EQ(ok.max_id(), 60000);
  expect_input_error([&] { ShardReader s(path, 50257); }, {path, "token 1 is 60000", "[0, 50257)"});
}

TEST(ShardCheck, CorruptedBodyIsCaughtWhenRead) {
  ScratchDir dir;
  const std::string path = dir / "corrupt.bin";
  // The record says the largest id is 100; the body holds 60000 at index 2 (a flipped byte
  // after `weft prepare`). Open trusts the record; every read checks the ids it copies.
  write_bytes(path, shard_bytes(20240520, 1, 5, {1, 100, 60000, 4, 5}, 2, 100));
  ShardReader r(path, 50257);
  int32_t out[5];
  EXPECT_NO_THROW(r.copy(0, 2, out));
  EXPECT_EQ(out[1], 100);
  const std::vector<std::string> what = {path, "token 2 is 60000", "header records 100 as the largest id",
                                         "corrupted"};
  expect_input_error([&] { r.copy(1, 3, out); }, what);
  expect_input_error([&] { r.token(2); }, what);
  // A record that claims an id at or above the vocabulary that is not there is corrupted too.
  write_bytes(path, shard_bytes(20240520, 1, 3, {1, 2, 3}, 2, 60000));
  expect_input_error([&] { ShardReader s(path, 50257); }, {path, "records 60000", "corrupted"});
}

TEST(ShardCheck, BadRecordsAreRefused) {
  ScratchDir dir;
  const std::string path = dir / "r.bin";
  std::string b = shard_bytes(20240520, 1, 3, {1, 2, 3}, 2, 3);
  b[8] = 2;  // the count changed to 2 (and a token cut) after the record was written
  write_bytes(path, b.substr(0, b.size() - 2));
  expect_input_error([&] { ShardReader s(path); }, {path, "header int 255 does not match", "weft prepare"});
  b = shard_bytes(20240520, 1, 3, {1, 2, 3}, 2, 3);
  b[1012] = 9;  // record version 9
  write_bytes(path, b);
  expect_input_error([&] { ShardReader s(path); }, {path, "record version 9"});
  write_bytes(path, shard_bytes(20240520, 1, 3, {1, 2, 3}, 2, 70000));  // > 65535 in uint16
  expect_input_error([&] { ShardReader s(path); }, {path, "largest id is 70000, impossible"});
}

TEST(ShardCheck, Uint32IdsPrintUnsigned) {
  ScratchDir dir;
  const std::string path = dir / "u32.bin";
  write_bytes(path, shard_bytes(20240801, 7, 3, {1, 4000000000u, 2}, 4));
  // Read as int32 this id would be -294967296.
  expect_input_error([&] { ShardReader s(path, 128256); }, {"token 1 is 4000000000", "[0, 128256)"});
  ShardReader r(path);  // no vocabulary: still no id above INT32_MAX comes out
  int32_t out[3];
  expect_input_error([&] { r.copy(0, 3, out); }, {"token 1 is 4000000000", "above INT32_MAX"});
}

}  // namespace
}  // namespace weft
