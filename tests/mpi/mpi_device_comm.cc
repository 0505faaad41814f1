// DeviceCommunicator (comm/device_comm.h) across ranks on device buffers: on cpu, on
// cpu-guarded in place (the adapter unfences the buffers for MPI while a call is in flight)
// and staged (access refused, as on a GPU). Rank r contributes r * 1000 + i at element i:
// sums, gathers and messages have closed forms.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend_test_util.h"
#include "backend/device_buffer.h"
#include "comm/device_comm.h"
#include "mpi_test_util.h"

namespace weft {
namespace {

std::vector<float> contribution(int rank, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<float>(rank * 1000 + i);
  return v;
}

class MpiDeviceComm : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Communicator> comm = test::fresh_world();
  std::unique_ptr<Backend> be = test::make_test_backend(GetParam());
  DeviceCommunicator dc{*comm, *be};
  int rank = comm->rank(), n = comm->size();
  int64_t comm_now() const { return memory_tracker().snapshot()[MemCategory::kComm]; }
  // Sum over ranks of contribution(r, .)[i].
  float sum_at(int64_t i) const { return static_cast<float>(1000 * n * (n - 1) / 2 + n * i); }
};

TEST_P(MpiDeviceComm, AllReduceSum) {
  const int64_t count = 777;
  DeviceBuffer buf = to_device(*be, contribution(rank, count), DType::kF32, MemCategory::kGrads);
  dc.all_reduce(buf.raw(), count, CommDType::kF32, ReduceOp::kSum);
  const std::vector<float> got = buf.download<float>();
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], sum_at(i)) << i;
}

TEST_P(MpiDeviceComm, AllGatherAndReduceScatter) {
  const int64_t count = 100;
  DeviceBuffer send = to_device(*be, contribution(rank, count), DType::kF32);
  DeviceBuffer all(*be, DType::kF32, count * n), mine(*be, DType::kF32, count);
  dc.all_gather(send.raw(), all.raw(), count, CommDType::kF32);
  const std::vector<float> gathered = all.download<float>();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(std::vector<float>(gathered.begin() + r * count, gathered.begin() + (r + 1) * count),
              contribution(r, count)) << "block " << r;
  }
  dc.reduce_scatter(all.raw(), mine.raw(), count, CommDType::kF32, ReduceOp::kSum);  // n copies of each block
  const std::vector<float> got = mine.download<float>(), expect = contribution(rank, count);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], n * expect[static_cast<size_t>(i)]);
}

// Uneven blocks (rank r holds r + 3 elements), gathered in place into one buffer as ZeRO
// does with its parameters, then reduce-scattered in place (send == recv), then broadcast.
TEST_P(MpiDeviceComm, UnevenInPlaceAndBroadcast) {
  std::vector<int64_t> counts(static_cast<size_t>(n));
  int64_t total = 0, mine_at = 0;
  for (int r = 0; r < n; ++r) {
    counts[static_cast<size_t>(r)] = r + 3;
    if (r == rank) mine_at = total;
    total += r + 3;
  }
  DeviceBuffer all(*be, DType::kF32, total);
  all.fill(-1.0f);
  all.upload(contribution(rank, counts[static_cast<size_t>(rank)]), mine_at);
  dc.all_gather_v(all.data<float>() + mine_at, all.raw(), counts, CommDType::kF32);
  std::vector<float> expect;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> c = contribution(r, counts[static_cast<size_t>(r)]);
    expect.insert(expect.end(), c.begin(), c.end());
  }
  ASSERT_EQ(all.download<float>(), expect);
  dc.reduce_scatter_v(all.raw(), all.raw(), counts, CommDType::kF32, ReduceOp::kSum);
  const std::vector<float> reduced = all.download<float>(0, counts[static_cast<size_t>(rank)]);
  for (int64_t i = 0; i < counts[static_cast<size_t>(rank)]; ++i) {
    ASSERT_EQ(reduced[static_cast<size_t>(i)], n * expect[static_cast<size_t>(mine_at + i)]) << i;
  }
  DeviceBuffer b = to_device(*be, contribution(rank, 50), DType::kF32);
  dc.broadcast(b.raw(), 50, CommDType::kF32, n - 1);
  EXPECT_EQ(b.download<float>(), contribution(n - 1, 50));
}

