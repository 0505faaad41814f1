#include "comm/device_comm.h"

#include <array>
#include <exception>
#include <initializer_list>
#include <optional>

#include "comm/comm_detail.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/log.h"

namespace weft {

namespace {

size_t bytes_of(int64_t count, CommDType t) { return static_cast<size_t>(count) * comm_dtype_size(t); }

// Host views of the device ranges of one call (at most two: send and receive). Each range
// that does not lie inside another one is a root: the device memory itself when the backend
// grants direct host access, otherwise a staging buffer (kComm) filled from the device where
// the call reads it. A range inside a root (an in-place call) is viewed inside the root's
// view. Not movable: the access scopes and the staging buffers stay where the transport
// was told they are.
class HostViews {
 public:
  explicit HostViews(Backend& be) : be_(be) {}
  HostViews(const HostViews&) = delete;
  HostViews& operator=(const HostViews&) = delete;

  // A device range the call reads and/or writes; returns its index for host().
  int add(const void* p, size_t bytes, bool read, bool write) {
    WEFT_CHECK(n_ < static_cast<int>(v_.size()), "DeviceCommunicator: more than {} buffers in one call", v_.size());
    View& v = v_[static_cast<size_t>(n_)];
    v.p = static_cast<char*>(const_cast<void*>(p));
    v.bytes = bytes;
    v.read = read;
    v.write = write;
    return n_++;
  }

  // Opens every range (after every add): direct access, or staging filled where read.
  void open() {
    for (int i = 0; i < n_; ++i) v_[static_cast<size_t>(i)].parent = parent_of(i);
    for (int i = 0; i < n_; ++i) {
      View& r = v_[static_cast<size_t>(i)];
      if (r.parent >= 0) continue;
      r.access.emplace(be_, r.p, r.bytes);
      if (r.access->direct()) {
        r.host = r.p;
        continue;
      }
      r.stage.set_category(MemCategory::kComm);
      r.stage.resize(r.bytes);
      r.host = reinterpret_cast<char*>(r.stage.data());
      if (r.read) {
        be_.copy_to_host(r.host, r.p, 0, r.bytes);
        continue;
      }
      for (int j = 0; j < n_; ++j) {  // only the parts that a range inside it reads
        const View& c = v_[static_cast<size_t>(j)];
        if (c.parent == i && c.read) be_.copy_to_host(r.host + (c.p - r.p), c.p, 0, c.bytes);
      }
    }
    for (int i = 0; i < n_; ++i) {
      View& c = v_[static_cast<size_t>(i)];
      if (c.parent >= 0) {
        const View& r = v_[static_cast<size_t>(c.parent)];
        c.host = r.host + (c.p - r.p);
      }
    }
  }

  void* host(int i) const { return v_[static_cast<size_t>(i)].host; }

  // Copies what the call wrote back to the device (staged ranges only).
  void write_back() {
    for (int i = 0; i < n_; ++i) {
      const View& c = v_[static_cast<size_t>(i)];
      if (!c.write || c.bytes == 0) continue;
      const View& r = c.parent >= 0 ? v_[static_cast<size_t>(c.parent)] : c;
      if (r.access->direct()) continue;
      if (c.parent >= 0 && r.write) continue;  // the root's copy covers it
      be_.copy_to_device(c.p, 0, c.host, c.bytes);
    }
  }

 private:
  struct View {
    char* p = nullptr;
    size_t bytes = 0;
    bool read = false, write = false;
    int parent = -1;  // the range this one lies inside, or -1 (a root)
    std::optional<HostAccess> access;  // roots
    Buffer<uint8_t> stage;             // roots whose access was refused
    char* host = nullptr;
  };

  // The range that range i lies inside (identical ranges: the first one), or -1.
  int parent_of(int i) const {
    const View& c = v_[static_cast<size_t>(i)];
    if (c.bytes == 0) return -1;
    for (int j = 0; j < n_; ++j) {
      const View& r = v_[static_cast<size_t>(j)];
      if (j == i || r.bytes == 0 || c.p < r.p || c.p + c.bytes > r.p + r.bytes) continue;
      const bool same = c.p == r.p && c.bytes == r.bytes;
      if (!same || j < i) return j;
    }
    return -1;
  }

