// The collective library of the GPU build, behind one header: NCCL on CUDA, RCCL in a HIP
// build (WEFT_HIP). RCCL implements NCCL's API under the same nccl* names and types (ncclComm_t,
// ncclAllReduce, ncclGroupStart, ncclBfloat16, ...), so the communicator's source is the same
// for both; only the header differs. What RCCL needs beyond that (none of it checked yet:
// Debian 12 ships no RCCL):
//   - ncclCommSplit: RCCL >= 2.18 (ROCm 6.0 and later);
//   - ncclCommInitRankConfig / NCCL_CONFIG_INITIALIZER (non-blocking init, abort on timeout):
//     RCCL >= 2.14 (ROCm 5.5 and later);
//   - streams are hipStream_t (gpu::Stream), which RCCL's calls take in place of cudaStream_t.
#pragma once

#if defined(WEFT_HIP)
#include <rccl/rccl.h>
#else
#include <nccl.h>
#endif
