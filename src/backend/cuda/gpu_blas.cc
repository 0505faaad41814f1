// cuBLAS / cuBLASLt (CUDA) or hipBLAS / hipBLASLt (HIP, WEFT_HIP) behind gpu::Blas. The
// libraries share their API shape: the names below differ by prefix (cublas -> hipblas,
// cublasLt -> hipblasLt, CUBLAS_ -> HIPBLAS_, CUBLASLT_ -> HIPBLASLT_, CUDA_R_ -> HIP_R_), and
// the few other differences are written out under WEFT_HIP. The HIP side follows ROCm 6's
// hipBLASLt API (hipDataType, hipblasComputeType_t); it has not been compiled yet (Debian 12
// ships no hipBLAS/hipBLASLt).
#include "backend/cuda/gpu_blas.h"

#include <climits>
#include <map>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/log.h"

#if defined(WEFT_HIP)
#include <hipblas/hipblas.h>
#include <hipblaslt/hipblaslt.h>
#define WEFT_BLAS(name) hipblas##name
#define WEFT_BLASLT(name) hipblasLt##name
#define WEFT_BLAS_ENUM(name) HIPBLAS_##name
#define WEFT_BLASLT_ENUM(name) HIPBLASLT_##name
#else
#include <cublasLt.h>
#include <cublas_v2.h>
#define WEFT_BLAS(name) cublas##name
#define WEFT_BLASLT(name) cublasLt##name
#define WEFT_BLAS_ENUM(name) CUBLAS_##name
#define WEFT_BLASLT_ENUM(name) CUBLASLT_##name
#endif

namespace weft::gpu {

namespace {

#if defined(WEFT_HIP)
constexpr const char* kBlasName = "hipBLAS";
using DataType = hipDataType;
constexpr DataType kR32F = HIP_R_32F, kR16BF = HIP_R_16BF;
const char* status_string(hipblasStatus_t s) { return hipblasStatusToString(s); }
#else
constexpr const char* kBlasName = "cuBLAS";
using DataType = cudaDataType_t;
constexpr DataType kR32F = CUDA_R_32F, kR16BF = CUDA_R_16BF;
const char* status_string(cublasStatus_t s) { return cublasGetStatusString(s); }
#endif
using Status = WEFT_BLAS(Status_t);
using LtEpilogue = WEFT_BLASLT(Epilogue_t);

#define WEFT_BLAS_CHECK(call)                                                                       \
  do {                                                                                              \
    const Status weft_st_ = (call);                                                                 \
    if (weft_st_ != WEFT_BLAS_ENUM(STATUS_SUCCESS))                                                 \
      throw_gpu_error(kBlasName, WEFT_GPU_STR(call), __FILE__, __LINE__, status_string(weft_st_)); \
  } while (0)

int to_int(int64_t v, const char* what) {
  WEFT_CHECK(v >= 0 && v <= INT_MAX, "cuda backend: {} = {} outside cuBLAS's int range", what, v);
  return static_cast<int>(v);
}

// Largest power of two (up to 256) that divides the address: cuBLASLt's heuristics need it.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

DataType data_type(MatType t) { return t == MatType::kF32 ? kR32F : kR16BF; }

LtEpilogue lt_epilogue(BlasEpilogue ep) {
  switch (ep) {
    case BlasEpilogue::kBias: return WEFT_BLASLT_ENUM(EPILOGUE_BIAS);
    case BlasEpilogue::kGeluAuxBias: return WEFT_BLASLT_ENUM(EPILOGUE_GELU_AUX_BIAS);
    case BlasEpilogue::kDGelu: return WEFT_BLASLT_ENUM(EPILOGUE_DGELU);
    case BlasEpilogue::kNone: break;
  }
  return WEFT_BLASLT_ENUM(EPILOGUE_DEFAULT);
}

// RAII holders of the Lt descriptors of one call.
struct LtDescs {
  WEFT_BLASLT(MatmulDesc_t) op = nullptr;
  WEFT_BLASLT(MatrixLayout_t) a = nullptr, b = nullptr, c = nullptr;
  WEFT_BLASLT(MatmulPreference_t) pref = nullptr;
  ~LtDescs() {
    if (pref) WEFT_BLASLT(MatmulPreferenceDestroy)(pref);
    if (c) WEFT_BLASLT(MatrixLayoutDestroy)(c);
    if (b) WEFT_BLASLT(MatrixLayoutDestroy)(b);
    if (a) WEFT_BLASLT(MatrixLayoutDestroy)(a);
    if (op) WEFT_BLASLT(MatmulDescDestroy)(op);
  }
};

}  // namespace

const char* epilogue_name(BlasEpilogue ep) {
  switch (ep) {
    case BlasEpilogue::kNone: return "none";
    case BlasEpilogue::kBias: return "bias";
    case BlasEpilogue::kGeluAuxBias: return "gelu_aux_bias";
    case BlasEpilogue::kDGelu: return "dgelu";
  }
  return "other";
}

struct Blas::State {
  Stream stream = nullptr;
  WEFT_BLAS(Handle_t) blas = nullptr;
  WEFT_BLASLT(Handle_t) lt = nullptr;
  void* workspace = nullptr;  // the owner's (Blas::Blas)
  size_t workspace_bytes = 0;
  bool tf32_warned = false;
  // The Lt heuristic's choice per call shape (key: everything that changes its answer).
  using AlgoKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int,
                             uint32_t, uint32_t, uint32_t, bool>;
  std::map<AlgoKey, std::pair<bool, WEFT_BLASLT(MatmulAlgo_t)>> algos;  // first: an algorithm exists