// Three collectives in flight at once on two buffers (two of them on one buffer), with ops on
// those buffers in between (on a range the collectives do not use) and completion in another
// order than posting.
TEST_P(MpiDeviceComm, AsyncCollectivesOverlapWithOps) {
  const int64_t chunk = 64;
  DeviceBuffer grads = to_device(*be, contribution(rank, 3 * chunk), DType::kF32, MemCategory::kGrads);
  DeviceBuffer params(*be, DType::kF32, chunk * n, MemCategory::kParams);
  params.fill(0.0f);
  params.upload(contribution(rank, chunk), rank * chunk);
  DeviceBuffer shard(*be, DType::kF32, chunk, MemCategory::kComm);
  const int64_t before = comm_now();

  // grads: [0, chunk) all-reduced, [chunk, 2 chunk) reduce-scattered, [2 chunk, 3 chunk) scaled.
  CommHandle ar = dc.iall_reduce(grads.raw(), chunk, CommDType::kF32, ReduceOp::kSum);
  const int64_t b = chunk / n;
  CommHandle rs = dc.ireduce_scatter_v(grads.data<float>() + chunk, shard.raw(),
                                       std::vector<int64_t>(static_cast<size_t>(n), b), CommDType::kF32,
                                       ReduceOp::kSum);
  CommHandle ag = dc.iall_gather_v(params.data<float>() + rank * chunk, params.raw(),
                                   std::vector<int64_t>(static_cast<size_t>(n), chunk), CommDType::kF32);
  be->scale(grads.data<float>() + 2 * chunk, 2.0f, chunk);
  dc.progress();
  ag->wait();
  rs->wait();
  be->scale(grads.data<float>() + 2 * chunk, 0.5f, chunk);  // one collective still in flight
  ar->wait();
  EXPECT_EQ(comm_now(), before);

  const std::vector<float> g = grads.download<float>();
  for (int64_t i = 0; i < chunk; ++i) ASSERT_EQ(g[static_cast<size_t>(i)], sum_at(i)) << i;
  const std::vector<float> own = contribution(rank, 3 * chunk);
  for (int64_t i = 2 * chunk; i < 3 * chunk; ++i) ASSERT_EQ(g[static_cast<size_t>(i)], own[static_cast<size_t>(i)]) << i;
  const std::vector<float> s = shard.download<float>(0, b);
  for (int64_t i = 0; i < b; ++i) ASSERT_EQ(s[static_cast<size_t>(i)], sum_at(chunk + rank * b + i)) << i;
  const std::vector<float> p = params.download<float>();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(std::vector<float>(p.begin() + r * chunk, p.begin() + (r + 1) * chunk), contribution(r, chunk)) << r;
  }
}

// Staging (access refused, as on a GPU): the host copies are counted under comm while a call
// is in flight (a blocking all_gather holds its send and receive copies at once; an
// asynchronous one keeps them in its handle until it completes) and released afterwards;
// with direct access nothing is staged.
TEST_P(MpiDeviceComm, StagingIsCountedWhileInFlightAndReleased) {
  const bool staged = GetParam() == "cpu-guarded-staged";
  const int64_t count = 1000, b = count * 4;
  DeviceBuffer send = to_device(*be, contribution(rank, count), DType::kF32);
  DeviceBuffer all(*be, DType::kF32, count * n);
  const int64_t before = comm_now(), peak_before = memory_tracker().snapshot().peak_of(MemCategory::kComm);
  dc.all_gather(send.raw(), all.raw(), count, CommDType::kF32);
  EXPECT_EQ(comm_now(), before);
  const int64_t peak = memory_tracker().snapshot().peak_of(MemCategory::kComm);
  if (staged) {
    EXPECT_GE(peak, before + b + b * n);
  } else {
    EXPECT_EQ(peak, peak_before);
  }
  CommHandle h = dc.iall_gather_v(send.raw(), all.raw(), std::vector<int64_t>(static_cast<size_t>(n), count),
                                  CommDType::kF32);
  EXPECT_EQ(comm_now(), before + (staged ? b + b * n : 0));
  h->wait();
  EXPECT_EQ(comm_now(), before);
  const std::vector<float> gathered = all.download<float>();
  for (int r = 0; r < n; ++r) ASSERT_EQ(gathered[static_cast<size_t>(r * count + 7)], contribution(r, count)[7]) << r;
}

// A handle that is destroyed unwaited waits, and its data are on the device afterwards.
TEST_P(MpiDeviceComm, DestroyedHandleWaitsAndCopiesBack) {
  DeviceBuffer buf = to_device(*be, contribution(rank, 32), DType::kF32);
  const int64_t before = comm_now();
  { CommHandle h = dc.iall_reduce(buf.raw(), 32, CommDType::kF32, ReduceOp::kSum); }
  EXPECT_EQ(comm_now(), before);
  const std::vector<float> got = buf.download<float>();
  for (int64_t i = 0; i < 32; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], sum_at(i)) << i;
}

