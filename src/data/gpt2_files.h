// Reading GPT-2's tokenizer files (internal to src/data): the vocabulary (encoder.json or
// vocab.json) and the merges (vocab.bpe or merges.txt), checked, for data/tokenizer.cc. Every
// error is an InputError naming the file (and the line for merges).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace weft::gpt2_files {

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

using IdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocab {
  std::vector<std::string> symbols;  // id -> symbol string
  IdMap id_of;                       // symbol string -> id
};

// Vocabulary: {"symbol string": id}; ids must be exactly 0..V-1.
Vocab read_vocab(const std::string& vocab_file);

// Bytes of every token: map each symbol character back through bytes_to_unicode. A character
// outside the map (only possible in added special tokens) stands for its own UTF-8 bytes.
std::vector<std::string> token_bytes_of(const std::vector<std::string>& symbols,
                                        const std::string& vocab_file);

// byte -> id of its one-symbol token; every byte must have one.
std::array<int32_t, 256> byte_tokens_of(const IdMap& id_of, const std::string& vocab_file);

// The id of <|endoftext|>.
int32_t eot_token_of(const IdMap& id_of, const std::string& vocab_file);

struct MergeTable {
  std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> merge
  int32_t count = 0;                           // lines read, i.e. the next rank
};

// Merges: one "left right" pair per line, by priority; a "#version" first line is skipped.
MergeTable read_merges(const std::string& merges_file, const IdMap& id_of,
                       const std::string& vocab_file);

}  // namespace weft::gpt2_files
