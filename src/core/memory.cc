#include "core/memory.h"

#include <malloc.h>

#include <cstdlib>

namespace weft {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams: return "params";
    case MemCategory::kGrads: return "grads";
    case MemCategory::kOptimizer: return "optimizer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kWorkspace: return "workspace";
    case MemCategory::kComm: return "comm";
    case MemCategory::kOther: return "other";
  }
  return "?";
}

namespace {
void raise_peak(std::atomic<int64_t>& peak, int64_t v) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}
}  // namespace

void MemoryTracker::add(MemCategory c, int64_t bytes) {
  const int i = static_cast<int>(c);
  raise_peak(peak_[i], cur_[i].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_peak(total_peak_, total_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemoryTracker::sub(MemCategory c, int64_t bytes) {
  cur_[static_cast<int>(c)].fetch_sub(bytes, std::memory_order_relaxed);
  total_.fetch_sub(bytes, std::memory_order_relaxed);
}

MemorySnapshot MemoryTracker::snapshot() const {
  MemorySnapshot s;
  for (int i = 0; i < kMemCategories; ++i) {
    s.current[i] = cur_[i].load(std::memory_order_relaxed);
    s.peak[i] = peak_[i].load(std::memory_order_relaxed);
  }
  s.total_current = total_.load(std::memory_order_relaxed);
  s.total_peak = total_peak_.load(std::memory_order_relaxed);
  return s;
}

void MemoryTracker::reset_peaks() {
  for (int i = 0; i < kMemCategories; ++i) peak_[i].store(cur_[i].load());
  total_peak_.store(total_.load());
}

MemoryTracker& memory_tracker() {
  static MemoryTracker t;
  return t;
}

void keep_large_buffers_mapped() {
  const char* v = std::getenv("WEFT_MALLOC_DEFAULTS");
  if (v != nullptr && *v != '\0' && *v != '0') return;
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace weft
