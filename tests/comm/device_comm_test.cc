// DeviceCommunicator (comm/device_comm.h) over the single-process communicator: a group of
// one rank moves its data on the device (no host access, no staging) and traces every call
// as the host communicator does. Multi-rank sums, asynchronous calls, send/recv and the
// staging (opened or copied buffers, counted under comm) are in tests/mpi/mpi_device_comm.cc.
#include "comm/device_comm.h"

#include <gtest/gtest.h>

#include "backend/backend_test_util.h"
#include "backend/device_buffer.h"
#include "comm/self_comm.h"
#include "comm/tracer.h"

namespace weft {
namespace {

class DeviceCommSelf : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Backend> be = test::make_test_backend(GetParam());
  std::unique_ptr<Communicator> self = make_self_communicator("dp");
  DeviceCommunicator dc{*self, *be};
  int64_t comm_now() const { return memory_tracker().snapshot()[MemCategory::kComm]; }
};

TEST_P(DeviceCommSelf, CollectivesMoveDeviceData) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  DeviceBuffer send = to_device(*be, v, DType::kF32), recv(*be, DType::kF32, 6);
  recv.zero();
  dc.all_gather(send.raw(), recv.raw(), 6, CommDType::kF32);
  EXPECT_EQ(recv.download<float>(), v);
  recv.zero();
  dc.reduce_scatter(send.raw(), recv.raw(), 6, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(recv.download<float>(), v);
  recv.zero();
  dc.all_gather_v(send.raw(), recv.raw(), {6}, CommDType::kF32);
  EXPECT_EQ(recv.download<float>(), v);
  recv.zero();
  dc.reduce_scatter_v(send.raw(), recv.raw(), {6}, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(recv.download<float>(), v);
  dc.all_reduce(send.raw(), 6, CommDType::kF32, ReduceOp::kSum);
  dc.broadcast(send.raw(), 6, CommDType::kF32, 0);
  dc.barrier();
  EXPECT_EQ(send.download<float>(), v);
}

TEST_P(DeviceCommSelf, ForwardsTheGroupAndHostValuesGoThroughHost) {
  EXPECT_EQ(dc.rank(), 0);
  EXPECT_EQ(dc.size(), 1);
  EXPECT_EQ(dc.axis(), "dp");
  EXPECT_EQ(dc.world_ranks(), std::vector<int>{0});
  EXPECT_EQ(&dc.host(), self.get());
  double norm = 2.5;
  dc.host().all_reduce_sum(&norm, 1);  // a host double: never through the device path
  EXPECT_EQ(norm, 2.5);
  std::unique_ptr<Communicator> sub = dc.split(0, 0, "sub");
  auto* dsub = dynamic_cast<DeviceCommunicator*>(sub.get());
  ASSERT_NE(dsub, nullptr);
  EXPECT_EQ(dsub->axis(), "sub");
  EXPECT_EQ(&dsub->backend(), be.get());
  DeviceBuffer b = to_device(*be, std::vector<float>{7, 8}, DType::kF32);
  dsub->all_reduce(b.raw(), 2, CommDType::kF32, ReduceOp::kMax);
  EXPECT_EQ(b.download<float>(), (std::vector<float>{7, 8}));
}

// In place: a send range inside the receive range (all_gather_v from params + shard_begin
// into params) and send == recv for reduce_scatter_v: nothing moves on one rank.
TEST_P(DeviceCommSelf, InPlaceCallsViewOneBuffer) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  DeviceBuffer b = to_device(*be, v, DType::kF32);
  const int64_t peak_before = memory_tracker().snapshot().peak_of(MemCategory::kComm);
  const int64_t before = comm_now();
  dc.all_gather_v(b.data<float>(), b.raw(), {8}, CommDType::kF32);
  EXPECT_EQ(b.download<float>(), v);
  dc.reduce_scatter_v(b.raw(), b.raw(), {8}, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(b.download<float>(), v);
  CommHandle h = dc.iall_gather_v(b.data<float>(), b.raw(), {8}, CommDType::kF32);
  h->wait();
  EXPECT_EQ(b.download<float>(), v);
  EXPECT_EQ(comm_now(), before);
  EXPECT_EQ(memory_tracker().snapshot().peak_of(MemCategory::kComm), peak_before);  // one rank: nothing staged
}

// One rank: nothing is staged on any backend (the peak of comm does not move), the data
// still arrive, and every call is traced with the host communicator's kind, axis, bytes and
// group, so a one-rank trace equals what it was before this path existed.
TEST_P(DeviceCommSelf, OneRankStagesNothingAndTracesEveryCall) {
  Tracer tracer;
  self->set_tracer(&tracer);
  DeviceBuffer send(*be, DType::kF32, 1000), recv(*be, DType::kF32, 1000);
  send.fill(2.0f);
  const int64_t peak_before = memory_tracker().snapshot().peak_of(MemCategory::kComm);
  dc.all_gather(send.raw(), recv.raw(), 1000, CommDType::kF32);
  dc.reduce_scatter_v(send.raw(), recv.raw(), {1000}, CommDType::kF32, ReduceOp::kSum);
  dc.all_reduce(recv.raw(), 1000, CommDType::kF32, ReduceOp::kSum);
  dc.broadcast(recv.raw(), 500, CommDType::kF32, 0);
  dc.iall_gather_v(send.raw(), recv.raw(), {1000}, CommDType::kF32)->wait();
  EXPECT_EQ(recv.download<float>(), std::vector<float>(1000, 2.0f));
  EXPECT_EQ(memory_tracker().snapshot().peak_of(MemCategory::kComm), peak_before);
  const std::vector<TraceEvent>& ev = tracer.events();
  ASSERT_EQ(ev.size(), 5u);
  const std::vector<std::pair<std::string, int64_t>> expect = {
      {"all_gather", 4000}, {"reduce_scatter", 4000}, {"all_reduce", 4000}, {"broadcast", 2000}, {"all_gather", 4000}};
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].kind, expect[i].first) << i;
    EXPECT_EQ(ev[i].bytes, expect[i].second) << i;
    EXPECT_EQ(ev[i].axis, "dp") << i;
    EXPECT_EQ(ev[i].group, "ranks 0") << i;
    EXPECT_EQ(ev[i].async, i == 4) << i;
  }
  self->set_tracer(nullptr);
}