  Backend& be_;
  std::array<View, 2> v_;
  int n_ = 0;
};

using Views = std::unique_ptr<HostViews>;

// Runs a blocking host call on opened views, then copies back. If the call fails, the views
// are leaked: the transport may still write into them.
template <typename F>
void run_blocking(Views v, F&& call) {
  v->open();
  try {
    call(*v);
  } catch (...) {
    (void)v.release();
    throw;
  }
  v->write_back();
}

// The handle of an asynchronous call: the host handle plus the views, copied back and
// released when the call completes.
class DeviceRequest final : public CommRequest {
 public:
  DeviceRequest(Views views, CommHandle inner) : views_(std::move(views)), inner_(std::move(inner)) {}
  ~DeviceRequest() override {
    if (done_) return;
    if (!failed_ && std::uncaught_exceptions() == 0) {
      try {
        wait();
        return;
      } catch (const std::exception& e) {
        log_warn("{} (while destroying its handle; its buffers are left to the transport)", e.what());
      }
    }
    inner_.reset();             // the host handle waits or gives the operation up
    (void)views_.release();     // the transport may still write into them
  }
  void wait() override {
    if (done_) return;
    try {
      inner_->wait();
    } catch (...) {
      failed_ = true;
      throw;
    }
    finish();
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    done_ = true;
    views_->write_back();
    views_.reset();
  }

  Views views_;
  CommHandle inner_;
  bool done_ = false, failed_ = false;
};

// Posts an asynchronous host call on opened views. If posting fails nothing is in flight.
template <typename F>
CommHandle run_async(Views v, F&& post) {
  v->open();
  CommHandle inner = post(*v);
  return std::make_unique<DeviceRequest>(std::move(v), std::move(inner));
}

// Groups of one rank. Every collective is the identity on its data there, so nothing needs
// to leave the device: no host access (no synchronize), no staging copies (on cuda with
// --comm mpi a one-rank dp group would otherwise copy every gradient to the host and back
// each step). one_rank() checks what the staging path's HostAccess checks (every buffer of a
// non-empty call is device memory of the backend), copies recv <- send on the device where
// they differ (the one block of a scatter or gather; send null: nothing moves), and begins
// the call's trace as the host communicator would (kind, axis, bytes, group), so traces and
// the communication model (plan/comm_model.h) see the same calls whatever the backend.
detail::CallTrace one_rank(Backend& be, Communicator& host, const char* kind, size_t bytes, const void* send,
                           void* recv, bool async) {
  for (const void* p : {send, static_cast<const void*>(recv)}) {
    if (bytes > 0 && p != nullptr && !be.is_device_memory(p))
      throw_runtime("DeviceCommunicator: {} on a buffer at {} that is not device memory of backend '{}'", kind, p,
                    be.name());
  }
  if (send != nullptr && send != recv && bytes > 0) be.copy_device(recv, 0, send, 0, bytes);
  detail::CallTrace tr;
  tr.begin(host.tracer(), kind, host.axis(), static_cast<int64_t>(bytes), detail::group_label(host.world_ranks()),
           async);
  return tr;
}

// The handle of an asynchronous call on one rank: complete when posted; its trace event is
// recorded when the completion is observed (wait, test, or destruction), as the host
// communicators do.
class LocalRequest final : public CommRequest {
 public:
  explicit LocalRequest(detail::CallTrace tr) : tr_(std::move(tr)) {}
  ~LocalRequest() override { tr_.finish(); }
  void wait() override { tr_.finish(); }
  bool test() override {
    tr_.finish();
    return true;
  }

 private:
  detail::CallTrace tr_;
};

}  // namespace

DeviceCommunicator::DeviceCommunicator(Communicator& host, Backend& be) : host_(host), be_(be) {}

DeviceCommunicator::DeviceCommunicator(std::unique_ptr<Communicator> host, Backend& be)
    : owned_(std::move(host)), host_(*owned_), be_(be) {}

DeviceCommunicator::~DeviceCommunicator() = default;

// --- blocking ---

void DeviceCommunicator::all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) {
  detail::check_count(count, "all_reduce");
  if (size() == 1) return one_rank(be_, host_, "all_reduce", bytes_of(count, t), nullptr, buf, false).finish();
  auto v = std::make_unique<HostViews>(be_);
  const int b = v->add(buf, bytes_of(count, t), true, true);
  run_blocking(std::move(v), [&](HostViews& h) { host_.all_reduce(h.host(b), count, t, op); });
}

