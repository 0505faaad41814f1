// The device contract of backend.h on every host-side backend: allocation with dtypes and
// memory categories, copies at offsets, fills, synchronisation, DeviceBuffer's ownership,
// and the checks cpu-guarded adds (pointers of ops and copies must be its device memory).
// Expected values are written out by hand (bit patterns, counts), never read from the
// backend under test.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <numeric>

#include "backend/device_buffer.h"
#include "backend_test_util.h"
#include "core/error.h"

namespace weft {
namespace {

using test::make_test_backend;
using test::read_bytes;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI8, DType::kI4};

std::vector<uint8_t> iota_bytes(size_t n, uint8_t first = 1) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class DeviceContract : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Backend> be = make_test_backend(GetParam());
};

TEST_P(DeviceContract, AllocCountsByCategoryAndFreeReturnsToZero) {
  const MemorySnapshot before = memory_tracker().snapshot();
  {
    DeviceBuffer a(*be, DType::kF32, 37, MemCategory::kParams);
    DeviceBuffer b(*be, DType::kI4, 37, MemCategory::kComm);
    DeviceBuffer c(*be, DType::kBF16, 1000, MemCategory::kActivations);
    const MemorySnapshot during = memory_tracker().snapshot();
    EXPECT_EQ(during[MemCategory::kParams] - before[MemCategory::kParams], 148);
    EXPECT_EQ(during[MemCategory::kComm] - before[MemCategory::kComm], 19);
    EXPECT_EQ(during[MemCategory::kActivations] - before[MemCategory::kActivations], 2000);
    EXPECT_EQ(during.total_current - before.total_current, 148 + 19 + 2000);
    EXPECT_EQ(a.bytes(), 148u);
    EXPECT_EQ(b.bytes(), 19u);
  }
  const MemorySnapshot after = memory_tracker().snapshot();
  EXPECT_EQ(after.current, before.current);
  EXPECT_EQ(after.total_current, before.total_current);
}

TEST_P(DeviceContract, EveryDTypeRoundTripsAndIsAligned) {
  for (DType dt : kAllDTypes) {
    DeviceBuffer b(*be, dt, 101, MemCategory::kOther);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 64, 0u) << dtype_name(dt);
    const std::vector<uint8_t> in = iota_bytes(b.bytes(), 3);
    be->copy_to_device(b.raw(), 0, in.data(), in.size());
    be->synchronize();
    EXPECT_EQ(read_bytes(*be, b), in) << dtype_name(dt);
  }
}

TEST_P(DeviceContract, CopiesAtOffsets) {
  DeviceBuffer a(*be, DType::kF32, 100), b(*be, DType::kF32, 50);
  std::vector<float> host(100);
  std::iota(host.begin(), host.end(), 0.0f);
  a.upload(host);
  b.fill(-1.0f);
  // host -> device at an offset: elements 10..14 of b = 100..104
  const std::vector<float> five = {100, 101, 102, 103, 104};
  be->copy_to_device(b.raw(), 10 * sizeof(float), five.data(), 5 * sizeof(float));
  // device -> device between offsets: elements 20..29 of b = elements 60..69 of a
  be->copy_device(b.raw(), 20 * sizeof(float), a.raw(), 60 * sizeof(float), 10 * sizeof(float));
  // device -> host from an offset
  std::vector<float> mid(7);
  be->copy_to_host(mid.data(), a.raw(), 33 * sizeof(float), 7 * sizeof(float));
  EXPECT_EQ(mid, (std::vector<float>{33, 34, 35, 36, 37, 38, 39}));
  const std::vector<float> got = b.download<float>();
  for (int i = 0; i < 50; ++i) {
    const float expect = i >= 10 && i < 15 ? 90.0f + i : i >= 20 && i < 30 ? 40.0f + i : -1.0f;
    EXPECT_EQ(got[i], expect) << i;
  }
  EXPECT_EQ(a.download<float>(95, 3), (std::vector<float>{95, 96, 97}));
  DeviceBuffer c(*be, DType::kF32, 100);
  c.copy_from(a, 400);
  EXPECT_EQ(c.download<float>(), host);
}

// value -> the element's bytes, as written out by hand.
struct FillCase {
  DType dt;
  float value;
  std::vector<uint8_t> element;
};

TEST_P(DeviceContract, FillEveryDTypeWholeAndPart) {
  const FillCase cases[] = {
      {DType::kF32, 1.5f, {0x00, 0x00, 0xc0, 0x3f}}, {DType::kBF16, 1.5f, {0xc0, 0x3f}},
      {DType::kF16, 1.5f, {0x00, 0x3e}},             {DType::kI32, -7.0f, {0xf9, 0xff, 0xff, 0xff}},
      {DType::kI8, -3.0f, {0xfd}},                   {DType::kI4, -3.0f, {0xdd}},
  };
  for (const FillCase& c : cases) {
    DeviceBuffer b(*be, c.dt, 64);
    b.zero();
    b.fill(c.value, 16, 32);  // elements [16, 48)
    be->synchronize();
    const std::vector<uint8_t> got = read_bytes(*be, b);
    const size_t lo = dtype_bytes(c.dt, 16), hi = dtype_bytes(c.dt, 48);
    for (size_t i = 0; i < got.size(); ++i) {
      const uint8_t expect = i >= lo && i < hi ? c.element[(i - lo) % c.element.size()] : 0;
      ASSERT_EQ(got[i], expect) << dtype_name(c.dt) << " byte " << i;
    }
  }
}

TEST_P(DeviceContract, FillRejectsValuesTheDTypeCannotHold) {
  DeviceBuffer i8(*be, DType::kI8, 8), i4(*be, DType::kI4, 8);
  EXPECT_THROW(i8.fill(0.5f), InputError);
  EXPECT_THROW(i8.fill(200.0f), InputError);
  EXPECT_THROW(i4.fill(8.0f), InputError);
  EXPECT_THROW(i4.fill(1.0f, 1, 2), RuntimeError);  // not whole bytes
}

TEST_P(DeviceContract, BufferMovesWithoutDoubleCounting) {
  const int64_t before = memory_tracker().snapshot()[MemCategory::kGrads];
  DeviceBuffer a(*be, DType::kF32, 10, MemCategory::kGrads);
  a.fill(2.0f);
  void* p = a.raw();
  DeviceBuffer b(std::move(a));
  EXPECT_FALSE(a);
  EXPECT_EQ(a.count(), 0);
  EXPECT_EQ(b.raw(), p);
  DeviceBuffer c(*be, DType::kF32, 20, MemCategory::kGrads);
  c = std::move(b);  // frees c's 20 elements
  EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kGrads] - before, 40);
  EXPECT_EQ(c.download<float>(), std::vector<float>(10, 2.0f));
  c = DeviceBuffer();
  EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kGrads], before);
}

TEST_P(DeviceContract, ZeroElementsAllocateNothing) {
  const int64_t before = memory_tracker().snapshot().total_current;
  DeviceBuffer b(*be, DType::kF32, 0);
  EXPECT_FALSE(b);
  b.zero();
  EXPECT_EQ(memory_tracker().snapshot().total_current, before);
}

TEST_P(DeviceContract, DataChecksTheElementSize) {
  DeviceBuffer f(*be, DType::kF32, 4), h(*be, DType::kBF16, 4), q(*be, DType::kI4, 4);
  EXPECT_NE(f.data<float>(), nullptr);
  EXPECT_NE(h.data<bf16>(), nullptr);
  EXPECT_NE(q.data<uint8_t>(), nullptr);
  EXPECT_THROW(f.data<bf16>(), RuntimeError);
  EXPECT_THROW(q.data<int16_t>(), RuntimeError);
  EXPECT_THROW(f.upload(std::vector<float>(5)), RuntimeError);  // past the end
}

TEST_P(DeviceContract, OpsOnDeviceBuffers) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {10, 20, 30, 40};
  DeviceBuffer da = to_device(*be, a, DType::kF32), db = to_device(*be, b, DType::kF32);
  be->add(da.data<float>(), da.data<float>(), db.data<float>(), 4);
  be->scale(da.data<float>() + 2, 0.5f, 2);  // an interior pointer
  EXPECT_EQ(be->sum_squares(db.data<float>(), 4), 3000.0);
  be->synchronize();
  EXPECT_EQ(da.download<float>(), (std::vector<float>{11, 22, 16.5f, 22}));
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceContract, ::testing::Values("cpu", "cpu-guarded", "cpu-guarded-staged"),
                         [](const auto& info) { return test::param_name(info.param); });

