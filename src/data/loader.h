// Token datasets: a list of shards read as one concatenated token stream, cut into windows.
//
// Window w of length T covers tokens [w*T, w*T + T + 1): its inputs are the first T of those
// tokens and its targets the last T (inputs shifted by one). There are
// N = floor((size - 1) / T) windows; consecutive windows share one token.
//
// Training order depends only on (seed, step), never on how many processes read it: global
// sample g = step * global_batch + s (s in [0, global_batch)) belongs to epoch e = g / N and
// is window perm_e[g % N], where perm_e is a Fisher-Yates shuffle of [0, N) driven by
// Philox(seed, kRngStreamData + e, i). A data-parallel rank that reads samples
// [first_sample, first_sample + count) of the global batch sees exactly the rows a
// single process would. See docs/formats-data.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shard.h"

namespace weft {

class TokenDataset {
 public:
  // Opens the shards in the given order for a model of `vocab_size` tokens: every id of every
  // shard must lie in [0, vocab_size), checked at open (from weft's header record, or by
  // scanning a shard without one) and again as tokens are read. Throws InputError when the
  // list is empty, vocab_size <= 0, or a shard is invalid (see ShardReader), naming the shard,
  // the token index and its value.
  TokenDataset(const std::vector<std::string>& shard_paths, int vocab_size);

  // The shards of one split, sorted by path. `dir_or_glob` is a folder (its *.bin files, not
  // recursive), a glob pattern (e.g. "data/fw/*.bin"), or one shard file (taken as is). In the
  // first two cases a file belongs to `split` when its name ends in ".bin" and one of its
  // parts between '_', '-' and '.' equals `split` ("fortunes_train_000000.bin" is in "train",
  // "constrained.bin" is not). Throws InputError naming what was searched when nothing matches.
  static TokenDataset open_split(const std::string& dir_or_glob, const std::string& split, int vocab_size);
  static std::vector<std::string> find_split_files(const std::string& dir_or_glob,
                                                   const std::string& split);

  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;
  ~TokenDataset();

  int64_t size() const { return total_; }  // tokens in all shards
  int num_shards() const { return static_cast<int>(shards_.size()); }
  int vocab_size() const { return vocab_; }
  // Tokens of the shards that had no weft record and were scanned at open, and the seconds
  // the scan took.
  int64_t scanned_tokens() const { return scanned_tokens_; }
  double scan_seconds() const { return scan_seconds_; }
  const std::vector<std::string>& paths() const { return paths_; }
  // A short description for logs and errors: "3 shards (data/x/a_train_000000.bin, ...)".
  std::string describe() const;

  // Token i of the concatenated stream; tokens [begin, begin + count) into out. An id outside
  // the vocabulary (a body corrupted after open) throws InputError naming the shard, the
  // index in it and the value.
  int32_t token(int64_t i) const;
  void copy(int64_t begin, int64_t count, int32_t* out) const;

  // N = floor((size - 1) / T), or 0 when the data holds fewer than T + 1 tokens.
  // Throws InputError when T <= 0.
  int64_t num_windows(int64_t T) const;

  // Window w: inputs = tokens [w*T, (w+1)*T), targets = tokens [w*T+1, (w+1)*T+1); both (T).
  // Throws InputError when w is outside [0, N) or the data is shorter than T + 1 tokens.
  void window(int64_t w, int T, int32_t* inputs, int32_t* targets) const;

  // Rows [first_sample, first_sample + count) of the global batch of `step`; inputs and
  // targets are (count, T) row-major. Throws InputError for a range outside [0, global_batch),
  // a negative step, or data shorter than T + 1 tokens (naming T and the count).
  void sample_batch(uint64_t seed, int64_t step, int64_t global_batch, int64_t first_sample,
                    int64_t count, int T, int32_t* inputs, int32_t* targets) const;

  // The window that global sample g (= step * global_batch + s) reads.
  int64_t sample_window(uint64_t seed, int64_t g, int T) const;

 private:
  struct Permutation;
  struct PermutationCache;

  void require_windows(int T, const char* what) const;
  std::shared_ptr<const Permutation> permutation(uint64_t seed, int T, int64_t epoch) const;

  std::vector<std::string> paths_;
  std::vector<ShardReader> shards_;
  std::vector<int64_t> starts_;  // starts_[k] = first global token of shard k; back() = total
  int64_t total_ = 0;
  int vocab_ = 0;
  int64_t scanned_tokens_ = 0;
  double scan_seconds_ = 0.0;
  std::unique_ptr<PermutationCache> cache_;
};

// The Fisher-Yates shuffle of [0, n) for (seed, epoch) that sample_batch uses, spelled out for
// tests and tools: for i = n-1 down to 1, swap p[i] with p[j], j = floor(u * (i + 1)) where u is
// the 64-bit uniform from Philox::draw(seed, kRngStreamData + epoch, i) words 0 and 1.
std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

}  // namespace weft
