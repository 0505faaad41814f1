// TokenDataset: windows, the (seed, step) sampling rule, split discovery, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_test_util.h"
#include "data/loader.h"
#include "data/shard.h"

namespace weft {
namespace {

using testing::ScratchDir;
using testing::write_bytes;

constexpr int kVocab = 65536;

// Shards whose concatenation is the stream 0, 1, 2, ..., total-1 (token value = position), so a
// window is recognised by its first token. Sizes are uneven and include an empty shard.
std::vector<std::string> make_iota_shards(const ScratchDir& dir, const std::vector<int>& sizes,
                                          const std::string& split = "train") {
  std::vector<std::string> paths;
  int32_t next = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<int32_t> t(static_cast<size_t>(sizes[k]));
    std::iota(t.begin(), t.end(), next);
    next += sizes[k];
    paths.push_back(dir / fmt::format("iota_{}_{:06d}.bin", split, k));
    write_shard(paths.back(), t, kVocab);
  }
  return paths;
}

TEST(Loader, ConcatenatesShardsInOrder) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {100, 0, 37, 250}), kVocab);
  EXPECT_EQ(ds.size(), 387);
  EXPECT_EQ(ds.num_shards(), 4);
  for (int64_t i : {0, 99, 100, 136, 137, 386}) EXPECT_EQ(ds.token(i), i);
  std::vector<int32_t> all(387);
  ds.copy(0, 387, all.data());
  for (int i = 0; i < 387; ++i) ASSERT_EQ(all[i], i);
  std::vector<int32_t> mid(60);
  ds.copy(90, 60, mid.data());  // spans the empty shard and a boundary
  for (int i = 0; i < 60; ++i) ASSERT_EQ(mid[i], 90 + i);
  EXPECT_THROW(ds.copy(380, 8, mid.data()), InputError);
}

TEST(Loader, WindowsMatchPlainRecomputation) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {100, 0, 37, 250}), kVocab);
  for (int T : {1, 7, 16, 386}) {
    const int64_t n = ds.num_windows(T);
    EXPECT_EQ(n, (387 - 1) / T) << "T=" << T;
    std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
    for (int64_t w = 0; w < n; ++w) {
      ds.window(w, T, in.data(), tg.data());
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(in[t], w * T + t) << "T=" << T << " w=" << w;
        ASSERT_EQ(tg[t], w * T + t + 1) << "T=" << T << " w=" << w;
      }
    }
    EXPECT_THROW(ds.window(n, T, in.data(), tg.data()), InputError);
    EXPECT_THROW(ds.window(-1, T, in.data(), tg.data()), InputError);
  }
}

// The documented rule, recomputed here from Philox directly: sample g is window perm_e[g % N]
// with perm_e the Fisher-Yates shuffle with j = floor(u64 * (i+1) / 2^64).
int64_t expected_window(uint64_t seed, int64_t g, int64_t n) {
  const int64_t epoch = g / n;
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i >= 1; --i) {
    Philox::Block b = Philox::draw(seed, kRngStreamData + static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    uint64_t x = (static_cast<uint64_t>(b[1]) << 32) | b[0];
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(x) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return p[g % n];
}

TEST(Loader, SampleBatchFollowsTheDocumentedRule) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {300, 211}), kVocab);
  const int T = 8;
  const int64_t n = ds.num_windows(T);  // (511 - 1) / 8 = 63
  ASSERT_EQ(n, 63);
  const int64_t G = 10;
  std::vector<int32_t> in(G * T), tg(G * T);
  for (int64_t step : {0, 5, 6, 13}) {  // step 6 straddles epochs 0 and 1 (samples 60..69)
    ds.sample_batch(42, step, G, 0, G, T, in.data(), tg.data());
    for (int64_t s = 0; s < G; ++s) {
      const int64_t w = expected_window(42, step * G + s, n);
      EXPECT_EQ(ds.sample_window(42, step * G + s, T), w);
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(in[s * T + t], w * T + t) << "step " << step << " sample " << s;
        ASSERT_EQ(tg[s * T + t], w * T + t + 1) << "step " << step << " sample " << s;
      }
    }
  }
  std::vector<int64_t> p = epoch_permutation(42, 1, n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(p[i], expected_window(42, n + i, n));
}

