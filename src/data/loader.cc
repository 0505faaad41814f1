#include "data/loader.h"

#include <glob.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/text_util.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

// Index j in [0, i] for step i of the shuffle: 64 random bits scaled by (i + 1) (Lemire's
// multiply-shift; the bias is below (i + 1) / 2^64).
inline uint64_t shuffle_index(uint64_t seed, uint64_t stream, uint64_t i) {
  const Philox::Block b = Philox::draw(seed, stream, i);
  const uint64_t x = (static_cast<uint64_t>(b[1]) << 32) | b[0];
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * (i + 1)) >> 64);
}

uint64_t epoch_stream(int64_t epoch) {
  if (epoch < 0 || epoch >= (int64_t{1} << 32)) {
    throw_input("data epoch {} is outside [0, 2^32)", epoch);
  }
  return kRngStreamData + static_cast<uint64_t>(epoch);
}

// Fisher-Yates over p[0, n) (p must hold 0..n-1). The draws are independent of each other, so
// they are made in parallel a block at a time; the swaps stay sequential.
template <typename I>
void shuffle(I* p, int64_t n, uint64_t seed, int64_t epoch) {
  const uint64_t stream = epoch_stream(epoch);
  constexpr int64_t kBlock = 1 << 20;
  std::vector<I> js(static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(n, 1), kBlock)));
  for (int64_t hi = n - 1; hi >= 1; hi -= kBlock) {
    const int64_t lo = std::max<int64_t>(1, hi - kBlock + 1);
    const int64_t m = hi - lo + 1;
#pragma omp parallel for schedule(static) if (m > 65536)
    for (int64_t k = 0; k < m; ++k) {
      js[k] = static_cast<I>(shuffle_index(seed, stream, static_cast<uint64_t>(hi - k)));
    }
    for (int64_t k = 0; k < m; ++k) std::swap(p[hi - k], p[js[k]]);
  }
}

bool is_glob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// True when `name` ends in ".bin" and one of its parts between '_', '-', '.' equals split.
bool in_split(const std::string& name, const std::string& split) {
  if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".bin") != 0) return false;
  std::string_view stem(name.data(), name.size() - 4);
  size_t i = 0;
  while (i <= stem.size()) {
    size_t j = stem.find_first_of("_-.", i);
    if (j == std::string_view::npos) j = stem.size();
    if (stem.substr(i, j - i) == split) return true;
    i = j + 1;
  }
  return false;
}

}  // namespace

struct TokenDataset::Permutation {
  uint64_t seed = 0;
  int T = 0;
  int64_t epoch = 0;
  std::vector<uint32_t> p32;  // used when N fits in 32 bits (half the memory)
  std::vector<int64_t> p64;
  int64_t at(int64_t i) const { return p64.empty() ? static_cast<int64_t>(p32[i]) : p64[i]; }
};

struct TokenDataset::PermutationCache {
  std::mutex mu;
  // The most recent permutations (two, so that a batch straddling an epoch boundary does not
  // rebuild them back and forth).
  std::vector<std::shared_ptr<const Permutation>> recent;
};

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  if (n < 0) throw_input("permutation size {} is negative", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  shuffle(p.data(), n, seed, epoch);
  return p;
}

namespace {

// meta.json beside shards (`weft prepare`'s), parsed; null when there is none.
nlohmann::json read_meta(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return nullptr;
  const std::string text = read_file(path);  // InputError naming the path
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: not valid JSON ({}): `weft prepare` writes it beside its shards; prepare the corpus again", path,
                e.what());
  }
}

// A corpus prepared with another tokenizer than the model's: its vocabulary (meta.json's
// vocab_size) differs from the model's.
void check_meta_vocabulary(const nlohmann::json& meta, const std::string& meta_path, int vocab_size) {
  if (!meta.is_object() || !meta.contains("vocab_size") || !meta["vocab_size"].is_number_integer()) return;
  const int64_t v = meta["vocab_size"].get<int64_t>();
  if (v == vocab_size) return;
  throw_input("{}: the corpus was tokenized by {} ({} tokens), but the model reads a vocabulary of {}: prepare it "
              "with the model's tokenizer (weft prepare --tokenizer), or set the model's vocab_size",
              meta_path, meta.value("tokenizer_source", meta.value("tokenizer", std::string("?"))), v, vocab_size);
}

}  // namespace

