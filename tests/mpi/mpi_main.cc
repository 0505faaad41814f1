// main of weft_mpi_tests: initialises MPI, runs the tests on every rank, prints gtest's
// output on rank 0 only (other ranks print their failures, prefixed with the rank), and
// exits non-zero on every rank if any rank failed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/mpi_comm.h"
#include "core/log.h"
#include "mpi_test_util.h"

namespace weft::test {

namespace {
Communicator* g_world = nullptr;

// Replaces gtest's printer on ranks other than 0: prints failed assertions only.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    fmt::print(stderr, "[rank {}] {}:{}: Failure\n{}\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
               r.summary());
    std::fflush(stderr);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      fmt::print(stderr, "[rank {}] FAILED {}.{}\n", rank_, info.test_suite_name(), info.name());
      std::fflush(stderr);
    }
  }

 private:
  int rank_;
};
}  // namespace

Communicator& mpi_world() { return *g_world; }

}  // namespace weft::test

int main(int argc, char** argv) {
  weft::MpiRuntime runtime(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int exit_code = 0;
  {
    std::unique_ptr<weft::Communicator> world = runtime.world();
    world->set_timeout(std::chrono::seconds(60));
    weft::test::g_world = world.get();
    const int rank = world->rank();
    weft::set_log_rank(rank);
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (rank != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new weft::test::RankFailurePrinter(rank));
    }
    const int32_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    std::vector<int32_t> per_rank(static_cast<size_t>(world->size()));
    world->all_gather(&failed, per_rank.data(), 1, weft::CommDType::kI32);
    std::string failed_ranks;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      if (per_rank[r] == 0) continue;
      if (!failed_ranks.empty()) failed_ranks += ',';
      failed_ranks += std::to_string(r);
    }
    if (rank == 0) {
      if (failed_ranks.empty()) {
        fmt::print("weft_mpi_tests: passed on all {} ranks\n", world->size());
      } else {
        fmt::print("weft_mpi_tests: FAILED on ranks {} of {} (see the [rank R] lines)\n", failed_ranks, world->size());
      }
      std::fflush(stdout);
    }
    exit_code = failed_ranks.empty() ? 0 : 1;
    weft::test::g_world = nullptr;
  }
  return exit_code;
}
