#include "data/tokenizer_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/text_util.h"

namespace weft::tokenizer_json {

const char* const kByteLevelPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

using nlohmann::json;

// The largest tokenizer.json read (Llama 3's is 9 MB, Qwen's 7 MB).
constexpr int64_t kMaxBytes = int64_t{512} << 20;

[[noreturn]] void bad(const std::string& path, const std::string& what) { throw_input("{}: {}", path, what); }

bool is_null_or(const json& j, const char* key, const json& ok) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() || *it == ok;
}

void read_model(const std::string& path, const json& m, Spec& s) {
  if (!m.is_object() || m.value("type", "") != "BPE") {
    bad(path, fmt::format("model.type is '{}': weft reads byte-level BPE tokenizers (type BPE)",
                          m.is_object() ? m.value("type", "") : std::string("?")));
  }
  // ("" is none: GPT-2's tokenizer.json writes the prefix and suffix as empty strings.)
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!is_null_or(m, key, json()) && !is_null_or(m, key, json(""))) {
      bad(path, fmt::format("model.{} = {}: not a byte-level BPE's (weft reads none)", key, m[key].dump()));
    }
  }
  if (!is_null_or(m, "byte_fallback", false)) bad(path, "model.byte_fallback = true: a SentencePiece-style BPE, not a byte-level one");
  s.ignore_merges = m.value("ignore_merges", false);
  const auto v = m.find("vocab");
  if (v == m.end() || !v->is_object() || v->empty()) bad(path, "model.vocab must be an object of token: id");
  int64_t top = -1;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= (int64_t{1} << 31)) {
      bad(path, fmt::format("model.vocab['{}'] = {}: ids are integers in [0, 2^31)", it.key(), it->dump()));
    }
    top = std::max(top, it->get<int64_t>());
  }
  s.symbols.assign(static_cast<size_t>(top + 1), std::string());
  s.is_added.assign(static_cast<size_t>(top + 1), false);
  std::vector<bool> seen(static_cast<size_t>(top + 1), false);
  for (auto it = v->begin(); it != v->end(); ++it) {
    const size_t id = static_cast<size_t>(it->get<int64_t>());
    if (seen[id]) bad(path, fmt::format("model.vocab: id {} is given to '{}' and '{}'", id, s.symbols[id], it.key()));
    seen[id] = true;
    s.symbols[id] = it.key();
  }
  const auto mg = m.find("merges");
  if (mg == m.end() || !mg->is_array()) bad(path, "model.merges must be a list");
  for (size_t i = 0; i < mg->size(); ++i) {
    const json& e = (*mg)[i];
    if (e.is_string()) {
      const std::string t = e.get<std::string>();
      const size_t sp = t.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= t.size() || t.find(' ', sp + 1) != std::string::npos) {
        bad(path, fmt::format("model.merges[{}] = '{}': expected two symbols separated by one space", i, t));
      }
      s.merges.emplace_back(t.substr(0, sp), t.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      s.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      bad(path, fmt::format("model.merges[{}] = {}: expected \"a b\" or [\"a\", \"b\"]", i, e.dump()));
    }
  }
}

void read_added(const std::string& path, const json& j, Spec& s) {
  const auto a = j.find("added_tokens");
  if (a == j.end() || a->is_null()) return;
  if (!a->is_array()) bad(path, "added_tokens must be a list");
  for (size_t i = 0; i < a->size(); ++i) {
    const json& t = (*a)[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string() || t["content"].get<std::string>().empty() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= (int64_t{1} << 31)) {
      bad(path, fmt::format("added_tokens[{}]: needs an id in [0, 2^31) and a non-empty content", i));
    }
    if (t.value("single_word", false)) {
      bad(path, fmt::format("added_tokens[{}] '{}': single_word = true is not supported", i, t["content"].get<std::string>()));
    }
    AddedToken at{t["content"].get<std::string>(), static_cast<int32_t>(t["id"].get<int64_t>()), t.value("special", false),
                  t.value("lstrip", false), t.value("rstrip", false)};
    if (!is_valid_utf8(at.content)) bad(path, fmt::format("added_tokens[{}]: content is not UTF-8", i));
    const size_t id = static_cast<size_t>(at.id);
    if (id >= s.symbols.size()) {
      s.symbols.resize(id + 1);
      s.is_added.resize(id + 1, false);
    }
    if (!s.symbols[id].empty() && s.symbols[id] != at.content) {
      bad(path, fmt::format("added_tokens[{}]: id {} is '{}' in the vocabulary and '{}' here", i, id, s.symbols[id], at.content));
    }
    s.symbols[id] = at.content;
    s.is_added[id] = true;
    s.added.push_back(std::move(at));
  }
}

