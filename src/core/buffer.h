// An owning, 64-byte aligned buffer of trivially copyable elements. Not zero-initialised
// unless asked: weft writes every element before reading it, and avoids needless fills.
// Every buffer counts its bytes in the process's MemoryTracker under its category
// (core/memory.h; `other` unless given).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "core/memory.h"

namespace weft {

template <typename T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  Buffer() = default;
  explicit Buffer(size_t n, bool zero = false) { resize(n, zero); }
  Buffer(size_t n, MemCategory c, bool zero = false) : cat_(c) { resize(n, zero); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), cat_(o.cat_) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      cat_ = o.cat_;
    }
    return *this;
  }
  ~Buffer() { release(); }

  // The category its bytes count under (applies to the current and later allocations).
  void set_category(MemCategory c) {
    if (c == cat_) return;
    memory_tracker().sub(cat_, static_cast<int64_t>(bytes()));
    cat_ = c;
    memory_tracker().add(cat_, static_cast<int64_t>(bytes()));
  }
  MemCategory category() const { return cat_; }

  // Reallocates (contents are not kept).
  void resize(size_t n, bool zero = false) {
    release();
    if (n == 0) return;
    size_ = n;
    memory_tracker().add(cat_, static_cast<int64_t>(bytes()));
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!data_) {
      release();
      throw std::bad_alloc();
    }
    if (zero) std::memset(data_, 0, n * sizeof(T));
  }
  void zero() {
    if (size_) std::memset(data_, 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  void release() {
    if (size_) memory_tracker().sub(cat_, static_cast<int64_t>(bytes()));
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  MemCategory cat_ = MemCategory::kOther;
};

}  // namespace weft
