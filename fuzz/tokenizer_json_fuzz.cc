// Fuzz target: a Hugging Face tokenizer.json (data/tokenizer_json.h) as Tokenizer::load_json and
// `weft prepare --tokenizer FILE` read it; fuzz/corpus/tokenizer_json/ has the three test
// tokenizers of tests/data/tokenizers/ as seeds. An accepted tokenizer encodes a fixed text
// whose ids must lie in [0, V) and decode without error. InputError is the expected refusal;
// anything else is a finding.
#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  const std::string path = fuzz::write_scratch("tokenizer.json", fuzz::as_view(data, size));
  fuzz::expect_weft_errors([&] {
    const Tokenizer tok = Tokenizer::load_json(path);
    fuzz::require(tok.eot_token() >= 0 && tok.eot_token() < tok.vocab_size(), "the separator has an id in [0, V)");
    const std::string text = "Hello <|endoftext|> world, it's  caf\xc3\xa9 cafe\xcc\x81 \xf0\x9f\x98\x80 12345\n\t";
    const std::vector<int32_t> ids = tok.encode(text);
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tok.vocab_size(), "every id in [0, V)");
    (void)tok.decode(ids);
  });
  return 0;
}
