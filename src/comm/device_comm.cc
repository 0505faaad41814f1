#include "comm/device_comm.h"

#include "core/buffer.h"

namespace weft {

namespace {

// A host view of a device range for one collective: the device memory itself when the
// backend grants direct access, otherwise a staging buffer (filled from the device when
// the collective reads it; written back by write_back when it writes it).
class HostView {
 public:
  HostView(Backend& be, const void* p, size_t bytes, bool read)
      : be_(be), p_(const_cast<void*>(p)), bytes_(bytes), access_(be, p_, bytes) {
    if (access_.direct()) return;
    stage_.set_category(MemCategory::kComm);
    stage_.resize(bytes_);
    if (read) be_.copy_to_host(stage_.data(), p_, 0, bytes_);
  }
  void* host() { return access_.direct() ? p_ : stage_.data(); }
  void write_back() {
    if (!access_.direct()) be_.copy_to_device(p_, 0, stage_.data(), bytes_);
  }

 private:
  Backend& be_;
  void* p_;
  size_t bytes_;
  HostAccess access_;
  Buffer<uint8_t> stage_;
};

size_t bytes_of(int64_t count, CommDType t) { return static_cast<size_t>(count) * comm_dtype_size(t); }

}  // namespace

void DeviceComm::all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) {
  HostView b(be_, buf, bytes_of(count, t), true);
  comm_.all_reduce(b.host(), count, t, op);
  b.write_back();
}

void DeviceComm::reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) {
  HostView s(be_, send, bytes_of(count * comm_.size(), t), true);
  HostView r(be_, recv, bytes_of(count, t), false);
  comm_.reduce_scatter(s.host(), r.host(), count, t, op);
  r.write_back();
}

void DeviceComm::all_gather(const void* send, void* recv, int64_t count, CommDType t) {
  HostView s(be_, send, bytes_of(count, t), true);
  HostView r(be_, recv, bytes_of(count * comm_.size(), t), false);
  comm_.all_gather(s.host(), r.host(), count, t);
  r.write_back();
}

void DeviceComm::broadcast(void* buf, int64_t count, CommDType t, int root) {
  HostView b(be_, buf, bytes_of(count, t), comm_.rank() == root);
  comm_.broadcast(b.host(), count, t, root);
  b.write_back();
}

}  // namespace weft
