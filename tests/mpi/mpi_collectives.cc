// Every collective of the MPI communicator against closed forms: element i of rank r's
// contribution is r * 1000 + i, so a sum over n ranks is 1000 n (n-1) / 2 + n i, the max is
// 1000 (n-1) + i and the min is i. All values stay below 2^24, exact in f32. The 16-bit floats
// have their own small closed form.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/tracer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "mpi_test_util.h"

namespace weft {
namespace {

template <typename T>
CommDType dtype_of();
template <>
CommDType dtype_of<float>() { return CommDType::kF32; }
template <>
CommDType dtype_of<double>() { return CommDType::kF64; }
template <>
CommDType dtype_of<int32_t>() { return CommDType::kI32; }
template <>
CommDType dtype_of<int64_t>() { return CommDType::kI64; }

int64_t value(int rank, int64_t i) { return int64_t{rank} * 1000 + i; }
int64_t sum_over_ranks(int n, int64_t i) { return 1000 * int64_t{n} * (n - 1) / 2 + n * i; }

class MpiCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = test::fresh_world();
    rank = comm->rank();
    n = comm->size();
  }
  std::unique_ptr<Communicator> comm;
  int rank = 0, n = 1;

  template <typename T>
  std::vector<T> contribution(int64_t count, int64_t first = 0) const {
    std::vector<T> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<T>(value(rank, first + i));
    return v;
  }

  template <typename T>
  void check_all_reduce(int64_t count) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<T> buf = contribution<T>(count);
      comm->all_reduce(buf.data(), count, dtype_of<T>(), op);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t expect = op == ReduceOp::kSum ? sum_over_ranks(n, i) : op == ReduceOp::kMax ? value(n - 1, i) : i;
        ASSERT_EQ(buf[static_cast<size_t>(i)], static_cast<T>(expect)) << "op " << static_cast<int>(op) << " i " << i;
      }
    }
  }
};

TEST_F(MpiCollectives, WorldMatchesMpi) {
  EXPECT_EQ(comm->axis(), "world");
  EXPECT_EQ(test::mpi_world().size(), n);
  std::vector<int> expect(static_cast<size_t>(n));
  std::iota(expect.begin(), expect.end(), 0);
  EXPECT_EQ(comm->world_ranks(), expect);
}

TEST_F(MpiCollectives, AllReduceSumMaxMinEveryDtype) {
  check_all_reduce<float>(7);
  check_all_reduce<double>(4099);  // large enough for a segmented algorithm
  check_all_reduce<int64_t>(33);
  check_all_reduce<int32_t>(5);
  check_all_reduce<float>(0);
  std::vector<double> d = contribution<double>(3);
  comm->all_reduce_sum(d.data(), 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(d[static_cast<size_t>(i)], static_cast<double>(sum_over_ranks(n, i)));
}

// 16-bit floats (the MPI communicator's own types and operations): rank r contributes
// (r + 1) / 2 + i, exact in bf16 and f16 as are the sums, maxima and minima over up to 8
// ranks for i < 4 (at most 7 significant bits). Asynchronous and reduce-scatter forms too.
TEST_F(MpiCollectives, SixteenBitFloatsReduceExactly) {
  const int64_t count = 4;
  auto expect = [&](ReduceOp op, int64_t i) {
    if (op == ReduceOp::kSum) return 0.25f * static_cast<float>(n * (n + 1)) + static_cast<float>(n * i);
    return 0.5f * static_cast<float>(op == ReduceOp::kMax ? n : 1) + static_cast<float>(i);
  };
  auto mine = [&](int64_t i) { return 0.5f * static_cast<float>(rank + 1) + static_cast<float>(i); };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    std::vector<bf16> b(count);
    std::vector<_Float16> h(count);
    for (int64_t i = 0; i < count; ++i) {
      b[static_cast<size_t>(i)] = float_to_bf16(mine(i));
      h[static_cast<size_t>(i)] = static_cast<_Float16>(mine(i));
    }
    comm->all_reduce(b.data(), count, CommDType::kBF16, op);
    comm->iall_reduce(h.data(), count, CommDType::kF16, op)->wait();
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(bf16_to_float(b[static_cast<size_t>(i)]), expect(op, i)) << "bf16 op " << static_cast<int>(op);
      EXPECT_EQ(static_cast<float>(h[static_cast<size_t>(i)]), expect(op, i)) << "f16 op " << static_cast<int>(op);
    }
  }
  // Reduce-scatter of n blocks of one element: block q of rank r holds (r + 1) / 2 + q % 4.
  std::vector<bf16> send(static_cast<size_t>(n)), recv(1);
  for (int q = 0; q < n; ++q) send[static_cast<size_t>(q)] = float_to_bf16(0.5f * static_cast<float>(rank + 1) + static_cast<float>(q % 4));
  comm->reduce_scatter(send.data(), recv.data(), 1, CommDType::kBF16, ReduceOp::kSum);
  EXPECT_EQ(bf16_to_float(recv[0]), expect(ReduceOp::kSum, rank % 4));
  EXPECT_EQ(comm_dtype_size(CommDType::kBF16), 2u);
  EXPECT_STREQ(comm_dtype_name(CommDType::kF16), "f16");
}

