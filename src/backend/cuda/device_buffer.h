// An owning buffer of device memory (cudaMalloc / cudaFree) that counts its bytes in the
// process's MemoryTracker under its category (core/memory.h), like core/buffer.h does for
// host memory. Not zero-initialised unless asked. Copies to and from the host go through
// the helpers below (synchronous unless named _async; an async copy from pageable host
// memory is staged by the driver and only overlaps compute from pinned memory).
//
//   DeviceBuffer<float> w(n, MemCategory::kParams);           // fp32 master weights
//   DeviceBuffer<cuda::bf16> w16(n, MemCategory::kParams);     // bf16 compute copy
//   to_device(w, host.data(), n);  from_device(host.data(), w, n);
#pragma once
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cuda/gpu_runtime.h"
#include "core/error.h"
#include "core/memory.h"

namespace weft::cuda {

template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n, MemCategory c = MemCategory::kOther, bool zero = false) : cat_(c) {
    resize(n, zero);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), cat_(o.cat_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      cat_ = o.cat_;
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void set_category(MemCategory c) {
    if (c == cat_) return;
    memory_tracker().sub(cat_, static_cast<int64_t>(bytes()));
    cat_ = c;
    memory_tracker().add(cat_, static_cast<int64_t>(bytes()));
  }
  MemCategory category() const { return cat_; }

  // Reallocates (contents are not kept). Work queued on a stream that still uses the old
  // memory must be finished or ordered before (cudaFree synchronises the device).
  void resize(size_t n, bool zero = false) {
    release();
    if (n == 0) return;
    data_ = static_cast<T*>(gpu::device_malloc(n * sizeof(T)));
    size_ = n;
    memory_tracker().add(cat_, static_cast<int64_t>(bytes()));
    if (zero) this->zero();
  }
  // Grows to at least n elements (contents are not kept when it grows).
  void reserve(size_t n) {
    if (n > size_) resize(n);
  }
  void zero(gpu::Stream s = nullptr) {
    if (size_ == 0) return;
    gpu::memset_async(data_, 0, bytes(), s);
    if (s == nullptr) gpu::stream_sync(nullptr);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  void release() {
    if (size_) memory_tracker().sub(cat_, static_cast<int64_t>(bytes()));
    gpu::device_free(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  MemCategory cat_ = MemCategory::kOther;
};

// Host <-> device copies of n elements (synchronous on stream s).
template <typename T>
void to_device(DeviceBuffer<T>& dst, const T* src, size_t n, gpu::Stream s = nullptr) {
  WEFT_CHECK(n <= dst.size(), "to_device: {} elements into a device buffer of {}", n, dst.size());
  gpu::copy_h2d(dst.data(), src, n * sizeof(T), s);
}
template <typename T>
void from_device(T* dst, const DeviceBuffer<T>& src, size_t n, gpu::Stream s = nullptr) {
  WEFT_CHECK(n <= src.size(), "from_device: {} elements from a device buffer of {}", n, src.size());
  gpu::copy_d2h(dst, src.data(), n * sizeof(T), s);
}
template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& v, MemCategory c = MemCategory::kOther) {
  DeviceBuffer<T> d(v.size(), c);
  gpu::copy_h2d(d.data(), v.data(), v.size() * sizeof(T));
  return d;
}
template <typename T>
std::vector<T> download(const T* src, size_t n, gpu::Stream s = nullptr) {
  std::vector<T> v(n);
  gpu::copy_d2h(v.data(), src, n * sizeof(T), s);
  return v;
}

}  // namespace weft::cuda
