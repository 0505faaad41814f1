#include "data/icl_tasks.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/text_util.h"

namespace weft {

const char* icl_kind_name(IclKind k) {
  switch (k) {
    case IclKind::kMultipleChoice:
      return "multiple_choice";
    case IclKind::kSchema:
      return "schema";
    case IclKind::kLanguageModeling:
      return "language_modeling";
  }
  return "?";
}

std::string hellaswag_preprocess(std::string_view text) {
  std::string s(text);
  const size_t b = s.find_first_not_of(" \t\n\r\f\v");
  const size_t e = s.find_last_not_of(" \t\n\r\f\v");
  s = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  for (size_t at = s.find(" [title]"); at != std::string::npos; at = s.find(" [title]", at + 2)) {
    s.replace(at, 8, ". ");
  }
  // re.sub("\\[.*?\\]", "", text): the shortest bracketed spans, left to right.
  std::string out;
  for (size_t i = 0; i < s.size();) {
    // (`.` stops at a newline)
    const size_t close = s[i] == '[' ? s.find_first_of("]\n", i + 1) : std::string::npos;
    if (close != std::string::npos && s[close] == ']') {
      i = close + 1;
    } else {
      out += s[i++];
    }
  }
  // text.replace("  ", " "): one pass, non-overlapping, left to right.
  std::string r;
  for (size_t i = 0; i < out.size(); ++i) {
    r += out[i];
    if (out[i] == ' ' && i + 1 < out.size() && out[i + 1] == ' ') ++i;
  }
  return r;
}

std::string python_capitalize(std::string_view text) {
  std::string s(text);
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) s[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

int64_t utf8_length(std::string_view text) {
  int64_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

namespace {

constexpr int64_t kMaxLine = int64_t{16} << 20;

[[noreturn]] void bad_line(const std::string& path, int64_t line, const std::string& why) {
  throw_input("{}:{}: {}", path, line, why);
}

std::string string_of(const nlohmann::json& j, const char* key, const std::string& path, int64_t line) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) bad_line(path, line, fmt::format("'{}' must be a string", key));
  return it->get<std::string>();
}

std::vector<std::string> strings_of(const nlohmann::json& j, const char* key, const std::string& path, int64_t line) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) bad_line(path, line, fmt::format("'{}' must be a list of strings", key));
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) bad_line(path, line, fmt::format("'{}' must be a list of strings", key));
    out.push_back(v.get<std::string>());
  }
  return out;
}

// An integer index: a JSON integer or a string of digits (HellaSwag's label is either).
int index_of(const nlohmann::json& j, const char* key, const std::string& path, int64_t line) {
  const auto it = j.find(key);
  if (it != j.end() && it->is_number_integer()) return it->get<int>();
  if (it != j.end() && it->is_string()) {
    const std::string s = it->get<std::string>();
    if (!s.empty() && s.size() < 9 && s.find_first_not_of("0123456789") == std::string::npos) return std::stoi(s);
  }
  bad_line(path, line, fmt::format("'{}' must be an integer index", key));
}

IclItem hellaswag_item(const nlohmann::json& j, const std::string& path, int64_t line) {
  // lm-evaluation-harness tasks/hellaswag/utils.py: process_docs.
  const std::string ctx = j.contains("ctx_a") ? string_of(j, "ctx_a", path, line) + " " +
                                                    python_capitalize(string_of(j, "ctx_b", path, line))
                                              : string_of(j, "ctx", path, line);
  IclItem it;
  it.contexts = {hellaswag_preprocess(string_of(j, "activity_label", path, line) + ": " + ctx)};
  for (const std::string& e : strings_of(j, "endings", path, line)) it.continuations.push_back(hellaswag_preprocess(e));
  it.gold = index_of(j, "label", path, line);
  return it;
}

IclItem read_item(const std::string& format, const nlohmann::json& j, const std::string& path, int64_t line) {
  IclItem it;
  if (format == "hellaswag") return hellaswag_item(j, path, line);
  if (format == "multiple_choice") {
    it.contexts = {string_of(j, "query", path, line)};
    it.continuations = strings_of(j, "choices", path, line);
    it.gold = index_of(j, "gold", path, line);
  } else if (format == "schema") {
    it.contexts = strings_of(j, "context_options", path, line);
    it.continuations = {string_of(j, "continuation", path, line)};
    it.gold = index_of(j, "gold", path, line);
  } else {
    it.contexts = {string_of(j, "context", path, line)};
    it.continuations = {string_of(j, "continuation", path, line)};
  }
  return it;
}

// The format of a file from its first object's keys.
std::string detect_format(const nlohmann::json& j, const std::string& path) {
  if (j.contains("endings") && (j.contains("ctx_a") || j.contains("ctx"))) return "hellaswag";
  if (j.contains("query") && j.contains("choices")) return "multiple_choice";
  if (j.contains("context_options")) return "schema";
  if (j.contains("context") && j.contains("continuation")) return "language_modeling";
  std::string keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  throw_input("{}:1: an object with keys [{}] is of no task format weft reads: HellaSwag (ctx_a, ctx_b, endings, "
              "label, activity_label), LLM Foundry multiple_choice (query, choices, gold), schema (context_options, "
              "continuation, gold) or language_modeling (context, continuation)",
              path, keys);
}

}  // namespace

IclTask load_icl_task(const std::string& path) {
  IclTask t;
  t.path = path;
  t.name = std::filesystem::path(path).stem().string();
  for_each_file_line(path, kMaxLine, [&](std::string_view text, int64_t line) {
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      bad_line(path, line, fmt::format("not JSON: {}", e.what()));
    }
    if (!j.is_object()) bad_line(path, line, "not a JSON object");
    if (t.format.empty()) t.format = detect_format(j, path);
    IclItem it = read_item(t.format, j, path, line);
    const size_t options = std::max(it.contexts.size(), it.continuations.size());
    if (t.format != "language_modeling" && options < 2) {
      bad_line(path, line, fmt::format("{} options: a {} item needs at least 2", options, t.format));
    }
    if (it.gold < 0 || static_cast<size_t>(it.gold) >= options) {
      bad_line(path, line, fmt::format("gold {} is not one of the {} options (0..{})", it.gold, options, options - 1));
    }
    t.items.push_back(std::move(it));
  });
  if (t.items.empty()) throw_input("{}: no items (an empty task file)", path);
  t.kind = t.format == "schema"              ? IclKind::kSchema
           : t.format == "language_modeling" ? IclKind::kLanguageModeling
                                             : IclKind::kMultipleChoice;
  return t;
}

}  // namespace weft