TEST_F(MpiCollectives, ReduceScatter) {
  const int64_t count = 5;
  std::vector<float> send = contribution<float>(n * count), recv(count, -1.0f);
  comm->reduce_scatter(send.data(), recv.data(), count, CommDType::kF32, ReduceOp::kSum);
  for (int64_t k = 0; k < count; ++k) {
    EXPECT_EQ(recv[static_cast<size_t>(k)], static_cast<float>(sum_over_ranks(n, rank * count + k)));
  }
  // In place: recv == send holds the full input, this rank's block lands at its start.
  comm->reduce_scatter(send.data(), send.data(), count, CommDType::kF32, ReduceOp::kMax);
  for (int64_t k = 0; k < count; ++k) {
    EXPECT_EQ(send[static_cast<size_t>(k)], static_cast<float>(value(n - 1, rank * count + k)));
  }
}

TEST_F(MpiCollectives, ReduceScatterVUnevenAndZeroCounts) {
  std::vector<int64_t> counts(static_cast<size_t>(n)), offsets(static_cast<size_t>(n));
  int64_t total = 0;
  for (int q = 0; q < n; ++q) {
    counts[static_cast<size_t>(q)] = q % 3;  // 0, 1, 2, 0, 1, 2, ...: rank 0 (and every third) gets nothing
    offsets[static_cast<size_t>(q)] = total;
    total += q % 3;
  }
  const int64_t mine = counts[static_cast<size_t>(rank)], off = offsets[static_cast<size_t>(rank)];
  std::vector<int64_t> send = contribution<int64_t>(total), recv(static_cast<size_t>(mine) + 1, -7);
  comm->reduce_scatter_v(send.data(), recv.data(), counts, CommDType::kI64, ReduceOp::kSum);
  for (int64_t k = 0; k < mine; ++k) EXPECT_EQ(recv[static_cast<size_t>(k)], sum_over_ranks(n, off + k));
  EXPECT_EQ(recv[static_cast<size_t>(mine)], -7) << "wrote past this rank's block";

  std::vector<double> dsend = contribution<double>(total), drecv(static_cast<size_t>(mine));
  CommHandle h = comm->ireduce_scatter_v(dsend.data(), drecv.data(), counts, CommDType::kF64, ReduceOp::kMin);
  h->wait();
  for (int64_t k = 0; k < mine; ++k) EXPECT_EQ(drecv[static_cast<size_t>(k)], static_cast<double>(off + k));
}

