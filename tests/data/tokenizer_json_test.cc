// Hugging Face tokenizer.json (data/tokenizer_json.h) through weft's Tokenizer: token-identical
// to Hugging Face `tokenizers` 0.23 on tests/data/tokenizers/corpus.txt (multibyte text,
// decomposed accents, emoji, special and added tokens in the text) for three byte-level BPEs
// (GPT-2's regex; Llama 3's Split regex with ignore_merges; NFC with add_prefix_space), whose
// reference encodings tests/data/tokenizers/make_reference.py wrote; decode inverts encode;
// unsupported or broken files are refused naming the file and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace weft {
namespace {

const std::string kDir = std::string(WEFT_SOURCE_DIR) + "/tests/data/tokenizers/";

std::vector<std::string> corpus_lines() {
  const std::string text = test::read_text(kDir + "corpus.txt");
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t at = text.find('\n'); ; at = text.find('\n', start)) {
    lines.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return lines;
}

TEST(TokenizerJson, MatchesHuggingFaceTokenizersOnTheCorpus) {
  const nlohmann::json ref = nlohmann::json::parse(test::read_text(kDir + "reference.json"));
  const std::vector<std::string> lines = corpus_lines();
  const std::string whole = test::read_text(kDir + "corpus.txt");
  for (const char* name : {"bytelevel", "llama3", "nfc"}) {
    SCOPED_TRACE(name);
    const Tokenizer tok = Tokenizer::load_json(kDir + name + ".json");
    const nlohmann::json& r = ref[name];
    EXPECT_EQ(tok.vocab_size(), r["vocab_size"].get<int>());
    ASSERT_EQ(lines.size(), r["lines"].size());
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(tok.encode(lines[i]), r["lines"][i].get<std::vector<int32_t>>()) << "line " << i << ": " << lines[i];
    }
    EXPECT_EQ(tok.encode(whole), r["whole"].get<std::vector<int32_t>>());
    if (std::string(name) != "nfc") {
      // Byte-level without a prefix space or normalisation: decode is the exact inverse.
      for (const std::string& l : lines) EXPECT_EQ(tok.decode(tok.encode(l)), l);
    }
  }
  // The document separators: GPT-2-style <|endoftext|>, Llama 3's template's <|begin_of_text|>.
  EXPECT_EQ(Tokenizer::load_json(kDir + "bytelevel.json").separator_name(), "<|endoftext|>");
  const Tokenizer llama = Tokenizer::load_json(kDir + "llama3.json");
  EXPECT_EQ(llama.separator_name(), "<|begin_of_text|>");
  EXPECT_EQ(llama.eot_token(), 0);
  // Tokenizer::load: a file, or a folder holding a tokenizer.json.
  test::TempDir tmp("tokenizer-json");
  std::ofstream(tmp / "tokenizer.json") << test::read_text(kDir + "llama3.json");
  EXPECT_EQ(Tokenizer::load(tmp.path().string()).vocab_size(), llama.vocab_size());
  EXPECT_EQ(Tokenizer::load(kDir + "llama3.json").vocab_size(), llama.vocab_size());
  EXPECT_EQ(Tokenizer::load("").vocab_size(), 50257);  // GPT-2's vendored files
}

