// Memory accounting by category: every large buffer weft allocates (core/buffer.h) is
// registered here with its category, so that each process (one rank) knows, to the byte,
// where its memory goes: current and peak bytes per category and of their sum.
//
// Categories (the memory model in src/plan predicts the same ones):
//   params      parameters: whole, a ZeRO shard, ZeRO-3 gather buffers
//   grads       gradient accumulators and shards, ZeRO-2/3 transient gradient buffers
//   optimizer   AdamW moments (fp32 m and v over this rank's optimizer range)
//   activations activations stashed for the backward pass (per micro-batch in flight)
//   workspace   activation gradients and scratch of one micro-batch (shared by all in flight),
//               recompute buffers, head logits chunk
//   comm        communication buffers: DP buckets, pipeline send/receive buffers
//   other       everything else (checkpoint staging, data, tests)
// The tracker is per process, like the allocator it sits on: counting bytes is not parallel
// state, and a rank is a process.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace weft {

enum class MemCategory : int { kParams, kGrads, kOptimizer, kActivations, kWorkspace, kComm, kOther };
constexpr int kMemCategories = 7;
const char* mem_category_name(MemCategory c);  // "params", "grads", ...

struct MemorySnapshot {
  std::array<int64_t, kMemCategories> current{};
  std::array<int64_t, kMemCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;  // peak of the sum (not the sum of the peaks)
  int64_t operator[](MemCategory c) const { return current[static_cast<int>(c)]; }
  int64_t peak_of(MemCategory c) const { return peak[static_cast<int>(c)]; }
};

class MemoryTracker {
 public:
  void add(MemCategory c, int64_t bytes);
  void sub(MemCategory c, int64_t bytes);
  MemorySnapshot snapshot() const;
  // Peaks restart from the current values (e.g. after set-up, to see a step's peak).
  void reset_peaks();

 private:
  std::array<std::atomic<int64_t>, kMemCategories> cur_{};
  std::array<std::atomic<int64_t>, kMemCategories> peak_{};
  std::atomic<int64_t> total_{0}, total_peak_{0};
};

// The process's tracker.
MemoryTracker& memory_tracker();

// glibc serves allocations above its mmap threshold (at most 32 MiB) with fresh mappings and
// unmaps them at free, so a buffer allocated every step (MPI's collective temporaries: OpenMPI's
// non-blocking all-reduce copies its whole buffer; scratch of the libraries) faults its pages in
// again every time: a 54 MB all-reduce of 2 ranks took 33.7 ms against 18.1 ms with the memory
// kept. Keeps allocations below 1 GiB in the heap and the freed top of the heap mapped, so that
// a step reuses the last step's pages. Idempotent; WEFT_MALLOC_DEFAULTS=1 leaves glibc's
// defaults. weft's main calls it first.
void keep_large_buffers_mapped();

}  // namespace weft