TEST_F(MpiCollectives, AllGatherAndInPlace) {
  const int64_t count = 3;
  std::vector<int32_t> send = contribution<int32_t>(count), recv(static_cast<size_t>(n * count), -1);
  comm->all_gather(send.data(), recv.data(), count, CommDType::kI32);
  for (int q = 0; q < n; ++q) {
    for (int64_t k = 0; k < count; ++k) EXPECT_EQ(recv[static_cast<size_t>(q * count + k)], value(q, k));
  }
  // In place: this rank's block already sits in recv.
  std::vector<float> buf(static_cast<size_t>(n * count), -1.0f);
  for (int64_t k = 0; k < count; ++k) buf[static_cast<size_t>(rank * count + k)] = static_cast<float>(value(rank, k));
  comm->all_gather(buf.data() + rank * count, buf.data(), count, CommDType::kF32);
  for (int q = 0; q < n; ++q) {
    for (int64_t k = 0; k < count; ++k) EXPECT_EQ(buf[static_cast<size_t>(q * count + k)], value(q, k));
  }
}

TEST_F(MpiCollectives, AllGatherVUnevenBlocksSyncAsyncInPlace) {
  std::vector<int64_t> counts(static_cast<size_t>(n)), offsets(static_cast<size_t>(n));
  int64_t total = 0;
  for (int q = 0; q < n; ++q) {
    counts[static_cast<size_t>(q)] = (q + 1) % 3 == 0 ? 0 : q + 1;  // uneven, with zeros
    offsets[static_cast<size_t>(q)] = total;
    total += counts[static_cast<size_t>(q)];
  }
  const int64_t mine = counts[static_cast<size_t>(rank)], off = offsets[static_cast<size_t>(rank)];
  auto check = [&](const std::vector<double>& recv) {
    for (int q = 0; q < n; ++q) {
      for (int64_t k = 0; k < counts[static_cast<size_t>(q)]; ++k) {
        EXPECT_EQ(recv[static_cast<size_t>(offsets[static_cast<size_t>(q)] + k)], static_cast<double>(value(q, k)));
      }
    }
  };
  std::vector<double> send = contribution<double>(mine), recv(static_cast<size_t>(total), -1.0);
  comm->all_gather_v(send.data(), recv.data(), counts, CommDType::kF64);
  check(recv);

  std::fill(recv.begin(), recv.end(), -1.0);
  CommHandle h = comm->iall_gather_v(send.data(), recv.data(), counts, CommDType::kF64);
  while (!h->test()) comm->progress();
  check(recv);

  std::fill(recv.begin(), recv.end(), -1.0);
  std::copy(send.begin(), send.end(), recv.begin() + off);
  comm->all_gather_v(recv.data() + off, recv.data(), counts, CommDType::kF64);
  check(recv);
}

TEST_F(MpiCollectives, BroadcastFromEachRoot) {
  for (int root = 0; root < n; ++root) {
    std::vector<int64_t> buf(6, -1);
    if (rank == root) buf = contribution<int64_t>(6);
    comm->broadcast(buf.data(), 6, CommDType::kI64, root);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(buf[static_cast<size_t>(i)], value(root, i)) << "root " << root;
  }
}

TEST_F(MpiCollectives, SendRecvRingAsync) {
  // 64 Ki floats (256 KiB) per message: beyond the eager limit, so the rendezvous path runs.
  const int64_t count = 1 << 16;
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  std::vector<float> out = contribution<float>(count), in(static_cast<size_t>(count), -1.0f);
  CommHandle r = comm->irecv(in.data(), count, CommDType::kF32, prev, 5);
  CommHandle s = comm->isend(out.data(), count, CommDType::kF32, next, 5);
  s->wait();
  r->wait();
  for (int64_t i = 0; i < count; i += 997) EXPECT_EQ(in[static_cast<size_t>(i)], static_cast<float>(value(prev, i)));
  EXPECT_EQ(in[static_cast<size_t>(count - 1)], static_cast<float>(value(prev, count - 1)));
}

