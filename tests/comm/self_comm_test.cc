// The single-process communicator: size 1, collectives are no-ops or copies, traced.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "comm/self_comm.h"
#include "comm/tracer.h"
#include "core/error.h"

namespace weft {
namespace {

std::vector<float> iota_f(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(SelfComm, IsOneRank) {
  auto c = make_self_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->axis(), "world");
  EXPECT_EQ(c->world_ranks(), std::vector<int>{0});
}

TEST(SelfComm, CollectivesAreNoOpsOrCopies) {
  auto c = make_self_communicator("dp");
  std::vector<float> buf = iota_f(5, 1.0f);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    c->all_reduce(buf.data(), 5, CommDType::kF32, op);
    EXPECT_EQ(buf, iota_f(5, 1.0f));
  }
  std::vector<double> d = {1.5, -2.5};
  c->all_reduce_sum(d.data(), 2);
  EXPECT_EQ(d, (std::vector<double>{1.5, -2.5}));

  std::vector<float> out(5, 0.0f);
  c->reduce_scatter(buf.data(), out.data(), 5, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(out, buf);
  std::fill(out.begin(), out.end(), 0.0f);
  c->reduce_scatter_v(buf.data(), out.data(), {5}, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(out, buf);
  std::fill(out.begin(), out.end(), 0.0f);
  c->all_gather(buf.data(), out.data(), 5, CommDType::kF32);
  EXPECT_EQ(out, buf);
  std::fill(out.begin(), out.end(), 0.0f);
  c->all_gather_v(buf.data(), out.data(), {5}, CommDType::kF32);
  EXPECT_EQ(out, buf);
  // In place (send is recv's own block).
  c->all_gather(out.data(), out.data(), 5, CommDType::kF32);
  EXPECT_EQ(out, buf);

  std::vector<int64_t> ints = {7, 8, 9};
  c->broadcast(ints.data(), 3, CommDType::kI64, 0);
  EXPECT_EQ(ints, (std::vector<int64_t>{7, 8, 9}));
  c->barrier();
  c->progress();
}

TEST(SelfComm, AsyncHandlesCompleteAtOnce) {
  auto c = make_self_communicator();
  std::vector<float> buf = iota_f(4, 0.0f), out(4, -1.0f);
  CommHandle h = c->iall_reduce(buf.data(), 4, CommDType::kF32, ReduceOp::kSum);
  EXPECT_TRUE(h->test());
  h->wait();
  CommHandle g = c->iall_gather_v(buf.data(), out.data(), {4}, CommDType::kF32);
  g->wait();
  EXPECT_EQ(out, buf);
  std::fill(out.begin(), out.end(), -1.0f);
  CommHandle r = c->ireduce_scatter_v(buf.data(), out.data(), {4}, CommDType::kF32, ReduceOp::kMax);
  EXPECT_TRUE(r->test());
  EXPECT_EQ(out, buf);
}

TEST(SelfComm, SendRecvToSelfIsAnError) {
  auto c = make_self_communicator("pp");
  float x = 1.0f;
  try {
    c->send(&x, 1, CommDType::kF32, 0, 0);
    FAIL() << "send to self did not throw";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("has no peer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("axis pp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c->recv(&x, 1, CommDType::kF32, 0, 0), RuntimeError);
  EXPECT_THROW(c->isend(&x, 1, CommDType::kF32, 0, 0), RuntimeError);
  EXPECT_THROW(c->irecv(&x, 1, CommDType::kF32, 0, 0), RuntimeError);
}

TEST(SelfComm, BadArgumentsAreErrors) {
  auto c = make_self_communicator();
  float x[2] = {0, 0};
  EXPECT_THROW(c->broadcast(x, 1, CommDType::kF32, 1), RuntimeError);
  EXPECT_THROW(c->all_gather_v(x, x, {1, 1}, CommDType::kF32), RuntimeError);
  EXPECT_THROW(c->reduce_scatter_v(x, x, {-1}, CommDType::kF32, ReduceOp::kSum), RuntimeError);
  EXPECT_THROW(c->all_reduce(x, -1, CommDType::kF32, ReduceOp::kSum), RuntimeError);
}

// One rank: the 1 x 1 matrix's only block is this rank's own, copied from send to recv and
// traced as an all_to_all of the whole matrix.
TEST(SelfComm, AllToAllVCopiesTheOneBlockAndTracesIt) {
  Tracer tracer;
  auto c = make_self_communicator("dp");
  c->set_tracer(&tracer);
  const std::vector<float> send = iota_f(6, 100.0f);
  std::vector<float> recv(7, -1.0f);
  c->all_to_all_v(send.data(), recv.data(), {6}, CommDType::kF32);
  EXPECT_EQ(std::vector<float>(recv.begin(), recv.begin() + 6), send);
  EXPECT_EQ(recv[6], -1.0f) << "wrote past the block";
  std::vector<uint8_t> s8 = {1, 2, 3}, r8(3, 0);
  CommHandle h = c->iall_to_all_v(s8.data(), r8.data(), {3}, CommDType::kU8);
  EXPECT_TRUE(h->test());
  EXPECT_EQ(r8, s8);
  c->all_to_all_v(nullptr, nullptr, {0}, CommDType::kF32);  // an empty exchange
  const std::vector<TraceEvent>& ev = tracer.events();
  ASSERT_EQ(ev.size(), 3u);
  for (const TraceEvent& e : ev) {
    EXPECT_EQ(e.kind, "all_to_all");
    EXPECT_EQ(e.group, "ranks 0");
    EXPECT_EQ(e.axis, "dp");
  }
  EXPECT_EQ(ev[0].bytes, 24);
  EXPECT_FALSE(ev[0].async);
  EXPECT_EQ(ev[1].bytes, 3);
  EXPECT_TRUE(ev[1].async);
  EXPECT_EQ(ev[2].bytes, 0);
  c->set_tracer(nullptr);
}

TEST(SelfComm, AllToAllVNeedsTheWholeMatrixWithoutNegatives) {
  auto c = make_self_communicator();
  float x[2] = {0, 0}, y[2] = {0, 0};
  try {
    c->all_to_all_v(x, y, {1, 1}, CommDType::kF32);
    FAIL() << "a 2-entry matrix for one rank did not throw";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("2 counts given for a group of 1 ranks"), std::string::npos) << e.what();
  }
  try {
    (void)c->iall_to_all_v(x, y, {-3}, CommDType::kF32);
    FAIL() << "a negative count did not throw";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("negative count -3 from rank 0 to rank 0"), std::string::npos) << e.what();
  }
}

TEST(SelfComm, SplitGivesSelfOnNewAxisWithParentsTracer) {
  Tracer tracer;
  auto c = make_self_communicator();
  c->set_tracer(&tracer);
  auto tp = c->split(0, 0, "tp");
  EXPECT_EQ(tp->axis(), "tp");
  EXPECT_EQ(tp->size(), 1);
  tp->barrier();
  ASSERT_EQ(tracer.events().size(), 1u);
  EXPECT_EQ(tracer.events()[0].axis, "tp");
  EXPECT_EQ(tracer.events()[0].kind, "barrier");
}

// Every call is traced with the bytes of the tracer's convention (whole logical buffer).
TEST(SelfComm, TracesEveryCallWithConventionBytes) {
  Tracer tracer;
  tracer.set_step(7);
  auto c = make_self_communicator("dp");
  c->set_tracer(&tracer);
  std::vector<double> buf(10, 1.0), out(10);
  c->all_reduce(buf.data(), 10, CommDType::kF64, ReduceOp::kSum);          // 80
  c->reduce_scatter(buf.data(), out.data(), 10, CommDType::kF64, ReduceOp::kSum);  // 80
  c->reduce_scatter_v(buf.data(), out.data(), {6}, CommDType::kF64, ReduceOp::kSum);  // 48
  c->all_gather(buf.data(), out.data(), 3, CommDType::kF64);             // 24
  c->all_gather_v(buf.data(), out.data(), {2}, CommDType::kF64);         // 16
  c->broadcast(buf.data(), 4, CommDType::kF32, 0);                       // 16
  c->barrier();                                                           // 0
  { CommHandle h = c->iall_reduce(buf.data(), 5, CommDType::kI32, ReduceOp::kMax); }  // 20, async
  const std::vector<TraceEvent>& ev = tracer.events();
  ASSERT_EQ(ev.size(), 8u);
  const std::vector<std::pair<std::string, int64_t>> expect = {
      {"all_reduce", 80}, {"reduce_scatter", 80}, {"reduce_scatter", 48}, {"all_gather", 24},
      {"all_gather", 16}, {"broadcast", 16},      {"barrier", 0},         {"all_reduce", 20}};
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].kind, expect[i].first) << i;
    EXPECT_EQ(ev[i].bytes, expect[i].second) << i;
    EXPECT_EQ(ev[i].axis, "dp");
    EXPECT_EQ(ev[i].group, "ranks 0");
    EXPECT_EQ(ev[i].step, 7);
    EXPECT_EQ(ev[i].async, i == 7) << i;
    EXPECT_GE(ev[i].duration_s, 0.0);
  }
  c->set_tracer(nullptr);
  c->barrier();
  EXPECT_EQ(tracer.events().size(), 8u);
}

}  // namespace
}  // namespace weft