  void describe(LtDescs& d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                DataType ctype, DataType abtype, LtEpilogue ep, const void* bias, const void* aux, int64_t ldaux);
  bool find_algo(LtDescs& d, const AlgoKey& key, WEFT_BLASLT(MatmulAlgo_t)* algo, const char* ep_name, int64_t M,
                 int64_t N, int64_t K);
};

Blas::Blas(Stream stream, void* workspace, size_t workspace_bytes) : st_(std::make_unique<State>()) {
  st_->stream = stream;
  st_->workspace = workspace;
  st_->workspace_bytes = workspace_bytes;
  WEFT_BLAS_CHECK(WEFT_BLAS(Create)(&st_->blas));
  WEFT_BLAS_CHECK(WEFT_BLAS(SetStream)(st_->blas, stream));
#if !defined(WEFT_HIP)
  WEFT_BLAS_CHECK(cublasSetMathMode(st_->blas, CUBLAS_DEFAULT_MATH));  // hipBLAS: fp32 is the only mode
#endif
  WEFT_BLAS_CHECK(WEFT_BLASLT(Create)(&st_->lt));
}

Blas::~Blas() {
  if (st_->lt) WEFT_BLASLT(Destroy)(st_->lt);
  if (st_->blas) WEFT_BLAS(Destroy)(st_->blas);
}

void Blas::set_tf32(bool on) {
#if defined(WEFT_HIP)
  if (on && !st_->tf32_warned) {
    log_warn("weft: TF32 does not exist on this AMD GPU; fp32 products stay strict fp32");
    st_->tf32_warned = true;
  }
#else
  WEFT_BLAS_CHECK(cublasSetMathMode(st_->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
#endif
}

void Blas::sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 int64_t sa, const float* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc, int64_t sc,
                 int64_t batch) {
  if (M == 0 || N == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const auto opa = ta ? WEFT_BLAS_ENUM(OP_T) : WEFT_BLAS_ENUM(OP_N);
  const auto opb = tb ? WEFT_BLAS_ENUM(OP_T) : WEFT_BLAS_ENUM(OP_N);
  if (batch == 1) {
    WEFT_BLAS_CHECK(WEFT_BLAS(Sgemm)(st_->blas, opb, opa, to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, B,
                                     to_int(ldb, "ldb"), A, to_int(lda, "lda"), &beta, C, to_int(ldc, "ldc")));
  } else {
    WEFT_BLAS_CHECK(WEFT_BLAS(SgemmStridedBatched)(st_->blas, opb, opa, to_int(N, "N"), to_int(M, "M"),
                                                   to_int(K, "K"), &alpha, B, to_int(ldb, "ldb"), sb, A,
                                                   to_int(lda, "lda"), sa, &beta, C, to_int(ldc, "ldc"), sc,
                                                   to_int(batch, "batch")));
  }
}

// The descriptors of one row-major product, mapped to column-major by swapping the operands:
// D^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M), i.e. the library's "A" is our B.
void Blas::State::describe(LtDescs& d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                           int64_t ldc, DataType ctype, DataType abtype, LtEpilogue ep, const void* bias,
                           const void* aux, int64_t ldaux) {
  WEFT_BLAS_CHECK(WEFT_BLASLT(MatmulDescCreate)(&d.op, WEFT_BLAS_ENUM(COMPUTE_32F), kR32F));
  const auto opa = tb ? WEFT_BLAS_ENUM(OP_T) : WEFT_BLAS_ENUM(OP_N);
  const auto opb = ta ? WEFT_BLAS_ENUM(OP_T) : WEFT_BLAS_ENUM(OP_N);
  auto set = [&](auto attr, const void* v, size_t n) {
    WEFT_BLAS_CHECK(WEFT_BLASLT(MatmulDescSetAttribute)(d.op, attr, v, n));
  };
  set(WEFT_BLASLT_ENUM(MATMUL_DESC_TRANSA), &opa, sizeof(opa));
  set(WEFT_BLASLT_ENUM(MATMUL_DESC_TRANSB), &opb, sizeof(opb));
  set(WEFT_BLASLT_ENUM(MATMUL_DESC_EPILOGUE), &ep, sizeof(ep));
  if (bias != nullptr) set(WEFT_BLASLT_ENUM(MATMUL_DESC_BIAS_POINTER), &bias, sizeof(bias));
  if (aux != nullptr) {
    const int64_t ld = ldaux;
    set(WEFT_BLASLT_ENUM(MATMUL_DESC_EPILOGUE_AUX_POINTER), &aux, sizeof(aux));
    set(WEFT_BLASLT_ENUM(MATMUL_DESC_EPILOGUE_AUX_LD), &ld, sizeof(ld));
  }
  // Layouts (rows, cols, ld) of the column-major operands.
  const uint64_t a_rows = tb ? K : N, a_cols = tb ? N : K;  // our B
  const uint64_t b_rows = ta ? M : K, b_cols = ta ? K : M;  // our A
  WEFT_BLAS_CHECK(WEFT_BLASLT(MatrixLayoutCreate)(&d.a, abtype, a_rows, a_cols, ldb));
  WEFT_BLAS_CHECK(WEFT_BLASLT(MatrixLayoutCreate)(&d.b, abtype, b_rows, b_cols, lda));
  WEFT_BLAS_CHECK(
      WEFT_BLASLT(MatrixLayoutCreate)(&d.c, ctype, static_cast<uint64_t>(N), static_cast<uint64_t>(M), ldc));
}

// The heuristic's first algorithm for this call, cached by shape; false when there is none.
bool Blas::State::find_algo(LtDescs& d, const AlgoKey& key, WEFT_BLASLT(MatmulAlgo_t)* algo, const char* ep_name,
                            int64_t M, int64_t N, int64_t K) {
  auto it = algos.find(key);
  if (it == algos.end()) {
    WEFT_BLAS_CHECK(WEFT_BLASLT(MatmulPreferenceCreate)(&d.pref));
    auto pref = [&](auto attr, const void* v, size_t n) {
      WEFT_BLAS_CHECK(WEFT_BLASLT(MatmulPreferenceSetAttribute)(d.pref, attr, v, n));
    };
    const uint64_t ws = workspace_bytes;
    pref(WEFT_BLASLT_ENUM(MATMUL_PREF_MAX_WORKSPACE_BYTES), &ws, sizeof(ws));
#if !defined(WEFT_HIP)  // hipBLASLt has no alignment preferences
    const uint32_t al_a = std::get<11>(key), al_b = std::get<12>(key), al_c = std::get<13>(key);
    pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
    pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
    pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
    pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c));
#endif
    WEFT_BLASLT(MatmulHeuristicResult_t) result{};
    int found = 0;
    const Status st = WEFT_BLASLT(MatmulAlgoGetHeuristic)(lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result, &found);
    const bool ok = st == WEFT_BLAS_ENUM(STATUS_SUCCESS) && found > 0;
    if (!ok) {
      log_debug("{}Lt: no algorithm for M={} N={} K={} epilogue {} ({}); falling back", kBlasName, M, N, K, ep_name,
                status_string(st));
    }
    it = algos.emplace(key, std::make_pair(ok, result.algo)).first;
  }
  *algo = it->second.second;
  return it->second.first;
}

bool Blas::lt_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
                     const void* B, int64_t ldb, float beta, void* C, int64_t ldc, MatType c, BlasEpilogue ep,
                     const void* bias, const void* aux, int64_t ldaux, MatType ab) {
  if (M == 0 || N == 0) return true;
  const DataType ctype = data_type(c), abtype = data_type(ab);
  const LtEpilogue lep = lt_epilogue(ep);
  LtDescs d;
  st_->describe(d, ta, tb, M, N, K, lda, ldb, ldc, ctype, abtype, lep, bias, aux, ldaux);
  const State::AlgoKey key{ta, tb, M, N, K, lda, ldb, ldc, static_cast<int>(ctype), static_cast<int>(abtype),
                           static_cast<int>(lep), alignment_of(B), alignment_of(A), alignment_of(C), beta != 0.0f};
  WEFT_BLASLT(MatmulAlgo_t) algo{};
  if (!st_->find_algo(d, key, &algo, epilogue_name(ep), M, N, K)) {
    WEFT_CHECK(ep != BlasEpilogue::kNone,
               "{}Lt has no algorithm for a plain {} product M={} N={} K={} lda={} ldb={} ldc={}", kBlasName,
               ab == MatType::kF32 ? "fp32" : "bf16", M, N, K, lda, ldb, ldc);
    return false;
  }
  WEFT_BLAS_CHECK(WEFT_BLASLT(Matmul)(st_->lt, d.op, &alpha, B, d.a, A, d.b, &beta, C, d.c, C, d.c, &algo,
                                      st_->workspace, st_->workspace_bytes, st_->stream));
  return true;
}

}  // namespace weft::gpu
