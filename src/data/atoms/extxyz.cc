#include "data/atoms/extxyz.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

#include "core/error.h"
#include "data/atoms/elements.h"
#include "data/text_util.h"

namespace weft {
namespace {

constexpr int64_t kMaxLine = 1 << 20;      // bytes of one line
constexpr int64_t kMaxAtoms = 100'000'000;  // atoms in one frame

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const size_t j = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > j) out.push_back(s.substr(j, i - j));
  }
  return out;
}

struct Where {
  const std::string& path;
  int64_t frame, line;
  [[noreturn]] void fail(const std::string& what) const {
    throw_input("{}: frame {} (line {}): {}", path, frame, line, what);
  }
};

double number(std::string_view t, const Where& w, const std::string& field) {
  double v = 0.0;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size()) w.fail(fmt::format("{}: '{}' is not a number", field, t));
  if (!std::isfinite(v)) w.fail(fmt::format("{}: '{}' is not finite", field, t));
  return v;
}

bool logical(std::string_view t, const Where& w, const std::string& field) {
  const std::string l = lower(t);
  if (l == "t" || l == "true") return true;
  if (l == "f" || l == "false") return false;
  w.fail(fmt::format("{}: '{}' is not T or F", field, t));
}

// key=value pairs of the comment line (keys lower-cased; values unquoted).
std::map<std::string, std::string> comment_pairs(std::string_view s, const Where& w) {
  std::map<std::string, std::string> kv;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size()) break;
    const size_t k0 = i;
    while (i < s.size() && s[i] != '=' && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const std::string key = lower(s.substr(k0, i - k0));
    if (i >= s.size() || s[i] != '=') {
      kv.insert_or_assign(key, std::string(1, 'T'));  // a bare key is a true flag (ASE)
      continue;
    }
    ++i;
    std::string value;
    if (i < s.size() && (s[i] == '"' || s[i] == '{')) {
      const char close = s[i] == '"' ? '"' : '}';
      const size_t v0 = ++i;
      while (i < s.size() && s[i] != close) ++i;
      if (i >= s.size()) w.fail(fmt::format("comment line: the value of {} has no closing {}", key, close));
      value = std::string(s.substr(v0, i - v0));
      ++i;
    } else {
      const size_t v0 = i;
      while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      value = std::string(s.substr(v0, i - v0));
    }
    kv[key] = value;
  }
  return kv;
}

struct Column {
  std::string name;
  char type;
  int64_t count, first;  // columns of the atom line
};