TEST(TokenizerJson, UnsupportedOrBrokenFilesAreRefused) {
  test::TempDir tmp("tokenizer-json");
  nlohmann::json good = nlohmann::json::parse(test::read_text(kDir + "bytelevel.json"));
  const auto refused = [&](const nlohmann::json& j, const std::vector<std::string>& parts) {
    const std::string p = tmp / "t.json";
    std::ofstream(p) << j.dump();
    try {
      Tokenizer::load_json(p);
      ADD_FAILURE() << "loaded: " << j.dump().substr(0, 200);
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("t.json"), std::string::npos) << e.what();
      for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = good;
  j["model"]["type"] = "WordPiece";
  refused(j, {"model.type is 'WordPiece'"});
  j = good;
  j["model"]["byte_fallback"] = true;
  refused(j, {"byte_fallback"});
  j = good;
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  refused(j, {"pre_tokenizer", "Metaspace"});
  j = good;
  j["normalizer"] = {{"type", "Lowercase"}};
  refused(j, {"normalizer", "Lowercase"});
  j = good;
  j["model"]["merges"].push_back({"zzz", "q"});
  refused(j, {"model.merges[", "zzz"});
  j = good;
  j["model"]["merges"][0] = "one-symbol";
  refused(j, {"model.merges[0]"});
  j = good;
  j["added_tokens"].push_back({{"id", 5000}, {"content", "<x>"}});
  refused(j, {"id 421 is neither"});
  j = good;
  j["added_tokens"] = nlohmann::json::array();
  refused(j, {"no document separator"});
  j = good;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  refused(j, {"regex"});
  std::ofstream(tmp / "t.json") << "{not json";
  EXPECT_THROW(Tokenizer::load_json(tmp / "t.json"), InputError);
  EXPECT_THROW(Tokenizer::load(tmp / "missing.json"), InputError);
}

// weft prepare --tokenizer tokenizer.json: every document as the separator (Llama 3's template's
// <|begin_of_text|>) then its tokens; meta.json names the tokenizer, its vocabulary and
// separator; a model of another vocabulary refuses the corpus at open, naming both.
TEST(TokenizerJson, PrepareRecordsTheTokenizerAndAModelOfAnotherVocabularyRefusesIt) {
  test::TempDir tmp("tokenizer-json");
  std::filesystem::create_directories(tmp / "in");
  const std::vector<std::string> docs = {"Hello world, caf\xc3\xa9 <|end_of_text|> done.\n", "Second doc \xf0\x9f\x98\x80 12345.\n",
                                         "Third one.\n", "A fourth, longer document with words.\n"};
  for (size_t i = 0; i < docs.size(); ++i) std::ofstream(tmp / fmt::format("in/d{}.txt", i)) << docs[i];
  const std::string tj = kDir + "llama3.json";
  test::RunResult r = test::run_weft("prepare --input " + tmp / "in" + " --out " + tmp / "data" + " --tokenizer " + tj,
                                     tmp / "prep");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json meta = nlohmann::json::parse(test::read_text(tmp / "data/meta.json"));
  EXPECT_EQ(meta["tokenizer"], tj);
  EXPECT_EQ(meta["vocab_size"], 450);
  EXPECT_EQ(meta["separator"], "<|begin_of_text|>");
  EXPECT_EQ(meta["eot_token"], 0);
  const Tokenizer tok = Tokenizer::load_json(tj);
  int64_t want = 0, got = 0, separators = 0;
  for (const std::string& d : docs) want += 1 + static_cast<int64_t>(tok.encode(d).size());
  for (const auto& e : std::filesystem::directory_iterator(tmp.path() / "data")) {
    if (e.path().extension() != ".bin") continue;
    ShardReader sh(e.path().string(), 450);
    got += sh.size();
    EXPECT_EQ(sh.token(0), 0) << e.path();
    for (int64_t i = 0; i < sh.size(); ++i) separators += sh.token(i) == 0;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(separators, static_cast<int64_t>(docs.size()));
  // A GPT-2 model (vocabulary 50257) refuses the corpus before training.
  std::ofstream(tmp / "run.toml") << "[model]\nmodel = \"tiny\"\nn_layer = 1\nn_head = 2\nn_embd = 32\nn_ctx = 16\n"
                                  << "[data]\ndata = \"" << (tmp / "data") << "\"\n[train]\nseq_len = 8\nglobal_batch = 1\n"
                                  << "micro_batch = 1\nsteps = 1\n[run]\nout = \"" << (tmp / "run") << "\"\n";
  r = test::run_weft("train " + tmp / "run.toml", tmp / "train");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("450 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("50257"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama3.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft
