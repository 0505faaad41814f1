// An owning handle of one device allocation (Backend::device_alloc): backend, pointer,
// dtype, element count and memory category. Movable, not copyable; frees on destruction.
// The bytes count in the process's MemoryTracker under the category while it lives.
//
//   DeviceBuffer w(be, DType::kF32, n, MemCategory::kParams);
//   w.upload(host);                         // std::vector<float> -> device
//   be.scale(w.data<float>(), 0.5f, n);     // ops take device pointers
//   std::vector<float> back = w.download<float>();
//
// data<T>() is the DEVICE pointer: only the backend may dereference it (cpu-guarded faults
// on any other access). T must have the dtype's element size (int4: uint8_t, two per byte).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace weft {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& be, DType dt, int64_t count, MemCategory c = MemCategory::kOther)
      : be_(&be), dt_(dt), count_(count), cat_(c), ptr_(be.device_alloc(dt, count, c)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { take(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  template <typename T>
  T* data() const {
    WEFT_CHECK(element_fits<T>(), "DeviceBuffer::data<T>: a {}-byte T over {} elements", sizeof(T),
               dtype_name(dt_));
    return static_cast<T*>(ptr_);
  }
  void* raw() const { return ptr_; }
  Backend* backend() const { return be_; }
  DType dtype() const { return dt_; }
  int64_t count() const { return count_; }
  size_t bytes() const { return dtype_bytes(dt_, count_); }
  MemCategory category() const { return cat_; }
  explicit operator bool() const { return ptr_ != nullptr; }

  // Elements [first, first + n) = value (n < 0: to the end).
  void fill(float value, int64_t first = 0, int64_t n = -1) {
    if (ptr_) be_->fill(ptr_, dt_, first, n < 0 ? count_ - first : n, value);
  }
  void zero() { fill(0.0f); }

  // Host -> device: v lands at element `first`.
  template <typename T>
  void upload(const std::vector<T>& v, int64_t first = 0) {
    check_range<T>(first, static_cast<int64_t>(v.size()));
    be_->copy_to_device(ptr_, offset<T>(first), v.data(), v.size() * sizeof(T));
  }
  // Device -> host: n elements from element `first` (n < 0: to the end).
  template <typename T>
  std::vector<T> download(int64_t first = 0, int64_t n = -1) const {
    if (n < 0) n = static_cast<int64_t>(bytes() / sizeof(T)) - first;
    check_range<T>(first, n);
    std::vector<T> v(static_cast<size_t>(n));
    be_->copy_to_host(v.data(), ptr_, offset<T>(first), v.size() * sizeof(T));
    return v;
  }
  // Device -> device within one backend: n bytes from src at src_offset to dst_offset.
  void copy_from(const DeviceBuffer& src, size_t n, size_t dst_offset = 0, size_t src_offset = 0) {
    WEFT_CHECK(src.be_ == be_, "copy_from: buffers of two backends ({} and {})", be_->name(), src.be_->name());
    WEFT_CHECK(dst_offset + n <= bytes() && src_offset + n <= src.bytes(),
               "copy_from: {} bytes at {} of {} from {} of {}", n, dst_offset, bytes(), src_offset, src.bytes());
    be_->copy_device(ptr_, dst_offset, src.ptr_, src_offset, n);
  }

 private:
  template <typename T>
  bool element_fits() const {
    return dt_ == DType::kI4 ? sizeof(T) == 1 : sizeof(T) * 8 == static_cast<size_t>(dtype_bits(dt_));
  }
  template <typename T>
  size_t offset(int64_t first) const {
    return static_cast<size_t>(first) * sizeof(T);
  }
  template <typename T>
  void check_range(int64_t first, int64_t n) const {
    WEFT_CHECK(element_fits<T>() && first >= 0 && n >= 0 && (first + n) * sizeof(T) <= bytes(),
               "DeviceBuffer: {} elements of {} bytes at {} in a {} buffer of {} bytes", n, sizeof(T), first,
               dtype_name(dt_), bytes());
  }
  void take(DeviceBuffer& o) {
    be_ = o.be_;
    dt_ = o.dt_;
    count_ = std::exchange(o.count_, 0);
    cat_ = o.cat_;
    ptr_ = std::exchange(o.ptr_, nullptr);
  }
  void release() noexcept {
    if (ptr_) be_->device_free(ptr_, dt_, count_, cat_);
    ptr_ = nullptr;
    count_ = 0;
  }

  Backend* be_ = nullptr;
  DType dt_ = DType::kF32;
  int64_t count_ = 0;
  MemCategory cat_ = MemCategory::kOther;
  void* ptr_ = nullptr;
};

// A device copy of a host vector (dtype dt must match T's size).
template <typename T>
DeviceBuffer to_device(Backend& be, const std::vector<T>& v, DType dt, MemCategory c = MemCategory::kOther) {
  DeviceBuffer d(be, dt, static_cast<int64_t>(v.size()), c);
  d.upload(v);
  return d;
}

}  // namespace weft