TEST_F(MpiCollectives, SendRecvPairsBlocking) {
  // Pairs (0,1), (2,3), ...: the even rank sends first, the odd one receives first.
  if (rank == n - 1 && n % 2 == 1) return;
  const int peer = rank ^ 1;
  std::vector<int64_t> out = contribution<int64_t>(100), in(100, -1);
  if (rank % 2 == 0) {
    comm->send(out.data(), 100, CommDType::kI64, peer, 11);
    comm->recv(in.data(), 100, CommDType::kI64, peer, 12);
  } else {
    comm->recv(in.data(), 100, CommDType::kI64, peer, 11);
    comm->send(out.data(), 100, CommDType::kI64, peer, 12);
  }
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(in[static_cast<size_t>(i)], value(peer, i));
}

TEST_F(MpiCollectives, SendToSelf) {
  std::vector<int32_t> out = contribution<int32_t>(4), in(4, -1);
  CommHandle r = comm->irecv(in.data(), 4, CommDType::kI32, rank, 3);
  comm->send(out.data(), 4, CommDType::kI32, rank, 3);
  r->wait();
  EXPECT_EQ(in, out);
}

TEST_F(MpiCollectives, BarrierWaitsForTheLastRank) {
  comm->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  comm->barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.095);
}

TEST_F(MpiCollectives, ManyOutstandingAsyncAllReducesWaitedInAnyOrder) {
  std::vector<std::vector<float>> bufs;
  for (int j = 0; j < 4; ++j) bufs.push_back(contribution<float>(64, j * 100));
  std::vector<CommHandle> handles;
  for (auto& b : bufs) handles.push_back(comm->iall_reduce(b.data(), 64, CommDType::kF32, ReduceOp::kSum));
  comm->progress();
  for (int j = 3; j >= 0; --j) handles[static_cast<size_t>(j)]->wait();
  for (int j = 0; j < 4; ++j) {
    for (int64_t i = 0; i < 64; ++i) {
      EXPECT_EQ(bufs[static_cast<size_t>(j)][static_cast<size_t>(i)], sum_over_ranks(n, j * 100 + i));
    }
  }
  // Destroying an unwaited handle waits for it.
  std::vector<float> b = contribution<float>(8);
  { CommHandle h = comm->iall_reduce(b.data(), 8, CommDType::kF32, ReduceOp::kMax); }
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(b[static_cast<size_t>(i)], value(n - 1, i));
}

TEST_F(MpiCollectives, SplitEvenOdd) {
  auto sub = comm->split(rank % 2, rank, "parity");
  const int members = (n - rank % 2 + 1) / 2;
  EXPECT_EQ(sub->axis(), "parity");
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), rank / 2);
  std::vector<int> expect;
  for (int q = rank % 2; q < n; q += 2) expect.push_back(q);
  EXPECT_EQ(sub->world_ranks(), expect);
  int64_t x = rank;
  sub->all_reduce(&x, 1, CommDType::kI64, ReduceOp::kSum);
  EXPECT_EQ(x, std::accumulate(expect.begin(), expect.end(), int64_t{0}));

  // key reverses the order; a nested split of the sub-group.
  auto rev = comm->split(0, n - 1 - rank, "reversed");
  EXPECT_EQ(rev->rank(), n - 1 - rank);
  EXPECT_EQ(rev->world_ranks().front(), n - 1);
  auto nested = sub->split(sub->rank() < 1 ? 0 : 1, 0, "nested");
  EXPECT_EQ(nested->size(), sub->rank() < 1 ? 1 : members - 1);
}

TEST_F(MpiCollectives, GroupOfOneMakesNoMpiCallButWorks) {
  auto solo = comm->split(rank, 0, "solo");
  EXPECT_EQ(solo->size(), 1);
  EXPECT_EQ(solo->world_ranks(), std::vector<int>{rank});
  std::vector<float> a = contribution<float>(4), out(4, -1.0f);
  solo->all_reduce(a.data(), 4, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(a, contribution<float>(4));
  solo->all_gather(a.data(), out.data(), 4, CommDType::kF32);
  EXPECT_EQ(out, a);
  std::fill(out.begin(), out.end(), -1.0f);
  solo->iall_gather_v(a.data(), out.data(), {4}, CommDType::kF32)->wait();
  EXPECT_EQ(out, a);
  solo->barrier();
}

TEST_F(MpiCollectives, CountBeyondIntIsAClearError) {
  const int64_t huge = int64_t{INT_MAX} + 1;
  try {
    comm->all_reduce(nullptr, huge, CommDType::kF32, ReduceOp::kSum);
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds MPI's int limit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm->all_gather_v(nullptr, nullptr, std::vector<int64_t>(static_cast<size_t>(n), huge / 2 + 1),
                                  CommDType::kF32),
               RuntimeError);
  comm->barrier();  // the errors were local: the communicator still works
}

