// DataParallel over a pipeline stage's part of the model (single process, every ZeRO stage):
// it buckets, reduces and hands out exactly the groups the part holds.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "comm/device_comm.h"
#include "comm/self_comm.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"
#include "parallel/dp/data_parallel.h"

namespace weft {
namespace {

TEST(DataParallelStage, HandlesOnlyTheGroupsOfItsPart) {
  const ModelConfig cfg = make_model_config("t", 4, 2, 32, 16, 301);
  auto comm = make_self_communicator("dp");
  auto be = make_cpu_backend();
  DeviceCommunicator dcomm(*comm, *be);
  const StageSpec parts[] = {{0, 2, true, false}, {2, 1, false, false}, {3, 1, false, true}};
  for (const StageSpec& part : parts) {
    const ParamLayout layout = param_layout(cfg, 1, 0, part);
    for (int zero = 0; zero <= 3; ++zero) {
      DataParallelConfig dc;
      dc.zero = zero;
      dc.bucket_bytes = 4096;  // several buckets
      DataParallel store(layout, dcomm, dc, *be);
      std::vector<float> full(layout.total());
      for (size_t i = 0; i < full.size(); ++i) full[i] = 0.001f * static_cast<float>(i % 997);
      store.load_full_params(full.data());
      store.begin_step();
      store.begin_micro_batch(true);
      // The model's order: forward acquires, backward fills and reports each group.
      std::vector<int> groups;
      for (int g = 0; g < layout.num_groups(); ++g) {
        if (layout.has_group(g)) groups.push_back(g);
      }
      for (int g : groups) {
        const float* p = store.acquire(g).as_f32();
        auto [b, e] = layout.group_range(g);
        for (int64_t i = b; i < e; ++i) ASSERT_EQ(p[i - b], full[i]) << "zero " << zero << " group " << g;
        store.release(g);
      }
      for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
        const int g = *it;
        float* gr = store.grads(g);
        auto [b, e] = layout.group_range(g);
        for (int64_t i = b; i < e; ++i) gr[i - b] += static_cast<float>(i);  // gradient = flat index
        store.ready(g);
      }
      store.finish_step_gradients();
      const float* og = store.opt_grads();
      for (int64_t i = store.opt_begin(); i < store.opt_end(); ++i) {
        ASSERT_EQ(og[i - store.opt_begin()], static_cast<float>(i)) << "zero " << zero << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace weft
