// `weft bench --peer torch` (apps/bench_peer.cc) without the peer's environment: one line on
// stderr naming the setup script and the path it looked at, a non-zero exit, nothing measured.
// The timing itself is not tested (bench/README.md: benchmarks are never timed inside tests).
#include <gtest/gtest.h>

#include <algorithm>

#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;

RunResult bench(const TempDir& tmp, const std::string& args, int n) {
  return test::run_weft("bench " + args, tmp / fmt::format("cmd{}", n));
}

// A non-zero exit, nothing on stdout, one line on stderr holding every fragment.
void expect_one_line_error(const RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_NE(r.code, 0) << "stdout: " << r.out;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr should be one line: " << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

TEST(BenchPeer, MissingPythonNamesTheSetupScript) {
  TempDir tmp("bench_peer");
  const RunResult r = bench(tmp, "--peer torch --peer-python /nonexistent/python --model tiny", 0);
  expect_one_line_error(r, {"scripts/setup-peers.sh", "/nonexistent/python"});
  EXPECT_EQ(r.code, 2) << r.err;  // the environment is input: refused before any step runs
}

TEST(BenchPeer, RefusesWhatThePeerCannotMatch) {
  TempDir tmp("bench_peer");
  expect_one_line_error(bench(tmp, "--peer torch --peer-python /nonexistent --peer-modes eager,fp8", 0),
                        {"--peer-modes", "fp8", "bf16-compile"});
  expect_one_line_error(bench(tmp, "--peer torch --peer-python /nonexistent --model gpt2-350m", 1),
                        {"gpt2-350m", "tiny, small, gpt2-124m"});
  expect_one_line_error(bench(tmp, "--peer torch --peer-python /nonexistent --precision bf16", 2),
                        {"--peer torch", "--precision bf16"});
  expect_one_line_error(bench(tmp, "--peer torch --peer-python /nonexistent --peer-rounds 0", 3),
                        {"--peer-rounds 0"});
  EXPECT_NE(bench(tmp, "--peer jax", 4).code, 0);
}

}  // namespace
}  // namespace weft
