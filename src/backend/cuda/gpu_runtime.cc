#include "backend/cuda/gpu_runtime.h"

#include <cstdlib>

#include "core/error.h"
#include "core/log.h"

namespace weft::gpu {

void throw_gpu_error(const char* lib, const char* call, const char* file, int line, const std::string& what) {
  throw RuntimeError(fmt::format("weft: {} error at {}:{}: {}: {}", lib, file, line, call, what));
}

std::string cuda_error_string(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
}

std::string cublas_error_string(cublasStatus_t s) { return cublasGetStatusString(s); }

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why) *why = fmt::format("cudaGetDeviceCount: {}", cuda_error_string(e));
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
  return n;
}

namespace {
int local_rank_from_env() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                           "LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return 0;
}
}  // namespace

int select_device(int device) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) throw_runtime("weft: no CUDA device visible ({})", why);
  if (device < 0) device = local_rank_from_env() % n;
  if (device >= n) throw_input("weft: CUDA device {} requested but only {} visible", device, n);
  WEFT_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

int current_device() {
  int d = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

int device_sm(int device) {
  int major = 0, minor = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw_runtime("weft: cudaMalloc of {} bytes ({:.1f} MiB) failed: {}; device {} has {:.1f} MiB free of {:.1f} MiB",
                  bytes, static_cast<double>(bytes) / 1048576.0, cuda_error_string(e), current_device(),
                  static_cast<double>(free_b) / 1048576.0, static_cast<double>(total_b) / 1048576.0);
  }
  return p;
}

void device_free(void* p) noexcept {
  if (p == nullptr) return;
  const cudaError_t e = cudaFree(p);
  if (e != cudaSuccess && e != cudaErrorCudartUnloading) {
    log_warn("weft: cudaFree failed: {}", cuda_error_string(e));
  }
}

void copy_h2d(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(s));
}

void copy_d2h(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  WEFT_CUDA_CHECK(cudaStreamSynchronize(s));
}

void copy_d2d_async(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0 || dst == src) return;
  WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

void copy_h2d_async(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
}

void copy_d2h_async(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
}

void memset_async(void* dst, int value, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, s));
}

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

Stream stream_create() {
  Stream s = nullptr;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void stream_destroy(Stream s) noexcept {
  if (s != nullptr) (void)cudaStreamDestroy(s);
}

void stream_sync(Stream s) { WEFT_CUDA_CHECK(cudaStreamSynchronize(s)); }

Event event_create(bool timing) {
  Event e = nullptr;
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void event_destroy(Event e) noexcept {
  if (e != nullptr) (void)cudaEventDestroy(e);
}

void event_record(Event e, Stream s) { WEFT_CUDA_CHECK(cudaEventRecord(e, s)); }

void stream_wait_event(Stream s, Event e) { WEFT_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0)); }

bool event_query(Event e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  if (r == cudaErrorNotReady) return false;
  throw_gpu_error("CUDA", "cudaEventQuery(e)", __FILE__, __LINE__, cuda_error_string(r));
}

float event_elapsed_ms(Event start, Event end) {
  float ms = 0.0f;
  WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  return ms;
}

void device_sync() { WEFT_CUDA_CHECK(cudaDeviceSynchronize()); }

void capture_begin(Stream s) {
  // Thread-local mode: only this thread's unsafe calls (cudaMalloc, synchronisations) break
  // the capture; other threads are not affected.
  WEFT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
}

GraphExec capture_end(Stream s, std::string* why) noexcept {
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  GraphExec exec = nullptr;
  if (e == cudaSuccess && graph != nullptr) {
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) exec = nullptr;
  }
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  if (e != cudaSuccess || exec == nullptr) {
    if (why) *why = cuda_error_string(e == cudaSuccess ? cudaErrorUnknown : e);
    (void)cudaGetLastError();  // capture errors are not sticky: clear them
    return nullptr;
  }
  return exec;
}

void graph_launch(GraphExec g, Stream s) { WEFT_CUDA_CHECK(cudaGraphLaunch(g, s)); }

void graph_destroy(GraphExec g) noexcept {
  if (g != nullptr) (void)cudaGraphExecDestroy(g);
}

}  // namespace weft::gpu