// The tracer sees every call with the bytes of its convention, on every rank alike.
TEST_F(MpiCollectives, TracerRecordsConventionBytes) {
  Tracer tracer;
  tracer.set_step(5);
  comm->set_tracer(&tracer);
  std::vector<double> buf(static_cast<size_t>(16 * n), 1.0), out(static_cast<size_t>(16 * n));
  std::vector<int64_t> counts(static_cast<size_t>(n), 2);
  comm->all_reduce(buf.data(), 10, CommDType::kF32, ReduceOp::kSum);                  // 40
  comm->reduce_scatter(buf.data(), out.data(), 3, CommDType::kF64, ReduceOp::kSum);   // n * 24
  comm->reduce_scatter_v(buf.data(), out.data(), counts, CommDType::kF64, ReduceOp::kSum);  // n * 16
  comm->all_gather(buf.data(), out.data(), 2, CommDType::kI32);                       // n * 8
  comm->iall_gather_v(buf.data(), out.data(), counts, CommDType::kF64)->wait();       // n * 16, async
  comm->broadcast(buf.data(), 7, CommDType::kI64, 0);                                 // 56
  comm->barrier();                                                                    // 0
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  CommHandle r = comm->irecv(out.data(), 3, CommDType::kF32, prev, 1);               // 12, async
  comm->send(buf.data(), 3, CommDType::kF32, next, 1);                                // 12
  r->wait();
  auto sub = comm->split(0, rank, "dp");  // inherits the tracer
  sub->all_reduce(buf.data(), 1, CommDType::kU8, ReduceOp::kMax);                    // 1
  comm->set_tracer(nullptr);
  sub->set_tracer(nullptr);

  const std::string world_group = "ranks " + format_ranks(comm->world_ranks());
  struct Expect {
    const char* kind;
    int64_t bytes;
    std::string group;
    bool async;
  };
  const std::vector<Expect> expect = {
      {"all_reduce", 40, world_group, false},
      {"reduce_scatter", n * 24, world_group, false},
      {"reduce_scatter", n * 16, world_group, false},
      {"all_gather", n * 8, world_group, false},
      {"all_gather", n * 16, world_group, true},
      {"broadcast", 56, world_group, false},
      {"barrier", 0, world_group, false},
      {"recv", 12, "peer " + std::to_string(prev), true},
      {"send", 12, "peer " + std::to_string(next), false},
      {"all_reduce", 1, world_group, false},
  };
  // The irecv is recorded when its completion is observed (after the send).
  std::vector<TraceEvent> ev = tracer.events();
  ASSERT_EQ(ev.size(), expect.size());
  std::swap(ev[7], ev[8]);
  double last_start = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].kind, expect[i].kind) << i;
    EXPECT_EQ(ev[i].bytes, expect[i].bytes) << i << " " << ev[i].kind;
    EXPECT_EQ(ev[i].group, expect[i].group) << i;
    EXPECT_EQ(ev[i].async, expect[i].async) << i;
    EXPECT_EQ(ev[i].axis, i + 1 == ev.size() ? "dp" : "world") << i;
    EXPECT_EQ(ev[i].step, 5);
    EXPECT_GE(ev[i].duration_s, 0.0);
    if (i != 7 && i != 8) {
      EXPECT_GE(ev[i].start_s, last_start) << i;
      last_start = ev[i].start_s;
    }
  }
  EXPECT_EQ(tracer.summary().by_axis.at("world").total.calls, 9);
}

}  // namespace
}  // namespace weft