// Point to point on a ring: asynchronous to the next rank and from the previous one (both in
// flight at once, the receive polled with test()), then blocking the other way round.
TEST_P(MpiDeviceComm, SendAndReceiveOnARing) {
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const int64_t count = 300;
  DeviceBuffer out = to_device(*be, contribution(rank, count), DType::kF32);
  DeviceBuffer in(*be, DType::kF32, count);
  in.fill(-1.0f);
  CommHandle r = dc.irecv(in.raw(), count, CommDType::kF32, prev, 7);
  CommHandle s = dc.isend(out.raw(), count, CommDType::kF32, next, 7);
  while (!r->test()) dc.progress();
  s->wait();
  EXPECT_EQ(in.download<float>(), contribution(prev, count));
  // Blocking, backwards around the ring: even ranks send first, odd ranks receive first
  // (with an odd n the last rank sends first too; rank 0 receives from it after sending).
  DeviceBuffer back(*be, DType::kI32, 5);
  DeviceBuffer token = to_device(*be, std::vector<int32_t>(5, rank), DType::kI32);
  if (rank % 2 == 0) {
    dc.send(token.raw(), 5, CommDType::kI32, prev, 8);
    dc.recv(back.raw(), 5, CommDType::kI32, next, 8);
  } else {
    dc.recv(back.raw(), 5, CommDType::kI32, next, 8);
    dc.send(token.raw(), 5, CommDType::kI32, prev, 8);
  }
  EXPECT_EQ(back.download<int32_t>(), std::vector<int32_t>(5, next));
  dc.barrier();
}

// All-to-all on device buffers: rank i sends rank j (i + 2 j) % 4 elements (zero blocks on
// every group size), element k = 100 i + j + 1000 k; sync, then async with an op on another
// buffer while it is in flight. Staging (cpu-guarded-staged) is released when it completes.
TEST_P(MpiDeviceComm, AllToAllVUnevenBlocks) {
  auto count = [](int i, int j) { return static_cast<int64_t>((i + 2 * j) % 4); };
  std::vector<int64_t> counts;
  std::vector<float> send, expect;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) counts.push_back(count(i, j));
  }
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < count(rank, j); ++k) send.push_back(static_cast<float>(100 * rank + j + 1000 * k));
  }
  for (int i = 0; i < n; ++i) {
    for (int64_t k = 0; k < count(i, rank); ++k) expect.push_back(static_cast<float>(100 * i + rank + 1000 * k));
  }
  const int64_t before = comm_now();
  DeviceBuffer s = to_device(*be, send.empty() ? std::vector<float>{0.0f} : send, DType::kF32);
  DeviceBuffer r(*be, DType::kF32, static_cast<int64_t>(expect.size()) + 1);
  r.fill(-1.0f);
  dc.all_to_all_v(s.raw(), r.raw(), counts, CommDType::kF32);
  std::vector<float> got = r.download<float>();
  EXPECT_EQ(std::vector<float>(got.begin(), got.end() - 1), expect);
  EXPECT_EQ(got.back(), -1.0f) << "wrote past the last block";

  r.fill(-1.0f);
  DeviceBuffer other = to_device(*be, std::vector<float>{1, 2, 3}, DType::kF32);
  CommHandle h = dc.iall_to_all_v(s.raw(), r.raw(), counts, CommDType::kF32);
  be->scale(other.data<float>(), 2.0f, 3);
  dc.progress();
  h->wait();
  got = r.download<float>();
  EXPECT_EQ(std::vector<float>(got.begin(), got.end() - 1), expect);
  EXPECT_EQ(other.download<float>(), (std::vector<float>{2, 4, 6}));
  h.reset();
  EXPECT_EQ(comm_now(), before);  // the buffers are not comm memory: any staging is released
}

TEST_P(MpiDeviceComm, SplitGivesADeviceCommunicator) {
  std::unique_ptr<Communicator> half = dc.split(rank % 2, rank, "half");
  ASSERT_NE(dynamic_cast<DeviceCommunicator*>(half.get()), nullptr);
  DeviceBuffer b = to_device(*be, std::vector<float>(3, static_cast<float>(rank)), DType::kF32);
  half->all_reduce(b.raw(), 3, CommDType::kF32, ReduceOp::kMax);
  int top = rank;
  for (int r = rank % 2; r < n; r += 2) top = std::max(top, r);
  EXPECT_EQ(b.download<float>(), std::vector<float>(3, static_cast<float>(top)));
}

INSTANTIATE_TEST_SUITE_P(Backends, MpiDeviceComm, ::testing::Values("cpu", "cpu-guarded", "cpu-guarded-staged"),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace weft
