// Helpers shared by the tuner's tests: random rows from Philox and checking an InputError's
// message.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace weft::tune::test {

// n rows of d features uniform in (0, 1], from Philox(seed, stream 0, i * d + j).
inline std::vector<std::vector<double>> uniform_rows(int n, int d, uint64_t seed) {
  std::vector<std::vector<double>> rows(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(d)));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) {
      rows[static_cast<size_t>(i)][static_cast<size_t>(j)] =
          Philox::uniform(seed, 0, static_cast<uint64_t>(i) * static_cast<uint64_t>(d) + static_cast<uint64_t>(j));
    }
  }
  return rows;
}

// fn() must throw InputError whose message contains every one of `parts`.
template <typename Fn>
void expect_input_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no InputError thrown; expected one containing '" << parts.at(0) << "'";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace weft::tune::test
