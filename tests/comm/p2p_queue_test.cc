// P2pQueue (comm/p2p_queue.h): which held point-to-point operations start when one is waited
// for. Expected groups written out by hand from the rule: every held send, plus the held
// receives up to a waited receive, in posting order.
#include <gtest/gtest.h>

#include <vector>

#include "comm/p2p_queue.h"

namespace weft {
namespace {

using Ids = std::vector<uint64_t>;

TEST(P2pQueue, WaitingForAReceiveStartsEverySendAndTheReceivesUpToIt) {
  P2pQueue q;
  const uint64_t r0 = q.post(false), r1 = q.post(false), s2 = q.post(true), r3 = q.post(false), s4 = q.post(true);
  EXPECT_EQ(q.start_for(r1), (Ids{r0, r1, s2, s4}));
  EXPECT_FALSE(q.pending(r1));
  EXPECT_TRUE(q.pending(r3));
  EXPECT_EQ(q.start_for(r1), Ids{});  // started already
  EXPECT_EQ(q.start_for(r3), Ids{r3});
  EXPECT_TRUE(q.empty());
}

TEST(P2pQueue, WaitingForASendStartsTheSendsOnly) {
  P2pQueue q;
  const uint64_t r0 = q.post(false), s1 = q.post(true), s2 = q.post(true), r3 = q.post(false);
  EXPECT_EQ(q.start_for(s1), (Ids{s1, s2}));
  EXPECT_TRUE(q.pending(r0));
  EXPECT_EQ(q.start_all(), (Ids{r0, r3}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.start_for(r0), Ids{});
}

}  // namespace
}  // namespace weft
