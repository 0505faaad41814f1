// Helpers shared by the Communicator implementations (self, mpi): tracing of one call and
// argument checks. Not part of the public interface.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/tracer.h"
#include "core/error.h"

namespace weft::detail {

// The trace of one call: begin() at post (a no-op when tracing is off), finish() once the
// completion is observed. finish() records at most once.
struct CallTrace {
  Tracer* tracer = nullptr;  // null: not traced
  TraceEvent ev;

  void begin(Tracer* t, const char* kind, const std::string& axis, int64_t bytes, const std::string& group,
             bool async) {
    if (t == nullptr || !t->enabled()) return;
    tracer = t;
    ev.kind = kind;
    ev.axis = axis;
    ev.bytes = bytes;
    ev.group = group;
    ev.async = async;
    ev.step = t->step();    // the step and phase the call was posted in (an asynchronous call
    ev.phase = t->phase();  // may complete in the next phase)
    ev.rel_err = t->take_call_error();
    ev.start_s = Tracer::now();
  }
  void finish() {
    if (tracer == nullptr) return;
    ev.duration_s = Tracer::now() - ev.start_s;
    tracer->record(std::move(ev));
    tracer = nullptr;
  }
};

inline std::string group_label(const std::vector<int>& world_ranks) {
  return "ranks " + format_ranks(world_ranks);
}

// Checks a per-rank count vector against the group size; returns the sum.
inline int64_t checked_total(const std::vector<int64_t>& counts, int group_size, const char* kind) {
  WEFT_CHECK(static_cast<int>(counts.size()) == group_size, "{}: {} counts given for a group of {} ranks", kind,
             counts.size(), group_size);
  int64_t total = 0;
  for (int64_t c : counts) {
    WEFT_CHECK(c >= 0, "{}: negative count {}", kind, c);
    total += c;
  }
  return total;
}

// The all_to_all_v count matrix (group_size x group_size, row major: counts[i * n + j] =
// elements rank i sends to rank j).
struct AllToAllCounts {
  int64_t total = 0;            // sum of the whole matrix
  int64_t send_total = 0;       // row `rank`: what this rank sends
  int64_t recv_total = 0;       // column `rank`: what this rank receives
};

// Checks the matrix against the group size (size()^2 entries, none negative); returns its sums.
inline AllToAllCounts checked_matrix(const std::vector<int64_t>& counts, int group_size, int rank, const char* kind) {
  const size_t n = static_cast<size_t>(group_size);
  WEFT_CHECK(counts.size() == n * n, "{}: {} counts given for a group of {} ranks (needs the {} x {} matrix: {})", kind,
             counts.size(), group_size, group_size, group_size, n * n);
  AllToAllCounts out;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const int64_t c = counts[i * n + j];
      WEFT_CHECK(c >= 0, "{}: negative count {} from rank {} to rank {}", kind, c, i, j);
      out.total += c;
      if (i == static_cast<size_t>(rank)) out.send_total += c;
      if (j == static_cast<size_t>(rank)) out.recv_total += c;
    }
  }
  return out;
}

inline void check_count(int64_t count, const char* kind) { WEFT_CHECK(count >= 0, "{}: negative count {}", kind, count); }

}  // namespace weft::detail
