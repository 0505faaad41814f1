#include "parallel/tp/mappings.h"

#include <utility>

#include "core/error.h"

namespace weft {

TensorParallel::TensorParallel(Backend& backend, int size, int rank) : be_(backend), size_(size), rank_(rank) {
  WEFT_CHECK(size >= 1 && rank >= 0 && rank < size, "tensor-parallel rank {} of {}", rank, size);
}

void TensorParallel::set_ops(TensorParallelOps* ops, bool sequence_parallel) {
  ops_ = ops;
  sp_ = sequence_parallel && size_ > 1;
}

void TensorParallel::check_rows(int64_t B, int64_t T) const {
  if (sp_ && (B * T) % size_ != 0) {
    throw_input("sequence parallelism: micro-batch {} x sequence {} = {} tokens are not divisible by tp {}", B, T,
                B * T, size_);
  }
}

void TensorParallel::check_ready() const {
  WEFT_CHECK(size_ == 1 || (ops_ != nullptr && ops_->size() == size_), "tensor-parallel size {} needs set_tp()",
             size_);
}

int64_t TensorParallel::scratch_elems(int size, bool sequence_parallel, int64_t N, int64_t C) {
  const bool sp = sequence_parallel && size > 1;
  return 2 * C + (size > 1 ? N * C : 0) + (sp ? N / size * C : 0);
}

int64_t TensorParallel::scratch_bytes(int size, bool sequence_parallel, int64_t N, int64_t C, DType sum) {
  const int64_t typed = scratch_elems(size, sequence_parallel, N, C) - 2 * C;
  return 4 * 2 * C + static_cast<int64_t>(dtype_bytes(sum, typed));
}

void TensorParallel::reserve(int64_t N, int64_t C, DType sum) {
  release();
  sum_ = sum;
  scratch32_ = DeviceBuffer(be_, DType::kF32, 2 * C, MemCategory::kWorkspace);
  ln_grads_ = scratch32_.data<float>();
  const int64_t part = size_ > 1 ? N * C : 0, rows = sp_ ? local_rows(N) * C : 0;
  if (part + rows == 0) return;
  scratch_ = DeviceBuffer(be_, sum, part + rows, MemCategory::kWorkspace);
  char* p = static_cast<char*>(scratch_.raw());
  partial_ = part > 0 ? p : nullptr;
  rows_ = rows > 0 ? p + dtype_bytes(sum, part) : nullptr;
}

void TensorParallel::release() {
  scratch_ = DeviceBuffer();
  scratch32_ = DeviceBuffer();
  partial_ = rows_ = nullptr;
  ln_grads_ = nullptr;
}

void TensorParallel::all_reduce(View x, int64_t n) {
  if (size_ > 1) ops_->all_reduce_sum(x, n);
}

void TensorParallel::all_reduce_max(float* x, int64_t n) {
  if (size_ > 1) ops_->all_reduce_max(x, n);
}

void TensorParallel::all_reduce_exact(float* x, int64_t n) {
  if (size_ > 1) ops_->all_reduce_sum_exact(x, n);
}

int64_t TensorParallel::replica_sum_elems(int size, int replicas, int64_t rows, bool bias, int64_t w) {
  return replicas > 1 ? int64_t{size / replicas} * (rows + (bias ? 1 : 0)) * w : 0;
}

int64_t TensorParallel::replica_scratch_elems(int size, int replicas, int64_t rows, bool bias, int64_t w) {
  return replicas > 1 ? (rows + (bias ? 1 : 0)) * w + replica_sum_elems(size, replicas, rows, bias, w) : 0;
}

namespace {
// The columns [c0, c0 + w) of dw (and of db) <-> a packed (rows (+1), w) block at p.
void pack_cols(Backend& be, float* p, const TensorParallel::ReplicaCols& r) {
  const size_t f = sizeof(float);
  be.copy_device_2d(p, r.w * f, r.dw + r.c0, r.ld * f, r.w * f, r.rows);
  if (r.db != nullptr) be.copy_device(p, r.rows * r.w * f, r.db, r.c0 * f, r.w * f);
}
void unpack_cols(Backend& be, const TensorParallel::ReplicaCols& r, const float* p) {
  const size_t f = sizeof(float);
  be.copy_device_2d(r.dw + r.c0, r.ld * f, p, r.w * f, r.w * f, r.rows);
  if (r.db != nullptr) be.copy_device(r.db, r.c0 * f, p, r.rows * r.w * f, r.w * f);
}
}  // namespace

void TensorParallel::begin_replica_grads(const ReplicaCols& r, float* scratch) {
  if (r.replicas <= 1) return;
  WEFT_CHECK(size_ % r.replicas == 0 && scratch != nullptr, "replicated columns: {} replicas of {} ranks", r.replicas,
             size_);
  const int64_t n1 = (r.rows + (r.db != nullptr ? 1 : 0)) * r.w;
  float* slots = scratch + n1;
  pack_cols(be_, scratch, r);  // set aside
  be_.fill(slots, DType::kF32, 0, int64_t{size_ / r.replicas} * n1, 0.0f);
  unpack_cols(be_, r, slots);  // zeroed
}

void TensorParallel::end_replica_grads(const ReplicaCols& r, float* scratch) {
  if (r.replicas <= 1) return;
  const int64_t n1 = (r.rows + (r.db != nullptr ? 1 : 0)) * r.w;
  float* slots = scratch + n1;
  float* mine = slots + int64_t{rank_ / r.replicas} * n1;  // the other slots stay zero since begin
  pack_cols(be_, mine, r);
  all_reduce_exact(slots, int64_t{size_ / r.replicas} * n1);
  be_.add_f32(mine, mine, scratch, n1);
  unpack_cols(be_, r, mine);
}

void TensorParallel::all_gather(CView local, View whole, int64_t N, int64_t C) {
  if (size_ > 1) ops_->all_gather(local, whole, N / size_ * C);
}

void TensorParallel::reduce_scatter(CView whole, View local, int64_t N, int64_t C) {
  if (size_ > 1) ops_->reduce_scatter(whole, local, N / size_ * C);
}

void TensorParallel::column_input_forward(CView local, View whole, int64_t N, int64_t C) {
  // gather_from_sequence_region; else copy_to_region
  if (sp_) all_gather(local, whole, N, C);  // as stored (16-bit LayerNorm rows move in 16 bits)
}

void TensorParallel::column_input_backward_rows(View d, int64_t rows, int64_t C) {
  if (sp_) return;  // the reduce-scatter waits for every row
  if (size_ > 1) all_reduce(d, rows * C);  // copy_to_region's backward
  round(d, rows * C);
}

View TensorParallel::column_input_backward_scatter(View d, int64_t N, int64_t C) {
  if (!sp_) return d;
  reduce_scatter(d, rows(), N, C);  // gather_from_sequence_region's backward
  round(rows(), local_rows(N) * C);
  return rows();
}

View TensorParallel::row_output_forward(View partial, View local, int64_t N, int64_t C) {
  if (!sp_) {
    all_reduce(partial, N * C);  // reduce_from_region
    return partial;
  }
  reduce_scatter(partial, local, N, C);  // reduce_scatter_to_sequence_region
  return local;
}

CView TensorParallel::row_output_backward(CView d, int64_t N, int64_t C) {
  if (!sp_) return d;  // reduce_from_region's backward
  // reduce_scatter_to_sequence_region's backward: every rank's rows, as stored (a 16-bit
  // gradient in 16 bits), into the partial-sum scratch.
  WEFT_CHECK(dtype_bytes(d.dtype, 1) <= dtype_bytes(sum_, 1), "a {} gradient gathered into {} partial sums",
             dtype_name(d.dtype), dtype_name(sum_));
  const View whole(partial_, d.dtype);
  all_gather(d, whole, N, C);
  return whole;
}

}  // namespace weft
