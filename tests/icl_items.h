// The memorised line of the in-context-learning tests ("Alice likes apples. Bob likes bananas.
// ..."): a tiny model trained on it answers items whose answers it forces.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace weft::test {

inline const std::vector<std::pair<std::string, std::string>> kLikes = {
    {"Alice", "apples"}, {"Bob", "bananas"}, {"Carol", "cherries"}, {"Dave", "dates"}, {"Erin", "figs"}, {"Frank", "grapes"}};

// The whole line: "Alice likes apples. Bob likes bananas. ... Frank likes grapes."
inline std::string likes_line() {
  std::string line;
  for (size_t k = 0; k < kLikes.size(); ++k) line += (k ? " " : "") + kLikes[k].first + " likes " + kLikes[k].second + ".";
  return line;
}

// The line up to the i-th person's "NAME likes".
inline std::string likes_prefix(size_t i) {
  std::string s;
  for (size_t k = 0; k < i; ++k) s += kLikes[k].first + " likes " + kLikes[k].second + ". ";
  return s + kLikes[i].first + " likes";
}

}  // namespace weft::test