// --- the CPU backend's defaults: host memory, direct host access, every pointer is "device" ---
TEST(CpuDefaults, DeviceMemoryIsHostMemory) {
  auto be = make_cpu_backend();
  EXPECT_EQ(be->name(), "cpu");
  DeviceBuffer b(*be, DType::kF32, 8);
  b.fill(3.0f);
  EXPECT_EQ(b.data<float>()[5], 3.0f);  // the host may read it: no fence
  float host[2] = {0, 0};
  EXPECT_TRUE(be->is_device_memory(host));
  EXPECT_TRUE(be->is_device_memory(b.raw()));
  HostAccess access(*be, b.raw(), b.bytes());
  EXPECT_TRUE(access.direct());
  be->add(host, host, host, 2);  // host pointers are fine on cpu
}

// --- cpu-guarded's checks (its faults are in guarded_death_test.cc) ---
class GuardedChecks : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_guarded_backend();
};

TEST_F(GuardedChecks, KnowsItsDeviceMemory) {
  DeviceBuffer b(*be, DType::kF32, 100);
  float host[4] = {};
  EXPECT_EQ(be->name(), "cpu-guarded");
  EXPECT_TRUE(be->is_device_memory(b.raw()));
  EXPECT_TRUE(be->is_device_memory(b.data<float>() + 99));
  EXPECT_FALSE(be->is_device_memory(b.data<float>() + 100));  // one past the end
  EXPECT_FALSE(be->is_device_memory(host));
  const void* p = b.raw();
  b = DeviceBuffer();
  EXPECT_FALSE(be->is_device_memory(p));  // freed
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(GuardedChecks, RejectsHostMemoryInOps) {
  DeviceBuffer a(*be, DType::kF32, 4);
  std::vector<float> host(4, 1.0f);
  expect_error([&] { be->add(a.data<float>(), a.data<float>(), host.data(), 4); },
               "cpu-guarded: add: argument 3");
  expect_error([&] { be->sum_squares(host.data(), 4); }, "is not inside a device buffer of this backend");
  auto other = make_cpu_guarded_backend();
  DeviceBuffer theirs(*other, DType::kF32, 4);
  expect_error([&] { be->scale(theirs.data<float>(), 2.0f, 4); }, "scale: argument 1");
}

TEST_F(GuardedChecks, RejectsCopiesOutsideOneBuffer) {
  DeviceBuffer a(*be, DType::kF32, 4), b(*be, DType::kF32, 4);
  std::vector<float> host(8);
  expect_error([&] { be->copy_to_device(a.raw(), 0, host.data(), 20); }, "copy_to_device: argument 1");
  expect_error([&] { be->copy_to_host(host.data(), a.raw(), 8, 12); }, "copy_to_host: argument 1");
  expect_error([&] { be->copy_to_device(a.raw(), 0, b.raw(), 4); }, "source");
  expect_error([&] { be->copy_to_host(b.raw(), a.raw(), 0, 4); }, "destination");
  expect_error([&] { be->copy_device(a.raw(), 0, b.raw(), 4, 16); }, "copy_device: argument 2");
}

TEST_F(GuardedChecks, HostAccessOpensOneBufferForItsScope) {
  DeviceBuffer b(*be, DType::kF32, 16);
  b.fill(5.0f);
  {
    HostAccess access(*be, b.data<float>() + 4, 8 * sizeof(float));
    ASSERT_TRUE(access.direct());
    b.data<float>()[6] = 7.0f;              // allowed inside the scope
    be->scale(b.data<float>(), 2.0f, 16);   // an op in the scope keeps it open
    EXPECT_EQ(b.data<float>()[6], 14.0f);
  }
  EXPECT_EQ(b.download<float>(6, 2), (std::vector<float>{14.0f, 10.0f}));
  GuardedOptions staged;
  staged.host_access = false;
  auto refusing = make_cpu_guarded_backend(staged);
  DeviceBuffer r(*refusing, DType::kF32, 4);
  EXPECT_FALSE(HostAccess(*refusing, r.raw(), r.bytes()).direct());
}

}  // namespace
}  // namespace weft