TEST(Loader, BatchIndependentOfHowItIsSplit) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {1000, 0, 333}), kVocab);
  const int T = 16;
  const int64_t G = 12;
  for (int64_t step : {0, 3, 7, 100}) {
    std::vector<int32_t> full_in(G * T), full_tg(G * T);
    ds.sample_batch(7, step, G, 0, G, T, full_in.data(), full_tg.data());
    // As 4 data-parallel ranks of 3, as uneven pieces, and one sample at a time.
    for (const std::vector<int64_t>& cuts : std::vector<std::vector<int64_t>>{
             {0, 3, 6, 9, 12}, {0, 5, 6, 12}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}) {
      std::vector<int32_t> in(G * T, -1), tg(G * T, -1);
      for (size_t k = 0; k + 1 < cuts.size(); ++k) {
        ds.sample_batch(7, step, G, cuts[k], cuts[k + 1] - cuts[k], T, in.data() + cuts[k] * T,
                        tg.data() + cuts[k] * T);
      }
      EXPECT_EQ(in, full_in) << "step " << step << ", " << cuts.size() - 1 << " pieces";
      EXPECT_EQ(tg, full_tg) << "step " << step << ", " << cuts.size() - 1 << " pieces";
    }
    // A fresh dataset (empty permutation cache) gives the same rows.
    TokenDataset again(ds.paths(), kVocab);
    std::vector<int32_t> in(G * T), tg(G * T);
    again.sample_batch(7, step, G, 0, G, T, in.data(), tg.data());
    EXPECT_EQ(in, full_in);
  }
}

TEST(Loader, EveryWindowOncePerEpoch) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {500, 261}), kVocab);
  const int T = 4;
  const int64_t n = ds.num_windows(T);  // 190
  ASSERT_EQ(n, 190);
  const int64_t G = 7;  // does not divide n: epochs start mid-batch
  const int64_t steps = (3 * n + G - 1) / G;
  std::vector<int64_t> windows;
  std::vector<int32_t> in(G * T), tg(G * T);
  for (int64_t step = 0; step < steps; ++step) {
    ds.sample_batch(1234, step, G, 0, G, T, in.data(), tg.data());
    for (int64_t s = 0; s < G; ++s) {
      ASSERT_EQ(in[s * T] % T, 0);
      windows.push_back(in[s * T] / T);
    }
  }
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> seen(windows.begin() + e * n, windows.begin() + (e + 1) * n);
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t w = 0; w < n; ++w) ASSERT_EQ(sorted[w], w) << "epoch " << e;
    epochs.push_back(seen);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  // Not the identity order, and a different seed gives a different order.
  std::vector<int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epochs[0], identity);
  ds.sample_batch(1235, 0, G, 0, G, T, in.data(), tg.data());
  int same = 0;
  for (int64_t s = 0; s < G; ++s) same += in[s * T] / T == epochs[0][s];
  EXPECT_LT(same, G);
}

TEST(Loader, ConcurrentSamplingMatchesSequential) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {2000, 77}), kVocab);
  const int T = 5;
  const int64_t G = 9, steps = 200;  // several epochs: the cache is rebuilt under contention
  std::vector<int32_t> seq(steps * G * T), par(steps * G * T), tg(G * T);
  for (int64_t s = 0; s < steps; ++s) ds.sample_batch(3, s, G, 0, G, T, seq.data() + s * G * T, tg.data());
  TokenDataset fresh(ds.paths(), kVocab);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      std::vector<int32_t> t(G * T);
      for (int64_t s = th; s < steps; s += 4) fresh.sample_batch(3, s, G, 0, G, T, par.data() + s * G * T, t.data());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(par, seq);
}

TEST(Loader, TooShortDataNamesTAndCount) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {10}), kVocab);
  EXPECT_EQ(ds.num_windows(9), 1);
  EXPECT_EQ(ds.num_windows(10), 0);
  std::vector<int32_t> in(10), tg(10);
  try {
    ds.sample_batch(1, 0, 1, 0, 1, 10, in.data(), tg.data());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("holds 10 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("T+1 = 11"), std::string::npos) << msg;
  }
  EXPECT_THROW(ds.window(0, 10, in.data(), tg.data()), InputError);
  EXPECT_THROW(ds.num_windows(0), InputError);
}

