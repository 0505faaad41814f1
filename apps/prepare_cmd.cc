// `weft prepare`: tokenizes text files, folders or JSONL into llm.c-format token shards.
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "data/prepare.h"

namespace weft {

namespace {

// Whether `out` holds shards that weft prepared from the same inputs and settings: re-running
// the same preparation is idempotent (they are replaced without --overwrite); anything else in
// the folder is protected.
bool repeats_earlier_preparation(const std::vector<std::string>& inputs, const std::string& out, double val_fraction,
                                 int64_t shard_tokens, int64_t seed) {
  const std::filesystem::path meta = std::filesystem::path(out) / "meta.json";
  if (!std::filesystem::exists(meta)) return false;
  try {
    auto j = nlohmann::json::parse(std::ifstream(meta));
    return j.value("inputs", std::vector<std::string>{}) == inputs && j.value("seed", int64_t{-1}) == seed &&
           j.value("val_fraction", -1.0) == val_fraction && j.value("shard_tokens", int64_t{-1}) == shard_tokens;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int cmd_prepare(CLI::App& app, int argc, char** argv, Communicator&) {
  std::vector<std::string> inputs;
  std::string out, tokenizer;
  double val_fraction = 0.02;
  int64_t shard_tokens = 100'000'000, seed = 1337;
  bool overwrite = false;
  app.add_option("--input", inputs, "text files, folders of them, or JSONL files with a \"text\" field")->required();
  app.add_option("--out", out, "output folder for the shards")->required();
  app.add_option("--tokenizer", tokenizer, "folder with GPT-2's encoder.json + vocab.bpe (default: installed by setup.sh)");
  app.add_option("--val-fraction", val_fraction, "fraction of documents held out for validation");
  app.add_option("--shard-tokens", shard_tokens, "tokens per shard file");
  app.add_option("--seed", seed, "seed of the train/validation split");
  app.add_flag("--overwrite", overwrite, "replace the shards of an earlier preparation in --out");
  app.parse(argc - 1, argv + 1);
  PrepareOptions o;
  o.overwrite = overwrite || repeats_earlier_preparation(inputs, out, val_fraction, shard_tokens, seed);
  o.inputs = std::move(inputs);
  o.out_dir = std::move(out);
  o.tokenizer_dir = std::move(tokenizer);
  o.val_fraction = val_fraction;
  o.shard_tokens = shard_tokens;
  o.seed = static_cast<uint64_t>(seed);
  prepare_corpus(o);
  return 0;
}

}  // namespace weft