TokenDataset::TokenDataset(const std::vector<std::string>& shard_paths, int vocab_size)
    : paths_(shard_paths), vocab_(vocab_size), cache_(std::make_unique<PermutationCache>()) {
  if (shard_paths.empty()) throw_input("a token dataset needs at least one shard, got none");
  if (vocab_size <= 0) {
    throw_input("{}: the model's vocab_size must be positive to check the token ids, got {}", shard_paths.front(),
                vocab_size);
  }
  shards_.reserve(shard_paths.size());
  starts_.reserve(shard_paths.size() + 1);
  std::map<std::string, nlohmann::json> metas;  // meta.json by folder (null: none)
  for (const std::string& p : shard_paths) {
    const auto t0 = std::chrono::steady_clock::now();
    shards_.emplace_back(p, vocab_size);
    const std::string meta = (std::filesystem::path(p).parent_path() / "meta.json").string();
    if (!metas.count(meta)) {
      metas[meta] = read_meta(meta);
      check_meta_vocabulary(metas[meta], meta, vocab_size);
    }
    check_shard_record(shards_.back(), metas[meta], meta);
    if (!shards_.back().has_record()) {
      scanned_tokens_ += shards_.back().size();
      scan_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    starts_.push_back(total_);
    total_ += shards_.back().size();
  }
  starts_.push_back(total_);
  if (scanned_tokens_ > 0) {
    log_info("{}: scanned {} tokens of shards without weft's header record for ids >= {} in {:.2f} s (shards written "
             "by `weft prepare` are checked from their header instead)",
             describe(), scanned_tokens_, vocab_size, scan_seconds_);
  }
}

TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;
TokenDataset::~TokenDataset() = default;

std::vector<std::string> TokenDataset::find_split_files(const std::string& dir_or_glob,
                                                        const std::string& split) {
  if (split.empty()) throw_input("split name is empty (expected e.g. \"train\" or \"val\")");
  std::vector<std::string> found;
  std::vector<std::string> others;  // candidates that did not match, for the error message
  std::error_code ec;
  const char* where;
  if (fs::is_directory(dir_or_glob, ec)) {
    where = "folder";
    for (const auto& entry : fs::directory_iterator(dir_or_glob, ec)) {
      std::error_code ec2;
      if (!entry.is_regular_file(ec2)) continue;
      const std::string name = entry.path().filename().string();
      (in_split(name, split) ? found : others).push_back(entry.path().string());
    }
    if (ec) throw_input("cannot list folder {}: {}", dir_or_glob, ec.message());
  } else if (is_glob(dir_or_glob)) {
    where = "glob pattern";
    glob_t g{};
    int rc = ::glob(dir_or_glob.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        const std::string path = g.gl_pathv[i];
        std::error_code ec2;
        if (!fs::is_regular_file(path, ec2)) continue;
        (in_split(fs::path(path).filename().string(), split) ? found : others).push_back(path);
      }
    }
    ::globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) throw_input("cannot expand glob pattern {}", dir_or_glob);
  } else if (fs::is_regular_file(dir_or_glob, ec)) {
    return {dir_or_glob};  // one shard named explicitly
  } else {
    throw_input("token data {} does not exist (expected a folder of *.bin shards, a glob pattern "
                "or a shard file; run `weft prepare` to make one)",
                dir_or_glob);
  }
  if (found.empty()) {
    std::sort(others.begin(), others.end());
    std::string seen;
    for (size_t i = 0; i < others.size() && i < 5; ++i) {
      seen += (i ? ", " : "") + fs::path(others[i]).filename().string();
    }
    if (others.size() > 5) seen += fmt::format(", ... ({} in all)", others.size());
    throw_input("no \"{}\" shards in {} {}: looked for files named like <name>_{}_000000.bin{}",
                split, where, dir_or_glob, split,
                others.empty() ? std::string(" (it holds no files)") : " (found only: " + seen + ")");
  }
  std::sort(found.begin(), found.end());
  return found;
}

TokenDataset TokenDataset::open_split(const std::string& dir_or_glob, const std::string& split, int vocab_size) {
  return TokenDataset(find_split_files(dir_or_glob, split), vocab_size);
}

std::string TokenDataset::describe() const {
  if (paths_.size() == 1) return paths_[0];
  return fmt::format("{} shards ({}, ...)", paths_.size(), paths_.front());
}

int32_t TokenDataset::token(int64_t i) const {
  if (i < 0 || i >= total_) throw_input("{}: token index {} is outside [0, {})", describe(), i, total_);
  const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  return shards_[k].token(i - starts_[k]);
}

