// Fuzz target: the files of a byte-level BPE tokenizer (data/gpt2_files.h) as
// Tokenizer::load_gpt2 reads them from a folder: encoder.json (the vocabulary) and vocab.bpe
// (the merges). The input holds both, separated by a line "#--vocab.bpe--"; fuzz/corpus has a
// 262-token vocabulary as seed. An accepted tokenizer encodes and decodes a fixed text, whose
// round trip must hold. InputError is the expected refusal; anything else is a finding.
#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  const std::string_view all = fuzz::as_view(data, size);
  const std::string_view sep = "\n#--vocab.bpe--\n";
  fuzz::write_scratch("encoder.json", fuzz::part(all, sep, 0));
  fuzz::write_scratch("vocab.bpe", fuzz::part(all, sep, 1));
  fuzz::expect_weft_errors([&] {
    const Tokenizer tok = Tokenizer::load_gpt2(fuzz::scratch_dir().string());
    fuzz::require(tok.eot_token() >= 0 && tok.eot_token() < tok.vocab_size(), "<|endoftext|> has an id in [0, V)");
    const std::string text = "Hello world, it's  the tokenizer's 2nd test\n\t\xc3\xa9t\xc3\xa9 \xe2\x82\xac 12345";
    const std::vector<int32_t> ids = tok.encode(text);
    fuzz::require(tok.decode(ids) == text, "an accepted tokenizer round-trips a fixed text");
  });
  return 0;
}
