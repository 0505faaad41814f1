// The CPU backend's indexed-row ops (backend.h "indexed rows": gather, segment reductions and
// their backward, batch normalisation), the reference of every other backend's. Parallel over
// segments (rows, columns); each segment's rows are taken in order, and batch normalisation's
// column sums over fixed chunks of kBatchNormChunk rows added in chunk order, so results are
// bitwise independent of the thread count.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace weft::cpu {

void gather_rows(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C);
void segment_reduce(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets, int64_t S,
                    int64_t C, SegmentOp op, bool accumulate);
void segment_broadcast(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C,
                       bool mean, bool accumulate);
void segment_arg_backward(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C);
void segment_std(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets, int64_t S,
                 int64_t C, float var_floor);
void segment_std_backward(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                          const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C);
void batchnorm_inference(float* out, const float* x, const float* mean, const float* var, const float* w,
                         const float* b, int64_t N, int64_t C, float eps);
void batchnorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t N,
                       int64_t C, float eps);
void batchnorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C);

}  // namespace weft::cpu