std::vector<Column> properties(const std::optional<std::string>& spec, const Where& w) {
  std::vector<Column> cols;
  if (!spec) return {{"species", 'S', 1, 0}, {"pos", 'R', 3, 1}};
  std::vector<std::string> parts;
  size_t a = 0;
  const std::string& s = *spec;
  while (a <= s.size()) {
    const size_t b = s.find(':', a);
    parts.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  if (parts.size() % 3 != 0) w.fail(fmt::format("Properties: '{}' is not name:type:count triples", s));
  int64_t first = 0;
  for (size_t k = 0; k < parts.size(); k += 3) {
    const std::string& type = parts[k + 1];
    if (type.size() != 1 || std::string_view("SRIL").find(type[0]) == std::string_view::npos) {
      w.fail(fmt::format("Properties: {} has type '{}' (S, R, I or L)", parts[k], type));
    }
    int64_t n = 0;
    const auto [p, ec] = std::from_chars(parts[k + 2].data(), parts[k + 2].data() + parts[k + 2].size(), n);
    if (ec != std::errc() || p != parts[k + 2].data() + parts[k + 2].size() || n < 1 || n > 1000) {
      w.fail(fmt::format("Properties: {} has count '{}'", parts[k], parts[k + 2]));
    }
    cols.push_back({lower(parts[k]), type[0], n, first});
    first += n;
  }
  return cols;
}

const Column* find(const std::vector<Column>& cols, const std::string& name) {
  for (const Column& c : cols) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Reads the comment line's cell, pbc and energy into s; returns the atom-line columns.
std::vector<Column> read_comment(std::string_view line, AtomStructure& s, const Where& w) {
  const std::map<std::string, std::string> kv = comment_pairs(line, w);
  const auto get = [&](const char* k) -> std::optional<std::string> {
    const auto it = kv.find(k);
    return it == kv.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  const std::optional<std::string> lattice = get("lattice"), pbc = get("pbc"), energy = get("energy");
  if (lattice) {
    const auto t = split_ws(*lattice);
    if (t.size() != 9) w.fail(fmt::format("Lattice: {} numbers, expected 9", t.size()));
    for (size_t k = 0; k < 9; ++k) s.cell.lattice[k] = number(t[k], w, "Lattice");
    s.cell.pbc = {true, true, true};
  }
  if (pbc) {
    const auto t = split_ws(*pbc);
    if (t.size() != 3 && t.size() != 1) w.fail(fmt::format("pbc: '{}', expected three of T/F", *pbc));
    for (size_t a = 0; a < 3; ++a) s.cell.pbc[a] = logical(t[t.size() == 3 ? a : 0], w, "pbc");
    if (!lattice && (s.cell.pbc[0] || s.cell.pbc[1] || s.cell.pbc[2])) w.fail("pbc is periodic but there is no Lattice");
  }
  if (energy) {
    s.energy = number(*energy, w, "energy");
    s.has_energy = true;
  }
  std::vector<Column> cols = properties(get("properties"), w);
  const Column* sp = find(cols, "species");
  const Column* pos = find(cols, "pos");
  if (!sp || sp->type != 'S' || sp->count != 1) w.fail("Properties: no species:S:1");
  if (!pos || pos->type != 'R' || pos->count != 3) w.fail("Properties: no pos:R:3");
  const Column* f = find(cols, "forces");
  if (f && (f->type != 'R' || f->count != 3)) w.fail(fmt::format("Properties: forces is {}:{}, expected R:3", f->type, f->count));
  return cols;
}

void read_atom(std::string_view line, const std::vector<Column>& cols, int64_t width, AtomStructure& s, const Where& w) {
  const auto t = split_ws(line);
  if (static_cast<int64_t>(t.size()) != width) {
    w.fail(fmt::format("atom {}: {} columns, Properties say {}", s.atoms() + 1, t.size(), width));
  }
  const Column& sp = *find(cols, "species");
  const Column& pos = *find(cols, "pos");
  const int32_t z = atomic_number(t[static_cast<size_t>(sp.first)]);
  if (z == 0) w.fail(fmt::format("species: '{}' is not an element symbol", t[static_cast<size_t>(sp.first)]));
  s.species.push_back(z);
  for (int64_t c = 0; c < 3; ++c) s.pos.push_back(number(t[static_cast<size_t>(pos.first + c)], w, "pos"));
  if (const Column* f = find(cols, "forces")) {
    for (int64_t c = 0; c < 3; ++c) s.forces.push_back(number(t[static_cast<size_t>(f->first + c)], w, "forces"));
  }
}

}  // namespace

std::vector<AtomStructure> read_extxyz(const std::string& path) {
  std::vector<AtomStructure> frames;
  enum { kCount, kComment, kAtoms } state = kCount;
  int64_t want = 0, width = 0, frame = 0, start = 0;
  std::vector<Column> cols;
  AtomStructure cur;
  for_each_file_line(path, kMaxLine, [&](std::string_view raw, int64_t line) {
    std::string_view l = raw;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    const Where w{path, frame + (state == kCount ? 1 : 0), line};
    if (state == kCount) {
      const auto t = split_ws(l);
      if (t.empty()) return;  // blank lines between frames
      if (t.size() != 1) w.fail(fmt::format("the atom count line holds '{}'", l));
      const auto [p, ec] = std::from_chars(t[0].data(), t[0].data() + t[0].size(), want);
      if (ec != std::errc() || p != t[0].data() + t[0].size() || want < 1 || want > kMaxAtoms) {
        w.fail(fmt::format("atom count '{}' (1 to {})", t[0], kMaxAtoms));
      }
      ++frame;
      start = line;
      cur = AtomStructure{};
      state = kComment;
    } else if (state == kComment) {
      cols = read_comment(l, cur, w);
      width = 0;
      for (const Column& c : cols) width += c.count;
      state = kAtoms;
    } else {
      read_atom(l, cols, width, cur, w);
      if (cur.atoms() == want) {
        frames.push_back(std::move(cur));
        cur = AtomStructure{};
        state = kCount;
      }
    }
  });
  if (state != kCount) {
    throw_input("{}: frame {} (from line {}): the file ends after {} of its {} atoms", path, frame, start, cur.atoms(), want);
  }
  if (frames.empty()) throw_input("{}: no frames (an extended XYZ file starts with an atom count)", path);
  return frames;
}

void write_extxyz(const std::string& path, const std::vector<AtomStructure>& frames) {
  std::string out;
  for (const AtomStructure& s : frames) {
    const bool periodic = s.cell.pbc[0] || s.cell.pbc[1] || s.cell.pbc[2];
    bool any_lattice = periodic;
    for (double v : s.cell.lattice) any_lattice = any_lattice || v != 0.0;
    out += fmt::format("{}\n", s.atoms());
    if (any_lattice) {
      out += "Lattice=\"";
      for (size_t k = 0; k < 9; ++k) out += fmt::format("{}{:.17g}", k ? " " : "", s.cell.lattice[k]);
      out += "\" ";
    }
    out += s.has_forces() ? "Properties=species:S:1:pos:R:3:forces:R:3" : "Properties=species:S:1:pos:R:3";
    if (s.has_energy) out += fmt::format(" energy={:.17g}", s.energy);
    out += fmt::format(" pbc=\"{} {} {}\"\n", s.cell.pbc[0] ? 'T' : 'F', s.cell.pbc[1] ? 'T' : 'F', s.cell.pbc[2] ? 'T' : 'F');
    for (int64_t i = 0; i < s.atoms(); ++i) {
      out += fmt::format("{} {:.17g} {:.17g} {:.17g}", element_symbol(s.species[static_cast<size_t>(i)]),
                         s.pos[static_cast<size_t>(3 * i)], s.pos[static_cast<size_t>(3 * i + 1)],
                         s.pos[static_cast<size_t>(3 * i + 2)]);
      if (s.has_forces()) {
        out += fmt::format(" {:.17g} {:.17g} {:.17g}", s.forces[static_cast<size_t>(3 * i)],
                           s.forces[static_cast<size_t>(3 * i + 1)], s.forces[static_cast<size_t>(3 * i + 2)]);
      }
      out += '\n';
    }
  }
  write_file_atomic(path, out);
}

}  // namespace weft
