// Reading a Hugging Face `tokenizer.json` (internal to src/data, for data/tokenizer.cc): the
// byte-level BPEs of GPT-2, GPT-NeoX/MPT, Llama 3, Qwen and the like. What weft follows:
//   model       BPE: vocab, merges ("a b" strings or [a, b] pairs), ignore_merges; no
//               dropout, unk_token, byte_fallback, continuing_subword_prefix or
//               end_of_word_suffix (a byte-level BPE has none);
//   normalizer  none or NFC;
//   pre_tokenizer ByteLevel (its regex when use_regex, add_prefix_space), or a Sequence of one
//               Split (a Regex, behavior Isolated, not inverted) and ByteLevel without regex;
//   added_tokens matched in the text before everything else (leftmost, longest), special or
//               not; lstrip/rstrip take the whitespace beside a match;
//   post_processor a TemplateProcessing whose single sequence starts with a special token names
//               the document separator `weft prepare` puts first (Llama 3's <|begin_of_text|>);
//               else <|endoftext|>, <|end_of_text|>, </s> or <eos>, the first present.
// Anything else is refused naming the file and the key.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weft::tokenizer_json {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false;
};

struct Spec {
  std::vector<std::string> symbols;  // id -> byte-level symbol string (added tokens: their content)
  std::vector<bool> is_added;        // id -> an added token (its bytes are its content)
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  std::vector<AddedToken> added;
  std::string pattern;  // the pre-tokenisation regex (PCRE2 syntax, Unicode)
  bool nfc = false;
  bool add_prefix_space = false;
  bool ignore_merges = false;
  int32_t separator = -1;  // the document separator's id
  std::string separator_name;
};

// Hugging Face's ByteLevel regex (tokenizers/src/pre_tokenizers/byte_level.rs), Unicode \s.
extern const char* const kByteLevelPattern;

// Reads and checks `path`; InputError naming the file and what is wrong.
Spec read(const std::string& path);

}  // namespace weft::tokenizer_json
