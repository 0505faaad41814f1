#include "data/gpt2_files.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/text_util.h"

namespace weft::gpt2_files {

namespace {

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

// The vocabulary file parsed: a non-empty JSON object.
nlohmann::json parse_vocab_json(const std::string& vocab_file) {
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
  return vocab;
}

// The fields of a line separated by spaces or tabs.
std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) parts.push_back(line.substr(i, j - i));
    i = j;
  }
  return parts;
}

// Adds the merge on line `line_no` of the merges file with the next rank.
void add_merge(std::string_view line, int line_no, const IdMap& id_of,
               const std::string& merges_file, const std::string& vocab_file, MergeTable& table) {
  const std::vector<std::string_view> parts = split_fields(line);
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
  table.merges[pair_key(left->second, right->second)] = Merge{table.count, result->second};
  ++table.count;
}

}  // namespace

// Vocabulary: {"symbol string": id}; ids must be exactly 0..V-1.
Vocab read_vocab(const std::string& vocab_file) {
  const nlohmann::json vocab = parse_vocab_json(vocab_file);
  const size_t V = vocab.size();
  if (V > static_cast<size_t>(INT32_MAX)) throw_input("{}: {} tokens is too many", vocab_file, V);
  Vocab out;
  out.symbols.resize(V);
  std::vector<bool> seen(V, false);
  out.id_of.reserve(V);
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
      throw_input("{}: id {} is used by both {} and {}", vocab_file, id, out.symbols[id], it.key());
    }
    seen[id] = true;
    out.symbols[id] = it.key();
    out.id_of.emplace(it.key(), static_cast<int32_t>(id));
  }
  return out;
}

// Bytes of every token: map each symbol character back through bytes_to_unicode. A character
// outside the map (only possible in added special tokens) stands for its own UTF-8 bytes.
std::vector<std::string> token_bytes_of(const std::vector<std::string>& symbols,
                                        const std::string& vocab_file) {
  const std::array<uint32_t, 256> b2u = bytes_to_unicode();
  std::unordered_map<uint32_t, uint8_t> u2b;
  for (int b = 0; b < 256; ++b) u2b[b2u[b]] = static_cast<uint8_t>(b);
  std::vector<std::string> token_bytes(symbols.size());
  for (size_t id = 0; id < symbols.size(); ++id) {
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
    token_bytes[id] = std::move(bytes);
  }
  return token_bytes;
}

// byte -> id of its one-symbol token; every byte must have one.
std::array<int32_t, 256> byte_tokens_of(const IdMap& id_of, const std::string& vocab_file) {
  const std::array<uint32_t, 256> b2u = bytes_to_unicode();
  std::array<int32_t, 256> byte_token{};
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(sym, b2u[b]);
    auto it = id_of.find(sym);
    if (it == id_of.end()) {
      throw_input("{}: no token for byte 0x{:02X} (symbol {}): not a byte-level BPE vocabulary",
                  vocab_file, b, sym);
    }
    byte_token[b] = it->second;
  }
  return byte_token;
}

int32_t eot_token_of(const IdMap& id_of, const std::string& vocab_file) {
  auto eot_it = id_of.find("<|endoftext|>");
  if (eot_it == id_of.end()) throw_input("{}: no <|endoftext|> token", vocab_file);
  return eot_it->second;
}

// Merges: one "left right" pair per line, by priority; a "#version" first line is skipped.
MergeTable read_merges(const std::string& merges_file, const IdMap& id_of,
                       const std::string& vocab_file) {
  const std::string text = read_file(merges_file);
  MergeTable table;
  table.merges.reserve(65536);
  for_each_line(text, [&](std::string_view line, int64_t line_no) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if ((line_no == 1 && line.starts_with("#version")) || line.empty()) return;
    add_merge(line, static_cast<int>(line_no), id_of, merges_file, vocab_file, table);
  });
  if (table.count == 0) throw_input("{}: no merges found", merges_file);
  return table;
}

}  // namespace weft::gpt2_files
