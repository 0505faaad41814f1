// Fuzz target: a token shard (data/shard.h, llm.c's format) opened as the data loader opens it:
// ShardReader validates the header against the file size, then the tokens are read one by one,
// in ranges and checked against GPT-2's vocabulary. InputError is the expected refusal; anything
// else is a finding (fuzz/fuzz_util.h).
#include <algorithm>
#include <vector>

#include "data/shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  const std::string path = fuzz::write_scratch("shard.bin", fuzz::as_view(data, size));
  fuzz::expect_weft_errors([&] {
    ShardReader r(path);
    fuzz::require(r.size() >= 0, "token count >= 0");
    fuzz::require(static_cast<size_t>(kShardHeaderBytes + r.size() * r.token_bytes()) == size,
                  "an accepted shard's size equals header + count * token bytes");
    std::vector<int32_t> all(static_cast<size_t>(r.size()));
    r.copy(0, r.size(), all.data());
    for (int64_t i = 0; i < r.size(); ++i) fuzz::require(r.token(i) == all[i], "token(i) equals copy()[i]");
    r.check_vocab(50257);
    // What the loader trains on after the check: every id inside the vocabulary.
    fuzz::require(std::all_of(all.begin(), all.end(), [](int32_t t) { return t >= 0 && t < 50257; }),
                  "after check_vocab every id lies in [0, V)");
  });
  // Out-of-range requests on an accepted shard are InputErrors, never reads outside the map.
  fuzz::expect_weft_errors([&] {
    ShardReader r(path);
    int32_t t = 0;
    fuzz::expect_weft_errors([&] { (void)r.token(r.size()); });
    fuzz::expect_weft_errors([&] { (void)r.token(-1); });
    fuzz::expect_weft_errors([&] { r.copy(r.size(), 1, &t); });
    fuzz::expect_weft_errors([&] { r.copy(-1, 1, &t); });
  });
  return 0;
}
