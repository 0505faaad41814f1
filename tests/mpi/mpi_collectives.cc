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

// All-to-all with uneven blocks: rank i sends rank j c(i, j) = ((i+1)(j+1) mod 4)(1 + i + j)
// elements (zero where (i+1)(j+1) is a multiple of 4: on 2 ranks rank 1's own block), element
// k of that block holding 100 i + j + 1000 k (u8: 16 i + j + k, below 256 up to 8 ranks).
int64_t a2a_count(int i, int j) { return ((i + 1) * (j + 1) % 4) * (1 + i + j); }
std::vector<int64_t> a2a_matrix(int n) {
  std::vector<int64_t> m(static_cast<size_t>(n * n));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) m[static_cast<size_t>(i * n + j)] = a2a_count(i, j);
  }
  return m;
}
template <typename T>
T a2a_value(int i, int j, int64_t k) {
  if constexpr (sizeof(T) == 1) return static_cast<T>(16 * i + j + k);
  return static_cast<T>(100 * i + j + 1000 * k);
}
// This rank's send buffer: its blocks for ranks 0, 1, ... in order.
template <typename T>
std::vector<T> a2a_send(int rank, int n) {
  std::vector<T> v;
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < a2a_count(rank, j); ++k) v.push_back(a2a_value<T>(rank, j, k));
  }
  return v;
}
// Checks recv (with one sentinel element past the end) against the blocks from ranks 0, 1, ...
template <typename T>
void a2a_check(const std::vector<T>& recv, int rank, int n, T sentinel) {
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    for (int64_t k = 0; k < a2a_count(i, rank); ++k, ++at) {
      ASSERT_EQ(recv[at], a2a_value<T>(i, rank, k)) << "block from rank " << i << " element " << k;
    }
  }
  ASSERT_EQ(at + 1, recv.size());
  EXPECT_EQ(recv[at], sentinel) << "wrote past the last block";
}
int64_t a2a_recv_count(int rank, int n) {
  int64_t c = 0;
  for (int i = 0; i < n; ++i) c += a2a_count(i, rank);
  return c;
}

TEST_F(MpiCollectives, AllToAllVUnevenBlocksF32AndU8SyncAsync) {
  const std::vector<int64_t> counts = a2a_matrix(n);
  const size_t nrecv = static_cast<size_t>(a2a_recv_count(rank, n));
  const std::vector<float> send = a2a_send<float>(rank, n);
  std::vector<float> recv(nrecv + 1, -1.0f);
  comm->all_to_all_v(send.data(), recv.data(), counts, CommDType::kF32);
  a2a_check(recv, rank, n, -1.0f);

  const std::vector<uint8_t> send8 = a2a_send<uint8_t>(rank, n);
  std::vector<uint8_t> recv8(nrecv + 1, 255);
  CommHandle h = comm->iall_to_all_v(send8.data(), recv8.data(), counts, CommDType::kU8);
  while (!h->test()) comm->progress();
  a2a_check(recv8, rank, n, uint8_t{255});

  std::fill(recv.begin(), recv.end(), -1.0f);
  comm->iall_to_all_v(send.data(), recv.data(), counts, CommDType::kF32)->wait();
  a2a_check(recv, rank, n, -1.0f);
}

// Zero-sized blocks everywhere rank 0 is involved (it sends and receives nothing, with null
// buffers), two elements between any other pair; and an exchange of nothing at all.
TEST_F(MpiCollectives, AllToAllVZeroBlocks) {
  std::vector<int64_t> counts(static_cast<size_t>(n * n), 2);
  for (int q = 0; q < n; ++q) counts[static_cast<size_t>(q)] = counts[static_cast<size_t>(q * n)] = 0;
  const int64_t mine = rank == 0 ? 0 : 2 * (n - 1);
  std::vector<int64_t> send, recv(static_cast<size_t>(mine) + 1, -5);
  for (int j = 1; j < n && rank > 0; ++j) send.insert(send.end(), {value(rank, j), value(rank, j) + 1});
  comm->all_to_all_v(rank == 0 ? nullptr : send.data(), rank == 0 ? nullptr : recv.data(), counts, CommDType::kI64);
  for (int i = 1; i < n && rank > 0; ++i) {
    EXPECT_EQ(recv[static_cast<size_t>(2 * (i - 1))], value(i, rank)) << i;
    EXPECT_EQ(recv[static_cast<size_t>(2 * (i - 1) + 1)], value(i, rank) + 1) << i;
  }
  EXPECT_EQ(recv.back(), -5);
  comm->all_to_all_v(nullptr, nullptr, std::vector<int64_t>(static_cast<size_t>(n * n), 0), CommDType::kF32);
  comm->iall_to_all_v(nullptr, nullptr, std::vector<int64_t>(static_cast<size_t>(n * n), 0), CommDType::kU8)->wait();
}

TEST_F(MpiCollectives, AllToAllVBadMatrixIsAClearError) {
  float x = 0, y = 0;
  try {
    comm->all_to_all_v(&x, &y, std::vector<int64_t>(static_cast<size_t>(n), 1), CommDType::kF32);
    FAIL() << "a matrix of n entries did not throw";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("{} counts given for a group of {} ranks", n, n)), std::string::npos)
        << e.what();
  }
  std::vector<int64_t> neg(static_cast<size_t>(n * n), 0);
  neg.back() = -2;
  EXPECT_THROW((void)comm->iall_to_all_v(&x, &y, neg, CommDType::kF32), RuntimeError);
  comm->barrier();  // the errors were local: the communicator still works
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
  // All-to-all: MPI takes int counts and displacements; a row (what this rank sends) beyond
  // INT_MAX is refused with the values before MPI is called.
  std::vector<int64_t> diag(static_cast<size_t>(n * n), 0);
  for (int q = 0; q < n; ++q) diag[static_cast<size_t>(q * n + q)] = huge;
  try {
    comm->all_to_all_v(nullptr, nullptr, diag, CommDType::kU8);
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds MPI's int limit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
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
  comm->all_to_all_v(buf.data(), out.data(), std::vector<int64_t>(static_cast<size_t>(n * n), 1),
                     CommDType::kF64);                                                // n * n * 8
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
      {"all_to_all", n * n * 8, world_group, false},
      {"barrier", 0, world_group, false},
      {"recv", 12, "peer " + std::to_string(prev), true},
      {"send", 12, "peer " + std::to_string(next), false},
      {"all_reduce", 1, world_group, false},
  };
  // The irecv is recorded when its completion is observed (after the send).
  std::vector<TraceEvent> ev = tracer.events();
  ASSERT_EQ(ev.size(), expect.size());
  std::swap(ev[8], ev[9]);
  double last_start = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].kind, expect[i].kind) << i;
    EXPECT_EQ(ev[i].bytes, expect[i].bytes) << i << " " << ev[i].kind;
    EXPECT_EQ(ev[i].group, expect[i].group) << i;
    EXPECT_EQ(ev[i].async, expect[i].async) << i;
    EXPECT_EQ(ev[i].axis, i + 1 == ev.size() ? "dp" : "world") << i;
    EXPECT_EQ(ev[i].step, 5);
    EXPECT_GE(ev[i].duration_s, 0.0);
    if (i != 8 && i != 9) {
      EXPECT_GE(ev[i].start_s, last_start) << i;
      last_start = ev[i].start_s;
    }
  }
  EXPECT_EQ(tracer.summary().by_axis.at("world").total.calls, 10);
}

}  // namespace
}  // namespace weft