// The ByteLevel pre-tokenizer's add_prefix_space into s; whether it splits with its own regex.
bool byte_level(const json& p, Spec& s) {
  s.add_prefix_space = p.value("add_prefix_space", false);
  return p.value("use_regex", true);
}

void read_pre_tokenizer(const std::string& path, const json& j, Spec& s) {
  const json& p = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
  const std::string kinds = "ByteLevel, or a Sequence of Split (Regex, Isolated) and ByteLevel (use_regex false)";
  if (p.is_object() && p.value("type", "") == "ByteLevel") {
    if (!byte_level(p, s)) bad(path, "pre_tokenizer ByteLevel with use_regex = false alone: nothing splits the words (" + kinds + ")");
    s.pattern = kByteLevelPattern;
    return;
  }
  if (p.is_object() && p.value("type", "") == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array() &&
      p["pretokenizers"].size() == 2) {
    const json& sp = p["pretokenizers"][0];
    const json& bl = p["pretokenizers"][1];
    if (sp.is_object() && sp.value("type", "") == "Split" && bl.is_object() && bl.value("type", "") == "ByteLevel") {
      if (!sp.contains("pattern") || !sp["pattern"].is_object() || !sp["pattern"].contains("Regex") ||
          !sp["pattern"]["Regex"].is_string()) {
        bad(path, "pre_tokenizer Split: its pattern must be a Regex");
      }
      if (sp.value("behavior", "") != "Isolated" || sp.value("invert", false)) {
        bad(path, fmt::format("pre_tokenizer Split: behavior '{}', invert {}: weft reads Isolated, not inverted",
                              sp.value("behavior", ""), sp.value("invert", false)));
      }
      if (byte_level(bl, s)) bad(path, "pre_tokenizer Split then ByteLevel with use_regex = true: two regexes are not supported");
      s.pattern = sp["pattern"]["Regex"].get<std::string>();
      return;
    }
  }
  bad(path, fmt::format("pre_tokenizer {}: weft reads {}", p.is_null() ? "null" : p.dump().substr(0, 200), kinds));
}

void read_normalizer(const std::string& path, const json& j, Spec& s) {
  const json& n = j.contains("normalizer") ? j["normalizer"] : json();
  if (n.is_null()) return;
  if (n.is_object() && n.value("type", "") == "NFC") {
    s.nfc = true;
    return;
  }
  bad(path, fmt::format("normalizer {}: weft reads none or NFC", n.dump().substr(0, 200)));
}

void read_separator(const std::string& path, const json& j, Spec& s) {
  const json& pp = j.contains("post_processor") ? j["post_processor"] : json();
  if (pp.is_object() && pp.value("type", "") == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array() &&
      !pp["single"].empty() && pp["single"][0].is_object() && pp["single"][0].contains("SpecialToken")) {
    const std::string name = pp["single"][0]["SpecialToken"].value("id", "");
    for (const AddedToken& a : s.added) {
      if (a.content == name) {
        s.separator = a.id, s.separator_name = name;
        return;
      }
    }
    bad(path, fmt::format("post_processor: its first token '{}' is not an added token", name));
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) {
    for (const AddedToken& a : s.added) {
      if (a.content == name) {
        s.separator = a.id, s.separator_name = name;
        return;
      }
    }
  }
  bad(path, "no document separator: neither a post_processor template that starts with a special token nor an added "
            "<|endoftext|>, <|end_of_text|>, </s> or <eos>");
}

}  // namespace

Spec read(const std::string& path) {
  const std::string text = read_text_file(path, kMaxBytes);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(path, fmt::format("not JSON: {}", e.what()));
  }
  if (!j.is_object() || !j.contains("model")) bad(path, "not a Hugging Face tokenizer.json (no \"model\")");
  Spec s;
  read_model(path, j["model"], s);
  read_added(path, j, s);
  read_normalizer(path, j, s);
  read_pre_tokenizer(path, j, s);
  for (size_t id = 0; id < s.symbols.size(); ++id) {
    if (s.symbols[id].empty()) bad(path, fmt::format("id {} is neither in model.vocab nor an added token", id));
  }
  read_separator(path, j, s);
  return s;
}

}  // namespace weft::tokenizer_json