// Asynchronous on one rank: the call is complete when posted (the data move on the device
// in the backend's order: an op enqueued after the post does not reach what was received).
TEST_P(DeviceCommSelf, AsyncHandlesKeepTheirViewsUntilTheyComplete) {
  DeviceBuffer send = to_device(*be, std::vector<float>{1, 2, 3, 4}, DType::kF32), recv(*be, DType::kF32, 4);
  recv.zero();
  const int64_t before = comm_now();
  CommHandle h = dc.ireduce_scatter_v(send.raw(), recv.raw(), {4}, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(comm_now(), before);
  be->scale(send.data<float>(), 10.0f, 4);  // an op on a buffer of a call in flight
  while (!h->test()) {
  }
  EXPECT_TRUE(h->test());
  EXPECT_EQ(comm_now(), before);
  EXPECT_EQ(recv.download<float>(), (std::vector<float>{1, 2, 3, 4}));
  {
    CommHandle a = dc.iall_reduce(send.raw(), 4, CommDType::kF32, ReduceOp::kSum);
    CommHandle g = dc.iall_gather_v(send.raw(), recv.raw(), {4}, CommDType::kF32);
    EXPECT_EQ(comm_now(), before);
  }
  EXPECT_EQ(comm_now(), before);
  EXPECT_EQ(recv.download<float>(), (std::vector<float>{10, 20, 30, 40}));
}

// All-to-all on one rank: its one block moves on the device (nothing staged), sync and async,
// traced as the host communicator traces it (the whole matrix's bytes).
TEST_P(DeviceCommSelf, AllToAllVOnOneRankCopiesOnTheDevice) {
  Tracer tracer;
  self->set_tracer(&tracer);
  const std::vector<float> v = {5, 6, 7, 8, 9};
  DeviceBuffer send = to_device(*be, v, DType::kF32), recv(*be, DType::kF32, 5);
  const int64_t peak_before = memory_tracker().snapshot().peak_of(MemCategory::kComm);
  recv.zero();
  dc.all_to_all_v(send.raw(), recv.raw(), {5}, CommDType::kF32);
  EXPECT_EQ(recv.download<float>(), v);
  recv.zero();
  CommHandle h = dc.iall_to_all_v(send.raw(), recv.raw(), {5}, CommDType::kF32);
  h->wait();
  EXPECT_EQ(recv.download<float>(), v);
  EXPECT_EQ(memory_tracker().snapshot().peak_of(MemCategory::kComm), peak_before);
  EXPECT_THROW(dc.all_to_all_v(send.raw(), recv.raw(), {5, 0}, CommDType::kF32), RuntimeError);
  const std::vector<TraceEvent>& ev = tracer.events();
  ASSERT_EQ(ev.size(), 2u);
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].kind, "all_to_all") << i;
    EXPECT_EQ(ev[i].bytes, 20) << i;
    EXPECT_EQ(ev[i].group, "ranks 0") << i;
    EXPECT_EQ(ev[i].async, i == 1) << i;
  }
  self->set_tracer(nullptr);
}

// Host memory is refused where it is not device memory (cpu-guarded); on cpu, whose device
// memory is host memory, it is accepted and reduced in place (one rank: unchanged).
TEST_P(DeviceCommSelf, HostMemoryIsRefusedUnlessItIsDeviceMemory) {
  std::vector<float> host(4, 1.0f);
  if (GetParam() == "cpu") {
    EXPECT_NO_THROW(dc.all_reduce(host.data(), 4, CommDType::kF32, ReduceOp::kSum));
    EXPECT_NO_THROW(dc.iall_reduce(host.data(), 4, CommDType::kF32, ReduceOp::kSum)->wait());
    EXPECT_EQ(host, std::vector<float>(4, 1.0f));
    return;
  }
  EXPECT_THROW(dc.all_reduce(host.data(), 4, CommDType::kF32, ReduceOp::kSum), RuntimeError);
  EXPECT_THROW((void)dc.iall_reduce(host.data(), 4, CommDType::kF32, ReduceOp::kSum), RuntimeError);
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceCommSelf, ::testing::Values("cpu", "cpu-guarded", "cpu-guarded-staged"),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace weft
