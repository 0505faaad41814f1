// The stable device radix sort of (uint32 key, int32 value) pairs that the embedding backward
// needs, behind one pair of functions: CUB's DeviceRadixSort::SortPairs on CUDA, rocPRIM's
// radix_sort_pairs on HIP (hipCUB, which would wrap it under CUB's names, is not packaged for
// Debian 12; rocPRIM is, as librocprim-dev). Both are least-significant-digit radix sorts,
// stable by construction: pairs with equal keys keep their input order. Only for nvcc or
// hipcc translation units.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/gpu_runtime.h"

#if defined(WEFT_HIP)
#include <rocprim/device/device_radix_sort.hpp>
#else
#include <cub/device/device_radix_sort.cuh>
#endif

namespace weft::gpu {

// Bytes of temporary storage sort_pairs needs for n pairs sorted on bits [0, end_bit).
inline size_t sort_pairs_bytes(int64_t n, int end_bit) {
  size_t bytes = 0;
#if defined(WEFT_HIP)
  WEFT_CUDA_CHECK(rocprim::radix_sort_pairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                            static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                            static_cast<int32_t*>(nullptr), static_cast<size_t>(n), 0u,
                                            static_cast<unsigned>(end_bit)));
#else
  WEFT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                                  static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                  static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, end_bit));
#endif
  return bytes;
}

// Sorts n pairs by the bits [0, end_bit) of their keys into keys_out / vals_out, stably;
// temp holds temp_bytes >= sort_pairs_bytes(n, end_bit). Enqueued on s.
inline void sort_pairs(void* temp, size_t temp_bytes, const uint32_t* keys_in, uint32_t* keys_out,
                       const int32_t* vals_in, int32_t* vals_out, int64_t n, int end_bit, Stream s) {
#if defined(WEFT_HIP)
  WEFT_CUDA_CHECK(rocprim::radix_sort_pairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                            static_cast<size_t>(n), 0u, static_cast<unsigned>(end_bit), s));
#else
  WEFT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                                  static_cast<int>(n), 0, end_bit, s));
#endif
}

}  // namespace weft::gpu
