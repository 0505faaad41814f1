// The memory check before a run allocates (train/memory_fit.h): the decision for each mode,
// and the parsing of /proc/meminfo and cgroup files, against hand-written inputs.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/memory_fit.h"

namespace weft {
namespace {

MemoryNeed need_of(double gib_each, int ranks) {
  MemoryNeed n;
  const double g = 1073741824.0;
  n.bytes.params = 1 * g * gib_each;
  n.bytes.grads = 1 * g * gib_each;
  n.bytes.optimizer = 2 * g * gib_each;
  n.bytes.activations = 0.5 * g * gib_each;
  n.bytes.sum();
  n.ranks = ranks;
  n.where = "node 0 (ranks 0,1)";
  return n;
}

TEST(MemoryFit, RefusesWithEveryCategoryAndTheAvailableBytes) {
  const MemoryNeed need = need_of(2.0, 2);  // 9 GiB
  const MemoryAvailable avail{8.0 * 1073741824.0, "MemAvailable of /proc/meminfo"};
  try {
    require_memory_fit(need, avail, "on");
    FAIL() << "a run of 9 GiB was accepted with 8 GiB available";
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const char* f : {"node 0 (ranks 0,1) needs 9.00 GiB", "2 ranks", "params 2.00 GiB", "grads 2.00 GiB",
                          "optimizer 4.00 GiB", "activations 1.00 GiB", "workspace 0.00 GiB", "comm buffers 0.00 GiB",
                          "8.00 GiB are available (MemAvailable of /proc/meminfo)", "--memory_check off"}) {
      EXPECT_NE(m.find(f), std::string::npos) << "missing '" << f << "' in: " << m;
    }
  }
}

TEST(MemoryFit, FitsWarnAndOffAreNotRefused) {
  const MemoryAvailable eight{8.0 * 1073741824.0, "test"};
  EXPECT_NO_THROW(require_memory_fit(need_of(1.0, 1), eight, "on"));   // 4.5 GiB
  EXPECT_NO_THROW(require_memory_fit(need_of(2.0, 2), eight, "warn"));  // 9 GiB: a warning
  EXPECT_NO_THROW(require_memory_fit(need_of(2.0, 2), eight, "off"));
}

TEST(MemoryFit, ParsesMeminfoAndCgroupFiles) {
  const std::string meminfo = "MemTotal:       32000000 kB\nMemFree:         1000 kB\nMemAvailable:   24000000 kB\n";
  ASSERT_TRUE(meminfo_available(meminfo).has_value());
  EXPECT_EQ(*meminfo_available(meminfo), 24000000.0 * 1024);
  EXPECT_FALSE(meminfo_available("MemTotal: 5 kB\n").has_value());
  // cgroup v2: 8 GiB limit, 3 GiB used of which 1 GiB reclaimable page cache: 6 GiB headroom.
  const double g = 1073741824.0;
  auto h = cgroup_headroom("8589934592\n", "3221225472\n", g);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(*h, 6 * g);
  EXPECT_FALSE(cgroup_headroom("max\n", "3221225472\n", 0).has_value());           // v2: no limit
  EXPECT_FALSE(cgroup_headroom("9223372036854771712\n", "100\n", 0).has_value());  // v1: no limit
  EXPECT_EQ(*cgroup_headroom("100\n", "500\n", 0), 0.0);  // over the limit: nothing left
}

TEST(MemoryFit, ThisMachineReportsAvailableHostMemory) {
  const auto a = host_memory_available();
  ASSERT_TRUE(a.has_value()) << "neither /proc/meminfo nor a cgroup limit was readable";
  EXPECT_GT(a->bytes, 0);
  EXPECT_FALSE(a->source.empty());
}

}  // namespace
}  // namespace weft
