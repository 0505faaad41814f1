// The device contract's non-virtual entry points and its host-memory defaults (backend.h).
#include "backend/backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace weft {

namespace {

// Writes the element pattern pat (len bytes) over bytes of dst, repeated.
void fill_pattern(uint8_t* dst, const uint8_t* pat, int len, size_t bytes) {
  if (len == 1 || std::all_of(pat, pat + len, [&](uint8_t b) { return b == pat[0]; })) {
    std::memset(dst, pat[0], bytes);
    return;
  }
  for (size_t i = 0; i < bytes; i += static_cast<size_t>(len)) std::memcpy(dst + i, pat, static_cast<size_t>(len));
}

}  // namespace

void Backend::set_products(const ProductSettings& s) {
  if (!s.fp32_kernel.empty()) {
    throw_input("backend {} has one fp32 matrix product, not a choice: fp32 kernel '{}' is not one of its names",
                name(), s.fp32_kernel);
  }
  products_ = s;
}

void* Backend::device_alloc(DType dt, int64_t count, MemCategory c) {
  WEFT_CHECK(count >= 0, "{}: device_alloc of {} elements", name(), count);
  if (count == 0) return nullptr;
  const size_t bytes = dtype_bytes(dt, count);
  void* p = device_alloc_impl(bytes, c);
  memory_tracker().add(c, static_cast<int64_t>(bytes));
  return p;
}

void Backend::device_free(void* p, DType dt, int64_t count, MemCategory c) noexcept {
  if (p == nullptr) return;
  const size_t bytes = dtype_bytes(dt, count);
  device_free_impl(p, bytes);
  memory_tracker().sub(c, static_cast<int64_t>(bytes));
}

void* Backend::device_alloc_impl(size_t bytes, MemCategory c) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw_runtime("{}: cannot allocate {} bytes of {} memory", name(), bytes, mem_category_name(c));
  return p;
}

void Backend::device_free_impl(void* p, size_t bytes) noexcept { std::free(p); }

void Backend::copy_to_device(void* dst, size_t dst_offset, const void* src, size_t bytes) {
  if (bytes) std::memcpy(static_cast<char*>(dst) + dst_offset, src, bytes);
}

void Backend::copy_to_host(void* dst, const void* src, size_t src_offset, size_t bytes) {
  if (bytes) std::memcpy(dst, static_cast<const char*>(src) + src_offset, bytes);
}

void Backend::copy_device(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) {
  if (bytes) std::memcpy(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, bytes);
}

void Backend::copy_device_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                             size_t rows) {
  for (size_t i = 0; i < rows; ++i) copy_device(dst, i * dst_pitch, src, i * src_pitch, width);
}

void Backend::fill(void* dst, DType dt, int64_t first, int64_t count, float value) {
  WEFT_CHECK(first >= 0 && count >= 0, "{}: fill of [{}, {} + {})", name(), first, first, count);
  WEFT_CHECK(dt != DType::kI4 || (first % 2 == 0 && count % 2 == 0),
             "{}: an int4 fill needs whole bytes (first {}, count {})", name(), first, count);
  uint8_t pat[4];
  const int len = encode_element(dt, value, pat);
  const size_t offset = dtype_bytes(dt, first), bytes = dtype_bytes(dt, count);
  if (bytes == 0) return;
  uint8_t* range = static_cast<uint8_t*>(dst) + offset;
  HostAccess access(*this, range, bytes);
  if (access.direct()) {
    fill_pattern(range, pat, len, bytes);
    return;
  }
  constexpr size_t kStage = size_t{1} << 20;  // a multiple of every element size
  std::vector<uint8_t> stage(std::min(bytes, kStage));
  fill_pattern(stage.data(), pat, len, stage.size());
  for (size_t done = 0; done < bytes; done += stage.size()) {
    copy_to_device(dst, offset + done, stage.data(), std::min(stage.size(), bytes - done));
  }
}

}  // namespace weft
