#include "data/corpus_inputs.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "data/text_util.h"

namespace weft::corpus_io {

namespace fs = std::filesystem;

namespace {

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  });
}

// Why `text` is not UTF-8 text, or empty if it is.
std::string not_text_reason(std::string_view text) {
  size_t nul = text.find('\0');
  if (nul != std::string_view::npos) return fmt::format("NUL byte at offset {}", nul);
  size_t bad = utf8_invalid_offset(text);
  if (bad != std::string_view::npos) {
    return fmt::format("invalid UTF-8 at offset {} (byte 0x{:02X})", bad,
                       static_cast<uint8_t>(text[bad]));
  }
  return {};
}

void add_document(std::vector<std::string>& docs, std::string_view text) {
  if (!is_blank(text)) docs.emplace_back(text);
}

// Splits at lines that are exactly "%" (optionally "%\r"); returns false if there are none.
bool split_percent(std::string_view text, std::vector<std::string>& docs) {
  bool any = false;
  size_t doc_start = 0, pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    size_t end = eol == std::string_view::npos ? text.size() : eol;
    std::string_view line = text.substr(pos, end - pos);
    const size_t next = eol == std::string_view::npos ? text.size() : eol + 1;
    if (line == "%" || line == "%\r") {
      any = true;
      add_document(docs, text.substr(doc_start, pos - doc_start));
      doc_start = next;
    }
    pos = next;
  }
  if (any) add_document(docs, text.substr(doc_start));
  return any;
}

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

}  // namespace

bool file_documents(const std::string& path, bool split_on_percent, bool lenient,
                    std::vector<std::string>& docs, std::string* reason) {
  std::string text = read_file(path);
  if (path.ends_with(".jsonl")) {
    for_each_line(text, [&](std::string_view line, int64_t line_no) {
      if (is_blank(line)) return;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw_input("{}:{}: not valid JSON: {}", path, line_no, e.what());
      }
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
        throw_input("{}:{}: expected a JSON object with a string \"text\" field, got {}", path,
                    line_no, j.dump().substr(0, 120));
      }
      add_document(docs, j["text"].get_ref<const std::string&>());
    });
    return true;
  }
  std::string why = not_text_reason(text);
  if (!why.empty()) {
    if (!lenient) throw_input("{} is not UTF-8 text ({}): pass text or .jsonl files", path, why);
    *reason = why;
    return false;
  }
  std::string_view body(text);
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // UTF-8 byte order mark
  if (!split_on_percent || !split_percent(body, docs)) add_document(docs, body);
  return true;
}

std::vector<InputFile> collect_inputs(const std::vector<std::string>& inputs, int64_t* duplicates) {
  std::vector<InputFile> files;
  std::unordered_set<std::string> seen;
  *duplicates = 0;
  auto add = [&](const fs::path& p, bool explicit_input) {
    std::error_code ec;
    fs::path canon = fs::weakly_canonical(p, ec);
    const std::string key = ec ? p.string() : canon.string();
    if (!seen.insert(key).second) {
      ++*duplicates;
      return;
    }
    files.push_back({p.string(), explicit_input});
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(input, ec);
    if (ec || !fs::exists(st)) {
      throw_input("input {} does not exist", input);
    }
    if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      fs::recursive_directory_iterator it(input, fs::directory_options::skip_permission_denied, ec);
      if (ec) throw_input("cannot list input folder {}: {}", input, ec.message());
      for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) throw_input("cannot list input folder {}: {}", input, ec.message());
        const fs::path& p = it->path();
        std::error_code ec2;
        if (hidden(p)) {
          if (it->is_directory(ec2)) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file(ec2)) found.push_back(p);
      }
      std::sort(found.begin(), found.end());
      for (const fs::path& p : found) add(p, false);
    } else if (fs::is_regular_file(st)) {
      add(input, true);
    } else {
      throw_input("input {} is neither a file nor a folder", input);
    }
  }
  return files;
}

}  // namespace weft::corpus_io
