// The engine's interleaved pipeline over a device communicator that, like NCCL, matches
// point-to-point operations in posting order (DeviceCommInfo::posting_order_p2p): registered
// here for the cpu backend as NCCL's rules emulated over MPI (nccl_p2p_emulation.h: no tags,
// rendezvous sends, groups started when waited for). The engine once refused this pairing
// (the interleaved exchanges deadlocked); now it must run, and give bitwise the losses,
// gradient norms, parameters and AdamW moments of the same engine over "mpi", which matches by tag: the
// order of posting changes no arithmetic.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "model/gpt/gpt_config.h"
#include "nccl_p2p_emulation.h"
#include "backend/backend.h"
#include "comm/device_comm.h"
#include "comm/device_comm_registry.h"
#include "data/token_batch.h"
#include "engine/engine.h"
#include "model/config.h"

namespace weft {
namespace {

// NcclP2pEmulation as a device communicator of the cpu backend (whose device memory is host
// memory, so the emulation moves it in place).
class EmulatedNcclDeviceComm final : public DeviceComm {
 public:
  EmulatedNcclDeviceComm(Communicator& host, Backend& be) : host_(host), be_(be), nccl_(host) {}

  Communicator& host() const override { return host_; }
  Backend& backend() const override { return be_; }
  int rank() const override { return nccl_.rank(); }
  int size() const override { return nccl_.size(); }
  const std::string& axis() const override { return nccl_.axis(); }
  const std::vector<int>& world_ranks() const override { return nccl_.world_ranks(); }
  void all_reduce(void* buf, int64_t n, CommDType t, ReduceOp op) override { nccl_.all_reduce(buf, n, t, op); }
  void reduce_scatter(const void* s, void* r, int64_t n, CommDType t, ReduceOp op) override {
    nccl_.reduce_scatter(s, r, n, t, op);
  }
  void reduce_scatter_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t, ReduceOp op) override {
    nccl_.reduce_scatter_v(s, r, c, t, op);
  }
  void all_gather(const void* s, void* r, int64_t n, CommDType t) override { nccl_.all_gather(s, r, n, t); }
  void all_gather_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override {
    nccl_.all_gather_v(s, r, c, t);
  }
  void broadcast(void* buf, int64_t n, CommDType t, int root) override { nccl_.broadcast(buf, n, t, root); }
  void all_to_all_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override {
    nccl_.all_to_all_v(s, r, c, t);
  }
  void send(const void* buf, int64_t n, CommDType t, int peer, int tag) override { nccl_.send(buf, n, t, peer, tag); }
  void recv(void* buf, int64_t n, CommDType t, int peer, int tag) override { nccl_.recv(buf, n, t, peer, tag); }
  void barrier() override { nccl_.barrier(); }
  CommHandle iall_reduce(void* buf, int64_t n, CommDType t, ReduceOp op) override {
    return nccl_.iall_reduce(buf, n, t, op);
  }
  CommHandle ireduce_scatter_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t,
                               ReduceOp op) override {
    return nccl_.ireduce_scatter_v(s, r, c, t, op);
  }
  CommHandle iall_gather_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override {
    return nccl_.iall_gather_v(s, r, c, t);
  }
  CommHandle iall_to_all_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override {
    return nccl_.iall_to_all_v(s, r, c, t);
  }
  CommHandle isend(const void* buf, int64_t n, CommDType t, int peer, int tag) override {
    return nccl_.isend(buf, n, t, peer, tag);
  }
  CommHandle irecv(void* buf, int64_t n, CommDType t, int peer, int tag) override {
    return nccl_.irecv(buf, n, t, peer, tag);
  }
  void progress() override { nccl_.progress(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override {
    return nccl_.split(color, key, axis);
  }
  void set_timeout(std::chrono::milliseconds t) override { nccl_.set_timeout(t); }
  std::chrono::milliseconds timeout() const override { return nccl_.timeout(); }
  void set_tracer(Tracer* tracer) override { nccl_.set_tracer(tracer); }
  Tracer* tracer() const override { return nccl_.tracer(); }

 private:
  Communicator& host_;
  Backend& be_;
  test::NcclP2pEmulation nccl_;
};

constexpr const char* kEmulatedNccl = "test-emulated-nccl";

void register_emulated_nccl() {
  register_device_comm(kEmulatedNccl, {{"cpu"}, false, true},
                       [](Communicator& host, Backend& be) -> std::unique_ptr<DeviceComm> {
                         return std::make_unique<EmulatedNcclDeviceComm>(host, be);
                       });
}

struct RunResult {
  std::vector<StepResult> steps;
  std::vector<float> state;  // parameters, then the two AdamW moments (whole model)
};

// Three steps of a 4-layer model on pp 2 x dp world/2, interleaved with v 2 and m micro-batches
// per dp rank, over device communicator `comm`.
RunResult train(const std::string& comm, int m) {
  std::unique_ptr<Communicator> world = test::fresh_world();
  const int dp = world->size() / 2;
  EngineConfig cfg;
  cfg.model = make_model_config("pp-test", 4, 2, 32, 16, 96);
  cfg.seq = 16;
  cfg.layout.micro_batch = 1;
  cfg.global_batch = m * dp;
  cfg.layout.pp = 2, cfg.layout.dp = dp;
  cfg.layout.schedule = PipeSchedule::kInterleaved;
  cfg.layout.virtual_stages = 2;
  cfg.comm = comm;
  auto be = make_cpu_backend();
  Engine engine(cfg, *world, *be);
  engine.init_params(1234);
  RunResult out;
  const TokenBatchFn batch = [&](int64_t first, int64_t count, int32_t* inputs, int32_t* targets) {
    for (int64_t i = 0; i < count * cfg.seq; ++i) {
      const int64_t row = first + i / cfg.seq, t = i % cfg.seq;
      inputs[i] = static_cast<int32_t>((row * 31 + t * 7 + static_cast<int64_t>(out.steps.size()) * 5) % 96);
      targets[i] = static_cast<int32_t>((inputs[i] * 3 + 1) % 96);
    }
  };
  for (int step = 0; step < 3; ++step) out.steps.push_back(engine.step(1e-2f, token_batches(batch)));
  const size_t n = static_cast<size_t>(engine.whole_layout().total());
  out.state.resize(3 * n);
  engine.gather_state(out.state.data(), out.state.data() + n, out.state.data() + 2 * n);
  return out;
}

void expect_same_run(int m) {
  if (test::mpi_world().size() % 2 != 0) GTEST_SKIP() << "pp 2 x dp needs an even world, not " << test::mpi_world().size();
  register_emulated_nccl();
  const RunResult mpi = train("mpi", m);
  const RunResult nccl = train(kEmulatedNccl, m);
  ASSERT_EQ(nccl.steps.size(), mpi.steps.size());
  for (size_t s = 0; s < mpi.steps.size(); ++s) {
    EXPECT_EQ(nccl.steps[s].loss, mpi.steps[s].loss) << "step " << s;
    EXPECT_EQ(nccl.steps[s].grad_norm, mpi.steps[s].grad_norm) << "step " << s;
  }
  ASSERT_EQ(nccl.state.size(), mpi.state.size());
  for (size_t i = 0; i < mpi.state.size(); ++i) ASSERT_EQ(nccl.state[i], mpi.state[i]) << "state value " << i;
  EXPECT_GT(mpi.steps.back().loss, 0.0);
}

// m = 4 on 2 stages: warm-up, steady (forward, backward) pairs and cool-down.
TEST(EnginePostingOrder, InterleavedRunsAndMatchesMpiBitwise) { expect_same_run(4); }
// m = 2 = pp: every forward first (no steady pairs).
TEST(EnginePostingOrder, InterleavedAllForwardsFirstMatchesMpiBitwise) { expect_same_run(2); }

}  // namespace
}  // namespace weft