void TokenDataset::copy(int64_t begin, int64_t count, int32_t* out) const {
  if (begin < 0 || count < 0 || begin > total_ - count) {
    throw_input("{}: token range [{}, {}) is outside [0, {})", describe(), begin, begin + count,
                total_);
  }
  if (count == 0) return;
  // First shard holding `begin` (skipping empty shards, whose start equals the next one's).
  size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  int64_t pos = begin;
  while (count > 0) {
    const int64_t local = pos - starts_[k];
    const int64_t n = std::min(count, shards_[k].size() - local);
    if (n > 0) {
      shards_[k].copy(local, n, out);
      out += n;
      pos += n;
      count -= n;
    }
    ++k;
  }
}

int64_t TokenDataset::num_windows(int64_t T) const {
  if (T <= 0) throw_input("sequence length T must be positive, got {}", T);
  return total_ >= T + 1 ? (total_ - 1) / T : 0;
}

void TokenDataset::require_windows(int T, const char* what) const {
  if (T <= 0) throw_input("{}: sequence length T must be positive, got {}", what, T);
  if (total_ < static_cast<int64_t>(T) + 1) {
    throw_input("{}: {} holds {} tokens, fewer than one window of T+1 = {} tokens", what,
                describe(), total_, static_cast<int64_t>(T) + 1);
  }
}

void TokenDataset::window(int64_t w, int T, int32_t* inputs, int32_t* targets) const {
  require_windows(T, "window");
  const int64_t n = num_windows(T);
  if (w < 0 || w >= n) {
    throw_input("window {} is outside [0, {}) for T = {} over {} tokens of {}", w, n, T, total_,
                describe());
  }
  copy(w * T, T, inputs);
  copy(w * T + 1, T, targets);
}

std::shared_ptr<const TokenDataset::Permutation> TokenDataset::permutation(uint64_t seed, int T,
                                                                           int64_t epoch) const {
  std::lock_guard lock(cache_->mu);
  for (const auto& p : cache_->recent) {
    if (p->seed == seed && p->T == T && p->epoch == epoch) return p;
  }
  auto perm = std::make_shared<Permutation>();
  perm->seed = seed;
  perm->T = T;
  perm->epoch = epoch;
  const int64_t n = num_windows(T);
  if (n <= static_cast<int64_t>(UINT32_MAX)) {
    perm->p32.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) perm->p32[i] = static_cast<uint32_t>(i);
    shuffle(perm->p32.data(), n, seed, epoch);
  } else {
    perm->p64 = epoch_permutation(seed, epoch, n);
  }
  cache_->recent.insert(cache_->recent.begin(), perm);
  if (cache_->recent.size() > 2) cache_->recent.pop_back();
  return perm;
}

int64_t TokenDataset::sample_window(uint64_t seed, int64_t g, int T) const {
  require_windows(T, "sample_window");
  if (g < 0) throw_input("global sample index {} is negative", g);
  const int64_t n = num_windows(T);
  return permutation(seed, T, g / n)->at(g % n);
}

void TokenDataset::sample_batch(uint64_t seed, int64_t step, int64_t global_batch,
                                int64_t first_sample, int64_t count, int T, int32_t* inputs,
                                int32_t* targets) const {
  require_windows(T, "sample_batch");
  if (step < 0) throw_input("sample_batch: step {} is negative", step);
  if (global_batch <= 0) throw_input("sample_batch: global batch {} must be positive", global_batch);
  if (first_sample < 0 || count < 0 || first_sample > global_batch - count) {
    throw_input("sample_batch: samples [{}, {}) are outside the global batch [0, {})", first_sample,
                first_sample + count, global_batch);
  }
  int64_t g0;
  if (__builtin_mul_overflow(step, global_batch, &g0)) {
    throw_input("sample_batch: step {} x global batch {} overflows int64", step, global_batch);
  }
  g0 += first_sample;
  const int64_t n = num_windows(T);
  std::shared_ptr<const Permutation> perm;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t g = g0 + r;
    const int64_t epoch = g / n;
    if (!perm || perm->epoch != epoch) perm = permutation(seed, T, epoch);
    const int64_t w = perm->at(g % n);
    copy(w * T, T, inputs + r * T);
    copy(w * T + 1, T, targets + r * T);
  }
}

}  // namespace weft
