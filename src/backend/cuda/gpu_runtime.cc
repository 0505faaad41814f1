#include "backend/cuda/gpu_runtime.h"

#include <cstdlib>

#include "core/error.h"
#include "core/log.h"

namespace weft::gpu {

namespace {
// The names that differ between the runtimes by more than the cuda/hip prefix.
#if defined(WEFT_HIP)
constexpr const char* kPrefix = "hip";
using DeviceProp = hipDeviceProp_t;
constexpr auto kAttrCcMajor = hipDeviceAttributeComputeCapabilityMajor;
constexpr auto kAttrCcMinor = hipDeviceAttributeComputeCapabilityMinor;
constexpr Error kErrorUnloading = hipErrorDeinitialized;  // the runtime is shutting down
bool is_device_memory(const hipPointerAttribute_t& a) {
#if HIP_VERSION_MAJOR >= 6
  return a.type == hipMemoryTypeDevice || a.isManaged;  // ROCm 6 renamed memoryType to type
#else
  return a.memoryType == hipMemoryTypeDevice || a.isManaged;
#endif
}
using PointerAttributes = hipPointerAttribute_t;
#else
constexpr const char* kPrefix = "cuda";
using DeviceProp = cudaDeviceProp;
constexpr auto kAttrCcMajor = cudaDevAttrComputeCapabilityMajor;
constexpr auto kAttrCcMinor = cudaDevAttrComputeCapabilityMinor;
constexpr Error kErrorUnloading = cudaErrorCudartUnloading;
bool is_device_memory(const cudaPointerAttributes& a) {
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
using PointerAttributes = cudaPointerAttributes;
#endif
}  // namespace

void throw_gpu_error(const char* lib, const char* call, const char* file, int line, const std::string& what) {
  throw RuntimeError(fmt::format("weft: {} error at {}:{}: {}: {}", lib, file, line, call, what));
}

std::string error_string(Error e) {
  return fmt::format("{} ({})", WEFT_GPU_NAME(GetErrorString)(e), WEFT_GPU_NAME(GetErrorName)(e));
}

int device_count(std::string* why) {
  int n = 0;
  const Error e = WEFT_GPU_NAME(GetDeviceCount)(&n);
  if (e != kSuccess) {
    (void)WEFT_GPU_NAME(GetLastError)();  // clear the sticky-free error so later calls start clean
    if (why) *why = fmt::format("{}GetDeviceCount: {}", kPrefix, error_string(e));
    return 0;
  }
  if (n == 0 && why) *why = fmt::format("{}GetDeviceCount: 0 devices", kPrefix);
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
  if (n == 0) throw_runtime("weft: no {} device visible ({})", kRuntimeName, why);
  if (device < 0) device = local_rank_from_env() % n;
  if (device >= n) throw_input("weft: {} device {} requested but only {} visible", kRuntimeName, device, n);
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(SetDevice)(device));
  return device;
}

int current_device() {
  int d = 0;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(GetDevice)(&d));
  return d;
}

std::string device_pci_bus_id(int device) {
  char bus[32] = {};
  if (WEFT_GPU_NAME(DeviceGetPCIBusId)(bus, sizeof(bus), device) != WEFT_GPU_NAME(Success)) {
    (void)WEFT_GPU_NAME(GetLastError)();
    return {};
  }
  return bus;
}

std::string device_name(int device) {
  DeviceProp prop{};
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(GetDeviceProperties)(&prop, device));
  return prop.name;
}

int device_sm(int device) {
  int major = 0, minor = 0;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(DeviceGetAttribute)(&major, kAttrCcMajor, device));
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(DeviceGetAttribute)(&minor, kAttrCcMinor, device));
  return major * 10 + minor;
}

void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const Error e = WEFT_GPU_NAME(Malloc)(&p, bytes);
  if (e != kSuccess) {
    (void)WEFT_GPU_NAME(GetLastError)();
    size_t free_b = 0, total_b = 0;
    (void)WEFT_GPU_NAME(MemGetInfo)(&free_b, &total_b);
    throw_runtime("weft: {}Malloc of {} bytes ({:.1f} MiB) failed: {}; device {} has {:.1f} MiB free of {:.1f} MiB",
                  kPrefix, bytes, static_cast<double>(bytes) / 1048576.0, error_string(e), current_device(),
                  static_cast<double>(free_b) / 1048576.0, static_cast<double>(total_b) / 1048576.0);
  }
  return p;
}

void device_free(void* p) noexcept {
  if (p == nullptr) return;
  const Error e = WEFT_GPU_NAME(Free)(p);
  if (e != kSuccess && e != kErrorUnloading) {
    log_warn("weft: {}Free failed: {}", kPrefix, error_string(e));
  }
}

void copy_h2d(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(MemcpyAsync)(dst, src, bytes, WEFT_GPU_NAME(MemcpyHostToDevice), s));
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(StreamSynchronize)(s));
}

