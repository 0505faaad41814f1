// Timeouts: rank 1 holds back while rank 0 waits with a short timeout. Rank 0 must get a
// CommTimeout naming the call, the axis and the ranks, soon after the timeout; then rank 1
// posts the matching call so that both ranks leave with a clean MPI state. Ranks >= 2 only
// take part in the splits.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "mpi_test_util.h"

namespace weft {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class MpiTimeout : public ::testing::Test {
 protected:
  void SetUp() override {
    world = test::fresh_world();
    rank = world->rank();
    // The pair (ranks 0 and 1) under test, and a control channel between them.
    pair = world->split(rank < 2 ? 0 : 1, rank, "pairaxis");
    control = world->split(rank < 2 ? 0 : 1, rank, "control");
  }
  void TearDown() override { world->barrier(); }
  // Rank 0 tells rank 1 to go ahead.
  void release_rank1() {
    int go = 1;
    control->send(&go, 1, CommDType::kI32, 1, 0);
  }
  void await_rank0() {
    int go = 0;
    control->recv(&go, 1, CommDType::kI32, 0, 0);
  }
  std::unique_ptr<Communicator> world, pair, control;
  int rank = 0;
};

TEST_F(MpiTimeout, BlockingAllReduceNamesAxisAndRanks) {
  // The timed-out operation stays pending inside `pair` until rank 1 joins, so its buffer
  // must outlive the test body: static storage.
  static std::vector<float> buf(1 << 20, 1.0f);  // 4 MiB
  if (rank == 0) {
    pair->set_timeout(milliseconds(1000));
    const Clock::time_point t0 = Clock::now();
    try {
      pair->all_reduce(buf.data(), static_cast<int64_t>(buf.size()), CommDType::kF32, ReduceOp::kSum);
      ADD_FAILURE() << "all_reduce completed while rank 1 held back";
    } catch (const CommTimeout& e) {
      const double waited = seconds_since(t0);
      EXPECT_TRUE(contains(e.what(),
                           "weft: rank 0: all_reduce of 4.0 MiB on axis pairaxis (ranks 0,1) did not complete "
                           "within 1.0 s: a peer rank is dead or stalled"))
          << e.what();
      EXPECT_GE(waited, 0.99);
      EXPECT_LT(waited, 3.0);
    }
    release_rank1();
    pair->progress();
  } else if (rank == 1) {
    await_rank0();
    pair->all_reduce(buf.data(), static_cast<int64_t>(buf.size()), CommDType::kF32, ReduceOp::kSum);
  }
}

TEST_F(MpiTimeout, AsyncWaitTimesOutThenCompletesWhenThePeerArrives) {
  std::vector<int64_t> x = {int64_t{rank} + 1, 10};
  int32_t msg = -1;
  if (rank == 0) {
    CommHandle h = pair->iall_reduce(x.data(), 2, CommDType::kI64, ReduceOp::kSum);
    CommHandle r = pair->irecv(&msg, 1, CommDType::kI32, 1, 99);
    pair->set_timeout(milliseconds(500));
    Clock::time_point t0 = Clock::now();
    try {
      h->wait();
      ADD_FAILURE() << "iall_reduce completed while rank 1 held back";
    } catch (const CommTimeout& e) {
      EXPECT_TRUE(contains(e.what(), "all_reduce of 16 B on axis pairaxis (ranks 0,1) did not complete within 0.5 s"))
          << e.what();
      EXPECT_LT(seconds_since(t0), 2.5);
    }
    EXPECT_FALSE(h->test());
    t0 = Clock::now();
    try {
      r->wait();
      ADD_FAILURE() << "irecv completed while rank 1 held back";
    } catch (const CommTimeout& e) {
      EXPECT_TRUE(contains(e.what(), "weft: rank 0: recv of 4 B from world rank"))
          << e.what();
      EXPECT_TRUE(contains(e.what(), "on axis pairaxis (ranks 0,1)")) << e.what();
      EXPECT_LT(seconds_since(t0), 2.5);
    }
    release_rank1();
    pair->set_timeout(std::chrono::seconds(20));
    h->wait();  // the handle stays valid after a timeout
    r->wait();
    EXPECT_EQ(x[0], 3);  // 1 + 2
    EXPECT_EQ(x[1], 20);
    EXPECT_EQ(msg, 42);
  } else if (rank == 1) {
    await_rank0();
    pair->all_reduce(x.data(), 2, CommDType::kI64, ReduceOp::kSum);
    const int32_t answer = 42;
    pair->send(&answer, 1, CommDType::kI32, 0, 99);
    EXPECT_EQ(x[0], 3);
  }
}

}  // namespace
}  // namespace weft
