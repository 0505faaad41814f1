// The NCCL communicator on several ranks, one GPU each (weft_cuda_mpi_tests, run under mpirun
// by CTest with 2 and 4 ranks): every Communicator call on DEVICE buffers against the closed
// forms of tests/mpi/mpi_collectives.cc (rank r contributes r * 1000 + i: a sum over n ranks is
// 1000 n (n-1) / 2 + n i, the max 1000 (n-1) + i, the min i; exact in f32), the 16-bit floats
// with their own small closed form, uneven forms in and out of place, broadcast from every
// root, point-to-point (asynchronous ring, blocking pairs), split, and the timeout: a stalled
// peer gives a CommTimeout naming the call, axis and ranks, and aborts the communicator.
// Fewer visible GPUs than ranks on this node (NCCL refuses two ranks on one device), or none:
// every rank reports each test skipped with the reason (decided together, so that no rank
// enters NCCL alone).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/device_buffer.h"
#include "comm/nccl/nccl_comm.h"
#include "core/dtype.h"
#include "core/error.h"
#include "mpi/mpi_test_util.h"

namespace weft {
namespace {

int64_t value(int rank, int64_t i) { return int64_t{rank} * 1000 + i; }
int64_t sum_over_ranks(int n, int64_t i) { return 1000 * int64_t{n} * (n - 1) / 2 + n * i; }

// Ranks on this node (the launcher's count; the world size when it gives none).
int local_ranks(int world) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return world;
}

class NcclRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    host = test::fresh_world("world");
    rank = host->rank();
    n = host->size();
    std::string why;
    const int gpus = gpu::device_count(&why);
    const int need = local_ranks(n);
    int32_t ok = gpus >= need ? 1 : 0, all_ok = 0;
    host->all_reduce(&ok, 1, CommDType::kI32, ReduceOp::kMin);
    all_ok = ok;
    if (all_ok == 0) {
      GTEST_SKIP() << "NCCL needs one GPU per rank: " << need << " ranks on this node, " << gpus
                   << " CUDA devices visible" << (gpus == 0 ? " (" + why + ")" : std::string());
    }
    be = cuda::make_cuda_backend();  // the device of the local rank
    comm = make_nccl_communicator(*host, *be);
    comm->set_timeout(std::chrono::seconds(20));
  }
  template <typename T>
  std::vector<T> contribution(int64_t count, int64_t first = 0) const {
    std::vector<T> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<T>(value(rank, first + i));
    return v;
  }
  // Device buffers of the backend: a copy of a host vector (dtype dt), and `count` uninitialised floats.
  template <typename T>
  DeviceBuffer up(const std::vector<T>& v, DType dt = DType::kF32) const {
    return to_device(*be, v, dt);
  }
  DeviceBuffer floats(int64_t count) const { return DeviceBuffer(*be, DType::kF32, count); }
  // Counts 0, 3, 1, 4, 2, ... (rank 0 contributes nothing): uneven with a zero block.
  std::vector<int64_t> uneven_counts() const {
    std::vector<int64_t> c(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) c[static_cast<size_t>(q)] = (q * 3) % 5;
    return c;
  }
  std::unique_ptr<Communicator> host;
  std::unique_ptr<cuda::CudaBackend> be;
  std::unique_ptr<NcclCommunicator> comm;
  int rank = 0, n = 1;
};

TEST_F(NcclRanks, AllReduceSumMaxMin) {
  const int64_t count = 4099;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    auto d = up(contribution<float>(count));
    comm->all_reduce(d.data<float>(), count, CommDType::kF32, op);
    const auto got = d.download<float>();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t e = op == ReduceOp::kSum ? sum_over_ranks(n, i) : op == ReduceOp::kMax ? value(n - 1, i) : i;
      ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(e)) << "op " << static_cast<int>(op) << " i " << i;
    }
  }
  auto d = up(contribution<float>(8));
  comm->iall_reduce(d.data<float>(), 8, CommDType::kF32, ReduceOp::kSum)->wait();
  EXPECT_EQ(d.download<float>()[5], static_cast<float>(sum_over_ranks(n, 5)));
}

TEST_F(NcclRanks, SixteenBitFloatsReduceNatively) {
  // (r + 1) / 2 + i: exact in bf16 and f16, as are the sums over up to 8 ranks for i < 4.
  const int64_t count = 4;
  std::vector<bf16> b(count);
  std::vector<_Float16> h(count);
  for (int64_t i = 0; i < count; ++i) {
    const float x = 0.5f * static_cast<float>(rank + 1) + static_cast<float>(i);
    b[static_cast<size_t>(i)] = float_to_bf16(x);
    h[static_cast<size_t>(i)] = static_cast<_Float16>(x);
  }
  auto db = up(b, DType::kBF16);
  auto dh = up(h, DType::kF16);
  comm->all_reduce(db.data<bf16>(), count, CommDType::kBF16, ReduceOp::kSum);
  comm->all_reduce(dh.data<_Float16>(), count, CommDType::kF16, ReduceOp::kSum);
  const auto gb = db.download<bf16>();
  const auto gh = dh.download<_Float16>();
  for (int64_t i = 0; i < count; ++i) {
    const float e = 0.25f * static_cast<float>(n * (n + 1)) + static_cast<float>(n * i);
    EXPECT_EQ(bf16_to_float(gb[static_cast<size_t>(i)]), e) << i;
    EXPECT_EQ(static_cast<float>(gh[static_cast<size_t>(i)]), e) << i;
  }
}