void copy_d2h(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(MemcpyAsync)(dst, src, bytes, WEFT_GPU_NAME(MemcpyDeviceToHost), s));
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(StreamSynchronize)(s));
}

void copy_d2d_async(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0 || dst == src) return;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(MemcpyAsync)(dst, src, bytes, WEFT_GPU_NAME(MemcpyDeviceToDevice), s));
}

void copy_d2d_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                       Stream s) {
  if (width == 0 || rows == 0) return;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(Memcpy2DAsync)(dst, dst_pitch, src, src_pitch, width, rows,
                                              WEFT_GPU_NAME(MemcpyDeviceToDevice), s));
}

void copy_h2d_async(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(MemcpyAsync)(dst, src, bytes, WEFT_GPU_NAME(MemcpyHostToDevice), s));
}

void copy_d2h_async(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(MemcpyAsync)(dst, src, bytes, WEFT_GPU_NAME(MemcpyDeviceToHost), s));
}

void memset_async(void* dst, int value, size_t bytes, Stream s) {
  if (bytes == 0) return;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(MemsetAsync)(dst, value, bytes, s));
}

bool is_device_pointer(const void* p) {
  PointerAttributes attr{};
  if (WEFT_GPU_NAME(PointerGetAttributes)(&attr, p) != kSuccess) {
    (void)WEFT_GPU_NAME(GetLastError)();
    return false;
  }
  return is_device_memory(attr);
}

Stream stream_create() {
  Stream s = nullptr;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(StreamCreateWithFlags)(&s, WEFT_GPU_NAME(StreamNonBlocking)));
  return s;
}

void stream_destroy(Stream s) noexcept {
  if (s != nullptr) (void)WEFT_GPU_NAME(StreamDestroy)(s);
}

void stream_sync(Stream s) { WEFT_CUDA_CHECK(WEFT_GPU_NAME(StreamSynchronize)(s)); }

Event event_create(bool timing) {
  Event e = nullptr;
  const unsigned flags = timing ? WEFT_GPU_NAME(EventDefault) : WEFT_GPU_NAME(EventDisableTiming);
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(EventCreateWithFlags)(&e, flags));
  return e;
}

void event_destroy(Event e) noexcept {
  if (e != nullptr) (void)WEFT_GPU_NAME(EventDestroy)(e);
}

void event_record(Event e, Stream s) { WEFT_CUDA_CHECK(WEFT_GPU_NAME(EventRecord)(e, s)); }

void stream_wait_event(Stream s, Event e) { WEFT_CUDA_CHECK(WEFT_GPU_NAME(StreamWaitEvent)(s, e, 0)); }

bool event_query(Event e) {
  const Error r = WEFT_GPU_NAME(EventQuery)(e);
  if (r == kSuccess) return true;
  if (r == WEFT_GPU_NAME(ErrorNotReady)) return false;
  throw_gpu_error(kRuntimeName, WEFT_GPU_STR(WEFT_GPU_NAME(EventQuery)(e)), __FILE__, __LINE__, error_string(r));
}

float event_elapsed_ms(Event start, Event end) {
  float ms = 0.0f;
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(EventElapsedTime)(&ms, start, end));
  return ms;
}

void device_sync() { WEFT_CUDA_CHECK(WEFT_GPU_NAME(DeviceSynchronize)()); }

void capture_begin(Stream s) {
  // Thread-local mode: only this thread's unsafe calls (allocations, synchronisations) break
  // the capture; other threads are not affected.
  WEFT_CUDA_CHECK(WEFT_GPU_NAME(StreamBeginCapture)(s, WEFT_GPU_NAME(StreamCaptureModeThreadLocal)));
}

GraphExec capture_end(Stream s, std::string* why) noexcept {
  WEFT_GPU_NAME(Graph_t) graph = nullptr;
  Error e = WEFT_GPU_NAME(StreamEndCapture)(s, &graph);
  GraphExec exec = nullptr;
  if (e == kSuccess && graph != nullptr) {
    e = WEFT_GPU_NAME(GraphInstantiateWithFlags)(&exec, graph, 0);
    if (e != kSuccess) exec = nullptr;
  }
  if (graph != nullptr) (void)WEFT_GPU_NAME(GraphDestroy)(graph);
  if (e != kSuccess || exec == nullptr) {
    if (why) *why = error_string(e == kSuccess ? WEFT_GPU_NAME(ErrorUnknown) : e);
    (void)WEFT_GPU_NAME(GetLastError)();  // capture errors are not sticky: clear them
    return nullptr;
  }
  return exec;
}

void graph_launch(GraphExec g, Stream s) { WEFT_CUDA_CHECK(WEFT_GPU_NAME(GraphLaunch)(g, s)); }

void graph_destroy(GraphExec g) noexcept {
  if (g != nullptr) (void)WEFT_GPU_NAME(GraphExecDestroy)(g);
}

}  // namespace weft::gpu
