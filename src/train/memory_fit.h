// Does the run fit this machine's memory? Checked before the engine allocates anything: the
// planner's closed-form prediction of every rank (plan/weft_memory.h, the numbers the final
// report holds against the measurement) summed over the ranks that share this node, against
// the memory the node can still give.
//
// Host memory (the CPU backends' device memory is host memory): MemAvailable of
// /proc/meminfo, lowered to the cgroup's headroom when the process runs under a memory limit
// (cgroup v2 memory.max - memory.current + inactive file pages of memory.stat; cgroup v1
// memory.limit_in_bytes - memory.usage_in_bytes + total_inactive_file). A backend with its own
// memory (Backend::device_memory_free, cuda) is checked against its free bytes with this
// rank's own prediction (one device per rank).
//
// What the prediction leaves out: the program, MPI's and BLAS's buffers, the data loader's
// memory-mapped shards (page cache) and the checkpoint staging buffers (freed before the
// next step). A run the check refuses can be started anyway with memory_check = "warn" or
// "off" (`--memory_check off`).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "engine/engine.h"
#include "plan/memory.h"
#include "train/config.h"

namespace weft {

// The pipeline stage and data-parallel rank of `world_rank` in ec's grid, as the engine will
// place it (without building the grid's communicators).
std::pair<int, int> stage_and_dp_rank(const EngineConfig& ec, int world_rank);

// Bytes that a process may still allocate and where the number comes from.
struct MemoryAvailable {
  double bytes = 0;
  std::string source;  // "MemAvailable of /proc/meminfo", "cgroup v2 memory.max", "device free memory"
};

// The host's: MemAvailable, or the cgroup's headroom when lower. nullopt when neither can be
// read (not Linux): the check is then skipped with a warning.
std::optional<MemoryAvailable> host_memory_available();

// Parses /proc/meminfo text: MemAvailable in bytes (nullopt when absent).
std::optional<double> meminfo_available(const std::string& meminfo);
// A cgroup's headroom: limit - usage + reclaimable file pages; nullopt for no limit ("max",
// or cgroup v1's page-counter maximum).
std::optional<double> cgroup_headroom(const std::string& limit, const std::string& usage, double inactive_file);

// What the ranks on one node (or one device) will allocate, by category.
struct MemoryNeed {
  plan::MemoryBreakdown bytes;  // summed over `ranks`
  int ranks = 1;
  std::string where;            // "node 0 (ranks 0,1)" or "device of rank 3"
};

// The decision, without I/O: nothing when need fits, else per `mode` ("on": InputError with
// the predicted bytes per category and the available bytes; "warn": a warning; "off": nothing).
void require_memory_fit(const MemoryNeed& need, const MemoryAvailable& avail, const std::string& mode);

// The trainer's check, before the engine is made (collective over `world`: the node map).
// Every rank of a node computes the same sum, so they refuse together.
void check_memory_fit(const RunConfig& cfg, const EngineConfig& ec, Communicator& world, const Backend& backend);

}  // namespace weft