void DeviceCommunicator::reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) {
  detail::check_count(count, "reduce_scatter");
  if (size() == 1) return one_rank(be_, host_, "reduce_scatter", bytes_of(count, t), send, recv, false).finish();
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(count * size(), t), true, false);
  const int r = v->add(recv, bytes_of(count, t), false, true);
  run_blocking(std::move(v), [&](HostViews& h) { host_.reduce_scatter(h.host(s), h.host(r), count, t, op); });
}

void DeviceCommunicator::reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                          CommDType t, ReduceOp op) {
  const int64_t total = detail::checked_total(counts, size(), "reduce_scatter_v");
  if (size() == 1) return one_rank(be_, host_, "reduce_scatter", bytes_of(total, t), send, recv, false).finish();
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(total, t), true, false);
  const int r = v->add(recv, bytes_of(counts[static_cast<size_t>(rank())], t), false, true);
  run_blocking(std::move(v), [&](HostViews& h) { host_.reduce_scatter_v(h.host(s), h.host(r), counts, t, op); });
}

void DeviceCommunicator::all_gather(const void* send, void* recv, int64_t count, CommDType t) {
  detail::check_count(count, "all_gather");
  if (size() == 1) return one_rank(be_, host_, "all_gather", bytes_of(count, t), send, recv, false).finish();
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(count, t), true, false);
  const int r = v->add(recv, bytes_of(count * size(), t), false, true);
  run_blocking(std::move(v), [&](HostViews& h) { host_.all_gather(h.host(s), h.host(r), count, t); });
}

void DeviceCommunicator::all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                      CommDType t) {
  const int64_t total = detail::checked_total(counts, size(), "all_gather_v");
  if (size() == 1) return one_rank(be_, host_, "all_gather", bytes_of(total, t), send, recv, false).finish();
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(counts[static_cast<size_t>(rank())], t), true, false);
  const int r = v->add(recv, bytes_of(total, t), false, true);
  run_blocking(std::move(v), [&](HostViews& h) { host_.all_gather_v(h.host(s), h.host(r), counts, t); });
}

void DeviceCommunicator::broadcast(void* buf, int64_t count, CommDType t, int root) {
  detail::check_count(count, "broadcast");
  if (size() == 1 && root == 0)
    return one_rank(be_, host_, "broadcast", bytes_of(count, t), nullptr, buf, false).finish();
  const bool mine = rank() == root;
  auto v = std::make_unique<HostViews>(be_);
  const int b = v->add(buf, bytes_of(count, t), mine, !mine);
  run_blocking(std::move(v), [&](HostViews& h) { host_.broadcast(h.host(b), count, t, root); });
}

// send (row rank()) and recv (column rank()) do not overlap: two roots, staged or opened apart.
void DeviceCommunicator::all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                      CommDType t) {
  const detail::AllToAllCounts m = detail::checked_matrix(counts, size(), rank(), "all_to_all_v");
  if (size() == 1) return one_rank(be_, host_, "all_to_all", bytes_of(m.total, t), send, recv, false).finish();
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(m.send_total, t), true, false);
  const int r = v->add(recv, bytes_of(m.recv_total, t), false, true);
  run_blocking(std::move(v), [&](HostViews& h) { host_.all_to_all_v(h.host(s), h.host(r), counts, t); });
}

void DeviceCommunicator::send(const void* buf, int64_t count, CommDType t, int peer, int tag) {
  detail::check_count(count, "send");
  auto v = std::make_unique<HostViews>(be_);
  const int b = v->add(buf, bytes_of(count, t), true, false);
  run_blocking(std::move(v), [&](HostViews& h) { host_.send(h.host(b), count, t, peer, tag); });
}

void DeviceCommunicator::recv(void* buf, int64_t count, CommDType t, int peer, int tag) {
  detail::check_count(count, "recv");
  auto v = std::make_unique<HostViews>(be_);
  const int b = v->add(buf, bytes_of(count, t), false, true);
  run_blocking(std::move(v), [&](HostViews& h) { host_.recv(h.host(b), count, t, peer, tag); });
}