TEST_F(NcclRanks, ReduceScatterOutOfAndInPlace) {
  const int64_t count = 5;
  auto send = up(contribution<float>(n * count));
  DeviceBuffer recv = floats(count);
  comm->reduce_scatter(send.data<float>(), recv.data<float>(), count, CommDType::kF32, ReduceOp::kSum);
  auto got = recv.download<float>();
  for (int64_t k = 0; k < count; ++k) EXPECT_EQ(got[k], static_cast<float>(sum_over_ranks(n, rank * count + k)));
  // In place: this rank's block lands at the start of the buffer.
  comm->reduce_scatter(send.data<float>(), send.data<float>(), count, CommDType::kF32, ReduceOp::kMax);
  got = send.download<float>(0, count);
  for (int64_t k = 0; k < count; ++k) EXPECT_EQ(got[k], static_cast<float>(value(n - 1, rank * count + k)));
}

TEST_F(NcclRanks, ReduceScatterVUnevenZeroAndInPlace) {
  const std::vector<int64_t> counts = uneven_counts();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t off = 0;
  for (int q = 0; q < rank; ++q) off += counts[static_cast<size_t>(q)];
  const int64_t mine = counts[static_cast<size_t>(rank)];
  for (bool in_place : {false, true}) {
    auto send = up(contribution<float>(total));
    DeviceBuffer recv = floats(std::max<int64_t>(mine, 1));
    const DeviceBuffer& out = in_place ? send : recv;
    comm->ireduce_scatter_v(send.data<float>(), out.data<float>(), counts, CommDType::kF32, ReduceOp::kSum)->wait();
    const auto got = out.download<float>(0, mine);
    for (int64_t k = 0; k < mine; ++k) {
      EXPECT_EQ(got[static_cast<size_t>(k)], static_cast<float>(sum_over_ranks(n, off + k))) << "in place " << in_place;
    }
  }
}

TEST_F(NcclRanks, AllGatherOutOfAndInPlace) {
  const int64_t count = 3;
  auto send = up(contribution<float>(count));
  DeviceBuffer recv = floats(n * count);
  comm->all_gather(send.data<float>(), recv.data<float>(), count, CommDType::kF32);
  auto got = recv.download<float>();
  for (int q = 0; q < n; ++q) {
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(got[static_cast<size_t>(q * count + i)], static_cast<float>(value(q, i)));
  }
  // In place: this rank's block already sits in recv.
  std::vector<float> init(static_cast<size_t>(n * count), -1.0f);
  for (int64_t i = 0; i < count; ++i) init[static_cast<size_t>(rank * count + i)] = static_cast<float>(value(rank, i));
  auto buf = up(init);
  comm->all_gather(buf.data<float>() + rank * count, buf.data<float>(), count, CommDType::kF32);
  EXPECT_EQ(buf.download<float>(), got);
}

TEST_F(NcclRanks, AllGatherVUnevenAsyncAndInPlace) {
  const std::vector<int64_t> counts = uneven_counts();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> expect;
  for (int q = 0; q < n; ++q) {
    for (int64_t i = 0; i < counts[static_cast<size_t>(q)]; ++i) expect.push_back(static_cast<float>(value(q, i)));
  }
  int64_t off = 0;
  for (int q = 0; q < rank; ++q) off += counts[static_cast<size_t>(q)];
  auto send = up(contribution<float>(std::max<int64_t>(counts[static_cast<size_t>(rank)], 1)));
  DeviceBuffer recv = floats(total);
  comm->iall_gather_v(send.data<float>(), recv.data<float>(), counts, CommDType::kF32)->wait();
  EXPECT_EQ(recv.download<float>(), expect);
  std::vector<float> init(static_cast<size_t>(total), -1.0f);
  for (int64_t i = 0; i < counts[static_cast<size_t>(rank)]; ++i) init[static_cast<size_t>(off + i)] = static_cast<float>(value(rank, i));
  auto buf = up(init);
  comm->all_gather_v(buf.data<float>() + off, buf.data<float>(), counts, CommDType::kF32);
  EXPECT_EQ(buf.download<float>(), expect);
}