TEST(Loader, RejectsBadBatchArguments) {
  ScratchDir dir;
  TokenDataset ds(make_iota_shards(dir, {100}), kVocab);
  std::vector<int32_t> in(64), tg(64);
  EXPECT_THROW(ds.sample_batch(1, 0, 4, 3, 2, 4, in.data(), tg.data()), InputError);  // 3+2 > 4
  EXPECT_THROW(ds.sample_batch(1, -1, 4, 0, 1, 4, in.data(), tg.data()), InputError);
  EXPECT_THROW(ds.sample_batch(1, 0, 0, 0, 0, 4, in.data(), tg.data()), InputError);
  EXPECT_NO_THROW(ds.sample_batch(1, 0, 4, 4, 0, 4, in.data(), tg.data()));
}

TEST(Loader, OpenSplitFindsShards) {
  ScratchDir dir;
  make_iota_shards(dir, {50, 60}, "train");
  make_iota_shards(dir, {20}, "val");
  write_bytes(dir / "meta.json", "{}");
  write_bytes(dir / "constrained.bin", "not a shard");  // "train" only inside a word
  write_bytes(dir / "iota_train_000009.bin.tmp", "leftover");
  TokenDataset train = TokenDataset::open_split(dir.str(), "train", kVocab);
  EXPECT_EQ(train.num_shards(), 2);
  EXPECT_EQ(train.size(), 110);
  EXPECT_EQ(train.paths()[0], dir / "iota_train_000000.bin");
  TokenDataset val = TokenDataset::open_split(dir.str(), "val", kVocab);
  EXPECT_EQ(val.size(), 20);
  TokenDataset globbed = TokenDataset::open_split(dir / "iota_*.bin", "train", kVocab);
  EXPECT_EQ(globbed.size(), 110);
  TokenDataset single = TokenDataset::open_split(dir / "iota_val_000000.bin", "train", kVocab);
  EXPECT_EQ(single.size(), 20);  // an explicit file is taken as is
}

TEST(Loader, OpenSplitErrorsNameWhatWasSearched) {
  ScratchDir dir;
  make_iota_shards(dir, {50}, "train");
  try {
    TokenDataset::open_split(dir.str(), "val", kVocab);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.str()), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"val\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("iota_train_000000.bin"), std::string::npos) << msg;
  }
  try {
    TokenDataset::open_split(dir / "nothing_here", "train", kVocab);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "nothing_here"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TokenDataset::open_split(dir / "*.nothing", "train", kVocab), InputError);
  EXPECT_THROW(TokenDataset(std::vector<std::string>{}, kVocab), InputError);
  // A bad shard in the split fails with its own message.
  write_bytes(dir / "iota_train_000001.bin", "short");
  try {
    TokenDataset::open_split(dir.str(), "train", kVocab);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("iota_train_000001.bin"), std::string::npos) << e.what();
  }
}

// A plain llm.c shard (no weft record) of uint16 tokens, built by hand.
void write_plain_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::string b(1024, '\0');
  const int32_t head[3] = {20240520, 1, static_cast<int32_t>(tokens.size())};
  std::memcpy(b.data(), head, sizeof(head));
  b.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  write_bytes(path, b);
}

TEST(Loader, ChecksIdsAgainstTheModelVocabulary) {
  ScratchDir dir;
  make_iota_shards(dir, {50, 60}, "train");  // recorded: ids 0..109
  std::vector<uint16_t> plain(40, 7);
  write_plain_shard(dir / "iota_train_000002.bin", plain);
  TokenDataset ok = TokenDataset::open_split(dir.str(), "train", 110);
  EXPECT_EQ(ok.scanned_tokens(), 40);  // only the shard without a record was read at open
  EXPECT_GE(ok.scan_seconds(), 0.0);
  // A model with 100 tokens: the recorded max 109 of shard 1 is refused, naming its id 100 at
  // index 50 of shard 1 (global token 100).
  try {
    TokenDataset::open_split(dir.str(), "train", 100);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir / "iota_train_000001.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("token 50 is 100"), std::string::npos) << msg;
  }
  plain[33] = 65535;
  write_plain_shard(dir / "iota_train_000002.bin", plain);
  try {
    TokenDataset::open_split(dir.str(), "train", 50257);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir / "iota_train_000002.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("token 33 is 65535"), std::string::npos) << msg;
  }
  EXPECT_THROW(TokenDataset::open_split(dir.str(), "train", 0), InputError);
}

}  // namespace
}  // namespace weft