void DeviceCommunicator::barrier() { host_.barrier(); }

// --- asynchronous ---

CommHandle DeviceCommunicator::iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) {
  detail::check_count(count, "iall_reduce");
  if (size() == 1)
    return std::make_unique<LocalRequest>(one_rank(be_, host_, "all_reduce", bytes_of(count, t), nullptr, buf, true));
  auto v = std::make_unique<HostViews>(be_);
  const int b = v->add(buf, bytes_of(count, t), true, true);
  return run_async(std::move(v), [&](HostViews& h) { return host_.iall_reduce(h.host(b), count, t, op); });
}

CommHandle DeviceCommunicator::ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                                 CommDType t, ReduceOp op) {
  const int64_t total = detail::checked_total(counts, size(), "ireduce_scatter_v");
  if (size() == 1)
    return std::make_unique<LocalRequest>(one_rank(be_, host_, "reduce_scatter", bytes_of(total, t), send, recv, true));
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(total, t), true, false);
  const int r = v->add(recv, bytes_of(counts[static_cast<size_t>(rank())], t), false, true);
  return run_async(std::move(v),
                   [&](HostViews& h) { return host_.ireduce_scatter_v(h.host(s), h.host(r), counts, t, op); });
}

CommHandle DeviceCommunicator::iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                             CommDType t) {
  const int64_t total = detail::checked_total(counts, size(), "iall_gather_v");
  if (size() == 1)
    return std::make_unique<LocalRequest>(one_rank(be_, host_, "all_gather", bytes_of(total, t), send, recv, true));
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(counts[static_cast<size_t>(rank())], t), true, false);
  const int r = v->add(recv, bytes_of(total, t), false, true);
  return run_async(std::move(v), [&](HostViews& h) { return host_.iall_gather_v(h.host(s), h.host(r), counts, t); });
}

CommHandle DeviceCommunicator::iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                             CommDType t) {
  const detail::AllToAllCounts m = detail::checked_matrix(counts, size(), rank(), "iall_to_all_v");
  if (size() == 1)
    return std::make_unique<LocalRequest>(one_rank(be_, host_, "all_to_all", bytes_of(m.total, t), send, recv, true));
  auto v = std::make_unique<HostViews>(be_);
  const int s = v->add(send, bytes_of(m.send_total, t), true, false);
  const int r = v->add(recv, bytes_of(m.recv_total, t), false, true);
  return run_async(std::move(v), [&](HostViews& h) { return host_.iall_to_all_v(h.host(s), h.host(r), counts, t); });
}

CommHandle DeviceCommunicator::isend(const void* buf, int64_t count, CommDType t, int peer, int tag) {
  detail::check_count(count, "isend");
  auto v = std::make_unique<HostViews>(be_);
  const int b = v->add(buf, bytes_of(count, t), true, false);
  return run_async(std::move(v), [&](HostViews& h) { return host_.isend(h.host(b), count, t, peer, tag); });
}

CommHandle DeviceCommunicator::irecv(void* buf, int64_t count, CommDType t, int peer, int tag) {
  detail::check_count(count, "irecv");
  auto v = std::make_unique<HostViews>(be_);
  const int b = v->add(buf, bytes_of(count, t), false, true);
  return run_async(std::move(v), [&](HostViews& h) { return host_.irecv(h.host(b), count, t, peer, tag); });
}

void DeviceCommunicator::progress() { host_.progress(); }

std::unique_ptr<Communicator> DeviceCommunicator::split(int color, int key, const std::string& axis) {
  return std::make_unique<DeviceCommunicator>(host_.split(color, key, axis), be_);
}

void DeviceCommunicator::set_timeout(std::chrono::milliseconds t) { host_.set_timeout(t); }

void DeviceCommunicator::set_tracer(Tracer* tracer) { host_.set_tracer(tracer); }

std::unique_ptr<DeviceComm> split_device_comm(DeviceComm& comm, int color, int key, const std::string& axis) {
  std::unique_ptr<Communicator> c = comm.split(color, key, axis);
  auto* d = dynamic_cast<DeviceComm*>(c.get());
  WEFT_CHECK(d != nullptr, "a split of the device communicator on axis {} is not a device communicator", comm.axis());
  c.release();
  return std::unique_ptr<DeviceComm>(d);
}

}  // namespace weft