// All-to-all with uneven blocks (ncclSend/ncclRecv per peer in one group, the own block a
// device copy): rank i sends rank j (i + 2 j) % 4 elements (zero blocks on every group size),
// element k holding 100 i + j + 1000 k; sync, then async in u8 (16 i + j + k).
TEST_F(NcclRanks, AllToAllVUnevenZeroBlocksSyncAsync) {
  auto count = [](int i, int j) { return static_cast<int64_t>((i + 2 * j) % 4); };
  std::vector<int64_t> counts;
  std::vector<float> send, expect;
  std::vector<uint8_t> send8, expect8;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) counts.push_back(count(i, j));
  }
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < count(rank, j); ++k) {
      send.push_back(static_cast<float>(100 * rank + j + 1000 * k));
      send8.push_back(static_cast<uint8_t>(16 * rank + j + k));
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int64_t k = 0; k < count(i, rank); ++k) {
      expect.push_back(static_cast<float>(100 * i + rank + 1000 * k));
      expect8.push_back(static_cast<uint8_t>(16 * i + rank + k));
    }
  }
  send.push_back(0), send8.push_back(0);  // never empty
  auto ds = up(send);
  DeviceBuffer dr = floats(static_cast<int64_t>(expect.size()) + 1);
  comm->all_to_all_v(ds.data<float>(), dr.data<float>(), counts, CommDType::kF32);
  EXPECT_EQ(dr.download<float>(0, static_cast<int64_t>(expect.size())), expect);
  auto ds8 = up(send8, DType::kI8);  // bytes
  DeviceBuffer dr8(*be, DType::kI8, static_cast<int64_t>(expect8.size()) + 1);
  comm->iall_to_all_v(ds8.data<uint8_t>(), dr8.data<uint8_t>(), counts, CommDType::kU8)->wait();
  EXPECT_EQ(dr8.download<uint8_t>(0, static_cast<int64_t>(expect8.size())), expect8);
}

TEST_F(NcclRanks, BroadcastFromEachRoot) {
  for (int root = 0; root < n; ++root) {
    auto d = up(contribution<float>(6));
    comm->broadcast(d.data<float>(), 6, CommDType::kF32, root);
    const auto got = d.download<float>();
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<float>(value(root, i))) << root;
  }
}

TEST_F(NcclRanks, SendRecvRingAsyncAndPairsBlocking) {
  if (n < 2) GTEST_SKIP() << "point-to-point needs 2 ranks (this run has 1; NCCL cannot send to itself)";
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  auto out = up(contribution<float>(4));
  DeviceBuffer in = floats(4);
  // Receive posted first, as the pipeline runtime does: held until waited for (p2p_queue.h).
  CommHandle r = comm->irecv(in.data<float>(), 4, CommDType::kF32, prev, 0);
  CommHandle s = comm->isend(out.data<float>(), 4, CommDType::kF32, next, 0);
  EXPECT_FALSE(r->test());  // not started: test() does not start it
  r->wait();
  s->wait();
  auto got = in.download<float>();
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<float>(value(prev, i)));
  // Blocking pairs: even ranks send first, odd ranks receive first.
  const int peer = rank ^ 1;
  if (peer < n) {
    if (rank % 2 == 0) {
      comm->send(out.data<float>(), 4, CommDType::kF32, peer, 1);
      comm->recv(in.data<float>(), 4, CommDType::kF32, peer, 1);
    } else {
      comm->recv(in.data<float>(), 4, CommDType::kF32, peer, 1);
      comm->send(out.data<float>(), 4, CommDType::kF32, peer, 1);
    }
    got = in.download<float>();
    EXPECT_EQ(got[3], static_cast<float>(value(peer, 3)));
  }
}

TEST_F(NcclRanks, SplitEvenOdd) {
  auto sub = comm->split(rank % 2, rank, "pairs");
  EXPECT_EQ(sub->axis(), "pairs");
  EXPECT_EQ(sub->size(), (n + 1 - rank % 2) / 2);
  auto d = up(std::vector<float>{static_cast<float>(rank)});
  sub->all_reduce(d.data<float>(), 1, CommDType::kF32, ReduceOp::kSum);
  float e = 0;
  for (int q = rank % 2; q < n; q += 2) e += static_cast<float>(q);
  EXPECT_EQ(d.download<float>()[0], e);
}

TEST_F(NcclRanks, StalledPeerTimesOutAndAborts) {
  // Rank 1 holds back; rank 0 gives up after 1 s, names the call, then tells rank 1 (host
  // message) to leave without calling: its communicator is aborted on destruction.
  if (n < 2) GTEST_SKIP() << "a stalled peer needs 2 ranks (this run has 1)";
  auto d = up(contribution<float>(1 << 20));
  if (rank == 0) {
    comm->set_timeout(std::chrono::milliseconds(1000));
    try {
      comm->all_reduce(d.data<float>(), 1 << 20, CommDType::kF32, ReduceOp::kSum);
      ADD_FAILURE() << "all_reduce completed while rank 1 held back";
    } catch (const CommTimeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("weft: rank 0: all_reduce of 4.0 MiB on axis world"), std::string::npos) << what;
      EXPECT_NE(what.find("did not complete within 1.0 s: a peer rank is dead or stalled (NCCL communicator "
                          "aborted)"),
                std::string::npos)
          << what;
    }
    try {
      comm->barrier();
      ADD_FAILURE() << "an aborted communicator accepted a call";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("was aborted after an earlier error"), std::string::npos) << e.what();
    }
  }
  int32_t go = 1;
  host->broadcast(&go, 1, CommDType::kI32, 0);  // rank 0 is done: the others leave
  if (rank != 0) comm->set_timeout(std::chrono::milliseconds(1000));  // finalize gives up, aborts
}

}  // namespace
}  // namespace weft
