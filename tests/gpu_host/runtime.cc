// The CUDA runtime API of the host execution layer (cuda_runtime_api.h): device memory with guard
// zones, streams, events, graph capture as record-and-replay, the sticky error,.
//
// Device allocations are host memory with kGuardBytes before and after, filled with a pattern that
// is checked after every kernel, on cudaFree and at every synchronization (an overwrite is a fault
// naming the allocation and the kernel that ran last); under AddressSanitizer the guards are
// also poisoned, so the faulting access itself is reported.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/gpu_host/executor.h"
#include "tests/gpu_host/runtime_internal.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_HOST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TS_HOST_ASAN 1
#endif
#ifdef TS_HOST_ASAN
#include <sanitizer/asan_interface.h>
#endif

struct CUstream_st {
  unsigned flags = 0;
  bool capturing = false;
  bool invalidated = false;
  std::string invalid_reason;
  CUgraph_st* graph = nullptr;
};
struct CUevent_st {
  bool recorded = false;
};
struct CUgraph_st {
  std::vector<std::pair<std::string, std::function<cudaError_t()>>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::pair<std::string, std::function<cudaError_t()>>> nodes;
};

namespace tinyserve::gpu_host {
namespace {

constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuardByte = 0xa5;
constexpr size_t kTotalMemory = size_t{64} << 30;  // what cudaMemGetInfo says

struct Allocation {
  char* raw = nullptr;
  size_t bytes = 0;
  int64_t id = 0;
};

struct State {
  std::recursive_mutex mu;
  std::map<const char*, Allocation> allocs;  // by user pointer
  int64_t next_id = 1;
  size_t used = 0;
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  std::vector<std::string> faults;
  std::string last_kernel = "(none)";
  int64_t kernels_run = 0;
  int64_t bytes_to_host = 0;            // device-to-host bytes copied by cudaMemcpy(Async)
  int64_t allocations = 0;              // successful cudaMalloc calls
  CopyCount to_device;                  // host-to-device cudaMemcpy(Async) calls
  std::set<void*> pinned;               // cudaHostAlloc-ed, not freed yet
  std::vector<CUstream_st*> capturing;  // streams capturing now
};

State& S() {
  static State* s = new State();  // never destroyed: used from static destructors
  return *s;
}

cudaError_t Fail(cudaError_t e) {
  S().last = e;
  return e;
}
cudaError_t Ret(cudaError_t e) {
  if (S().sticky != cudaSuccess) return S().sticky;
  if (e != cudaSuccess) S().last = e;
  return e;
}

void CountCopy(cudaMemcpyKind kind, size_t bytes) {
  if (kind == cudaMemcpyDeviceToHost) S().bytes_to_host += static_cast<int64_t>(bytes);
  if (kind == cudaMemcpyHostToDevice) {
    ++S().to_device.copies;
    S().to_device.bytes += static_cast<int64_t>(bytes);
  }
}

void PoisonGuards(const Allocation& a, bool poison) {
#ifdef TS_HOST_ASAN
  char* user = a.raw + kGuardBytes;
  if (poison) {
    ASAN_POISON_MEMORY_REGION(a.raw, kGuardBytes);
    ASAN_POISON_MEMORY_REGION(user + a.bytes, kGuardBytes);
  } else {
    ASAN_UNPOISON_MEMORY_REGION(a.raw, kGuardBytes);
    ASAN_UNPOISON_MEMORY_REGION(user + a.bytes, kGuardBytes);
  }
#else
  (void)a;
  (void)poison;
#endif
}

std::string Describe(const Allocation& a) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "device allocation #%lld (%zu bytes at %p)",
                static_cast<long long>(a.id), a.bytes, static_cast<void*>(a.raw + kGuardBytes));
  return buf;
}

// Returns false (after recording a fault) when a guard byte of `a` changed.
bool GuardsIntact(const Allocation& a, const std::string& when) {
  PoisonGuards(a, false);
  const char* user = a.raw + kGuardBytes;
  long first = 0;
  bool bad = false;
  for (size_t i = 0; i < kGuardBytes && !bad; ++i) {
    if (static_cast<unsigned char>(a.raw[i]) != kGuardByte) {
      bad = true;
      first = -static_cast<long>(kGuardBytes - i);
    }
  }
  for (size_t i = 0; i < kGuardBytes && !bad; ++i) {
    if (static_cast<unsigned char>(user[a.bytes + i]) != kGuardByte) {
      bad = true;
      first = static_cast<long>(a.bytes + i);
    }
  }
  PoisonGuards(a, true);
  if (!bad) return true;
  RecordFault("out-of-bounds write into the guard zone of " + Describe(a) + " at byte offset " +
              std::to_string(first) + ", found " + when);
  return false;
}

void CheckAllGuards(const std::string& when) {
  for (const auto& [p, a] : S().allocs) {
    if (!GuardsIntact(a, when)) return;
  }
}

const Allocation* Find(const void* ptr) {
  auto& allocs = S().allocs;
  auto it = allocs.upper_bound(static_cast<const char*>(ptr));
  if (it == allocs.begin()) return nullptr;
  --it;
  const char* p = static_cast<const char*>(ptr);
  if (p < it->first || p >= it->first + std::max<size_t>(it->second.bytes, 1)) return nullptr;
  return &it->second;
}

// A capture-forbidden call on the calling thread while a stream captures (ThreadLocal mode):
// invalidates that capture.
bool ForbiddenInCapture(const char* what) {
  if (S().capturing.empty()) return false;
  for (CUstream_st* s : S().capturing) {
    if (!s->invalidated) {
      s->invalidated = true;
      s->invalid_reason = std::string(what) + " while the stream was being captured";
    }
  }
  std::fprintf(stderr, "[gpu_host] %s during stream capture: not allowed\n", what);
  return true;
}

}  // namespace

void RecordFault(const std::string& message) {
  State& s = S();
  s.faults.push_back(message);
  s.sticky = cudaErrorLaunchFailure;
  s.last = cudaErrorLaunchFailure;
  std::fprintf(stderr, "[gpu_host] fault: %s\n", message.c_str());
}

std::vector<std::string> TakeFaults() {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  std::vector<std::string> out;
  out.swap(S().faults);
  S().sticky = cudaSuccess;
  S().last = cudaSuccess;
  return out;
}

int64_t NumKernelsRun() { return S().kernels_run; }

int64_t BytesCopiedToHost() { return S().bytes_to_host; }

CopyCount CopiesToDevice() {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  return S().to_device;
}

int64_t NumDeviceAllocations() {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  return S().allocations;
}

cudaError_t CheckDeviceRange(const void* ptr, size_t bytes, const char* what) {
  if (bytes == 0) return cudaSuccess;
  const Allocation* a = Find(ptr);
  const char* p = static_cast<const char*>(ptr);
  if (a == nullptr || p + bytes > a->raw + kGuardBytes + a->bytes) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%p", ptr);
    std::fprintf(stderr, "[gpu_host] %s: [%s, +%zu bytes) is not inside one device allocation%s\n",
                 what, buf, bytes, a != nullptr ? (" (" + Describe(*a) + ")").c_str() : "");
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t Enqueue(cudaStream_t stream, const char* name, std::function<cudaError_t()> op) {
  if (stream != nullptr && stream->capturing) {
    stream->graph->nodes.emplace_back(name, std::move(op));
    return cudaSuccess;
  }
  return op();
}

void LaunchOnHost(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                  cudaStream_t stream, std::function<void()> body) {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 ||
      grid.y > 65535 || grid.z > 65535 || block.z > 64 || shared_bytes > 48 * 1024) {
    std::fprintf(stderr,
                 "[gpu_host] launch of %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u) "
                 "shared %zu\n",
                 kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes);
    Fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (S().sticky != cudaSuccess) return;
  const std::string name = kernel;
  const cudaError_t e =
      Enqueue(stream, kernel, [name, grid, block, shared_bytes, body = std::move(body)] {
        State& s = S();
        if (s.sticky != cudaSuccess) return s.sticky;
        s.last_kernel = name;
        ++s.kernels_run;
        ExecuteKernel(name.c_str(), grid, block, shared_bytes, body);
        if (s.sticky == cudaSuccess) CheckAllGuards("after kernel " + name);
        return s.sticky;
      });
  if (e != cudaSuccess) Fail(e);
}

}  // namespace tinyserve::gpu_host

// ---- the runtime API --------------------------------------------------------------------------
using tinyserve::gpu_host::S;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : tinyserve::gpu_host::Fail(cudaErrorInvalidDevice);
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return tinyserve::gpu_host::Fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "tinyserve host execution layer");
  prop->totalGlobalMem = tinyserve::gpu_host::kTotalMemory;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;  // an H100/H200's: the same attention splits as there
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (tinyserve::gpu_host::ForbiddenInCapture("cudaDeviceSynchronize")) {
    return tinyserve::gpu_host::Fail(cudaErrorStreamCaptureUnsupported);
  }
  tinyserve::gpu_host::CheckAllGuards("at cudaDeviceSynchronize");
  return tinyserve::gpu_host::Ret(cudaSuccess);
}
cudaError_t cudaGetLastError() {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (S().sticky != cudaSuccess) return S().sticky;
  const cudaError_t e = S().last;
  S().last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  return S().sticky != cudaSuccess ? S().sticky : S().last;
}
const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (host execution layer fault: see its messages)";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    default:
      return cudaGetErrorName(err);
  }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  *ptr = nullptr;
  if (ForbiddenInCapture("cudaMalloc")) return Fail(cudaErrorStreamCaptureUnsupported);
  if (S().sticky != cudaSuccess) return S().sticky;
  if (bytes > kTotalMemory - S().used) return Fail(cudaErrorMemoryAllocation);
  Allocation a;
  a.bytes = bytes;
  a.id = S().next_id++;
  const size_t total = (bytes + 2 * kGuardBytes + 255) / 256 * 256;
  a.raw = static_cast<char*>(std::aligned_alloc(256, total));
  if (a.raw == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::memset(a.raw, kGuardByte, kGuardBytes);
  std::memset(a.raw + kGuardBytes, 0xff, bytes);  // as uninitialized: NaN floats, -1 ints
  std::memset(a.raw + kGuardBytes + bytes, kGuardByte, kGuardBytes);
  PoisonGuards(a, true);
  S().used += bytes;
  ++S().allocations;
  *ptr = a.raw + kGuardBytes;
  S().allocs.emplace(a.raw + kGuardBytes, a);
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (ptr == nullptr) return cudaSuccess;
  if (ForbiddenInCapture("cudaFree")) return Fail(cudaErrorStreamCaptureUnsupported);
  auto it = S().allocs.find(static_cast<const char*>(ptr));
  if (it == S().allocs.end()) {
    std::fprintf(stderr, "[gpu_host] cudaFree(%p): not a live device allocation\n", ptr);
    return Fail(cudaErrorInvalidValue);
  }
  GuardsIntact(it->second, "at cudaFree");
  PoisonGuards(it->second, false);
  S().used -= it->second.bytes;
  std::free(it->second.raw);
  S().allocs.erase(it);
  return Ret(cudaSuccess);
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int flags) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  *ptr = nullptr;
  if (flags != cudaHostAllocDefault) return Fail(cudaErrorInvalidValue);
  *ptr = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (*ptr == nullptr) return Fail(cudaErrorMemoryAllocation);
  S().pinned.insert(*ptr);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (ptr == nullptr) return cudaSuccess;
  if (S().pinned.erase(ptr) == 0) {
    std::fprintf(stderr, "[gpu_host] cudaFreeHost(%p): not page-locked host memory\n", ptr);
    return Fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  *total_bytes = tinyserve::gpu_host::kTotalMemory;
  *free_bytes = tinyserve::gpu_host::kTotalMemory - S().used;
  return cudaSuccess;
}

namespace {
cudaError_t CheckCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  using tinyserve::gpu_host::CheckDeviceRange;
  cudaError_t e = cudaSuccess;
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) {
    e = CheckDeviceRange(dst, bytes, "cudaMemcpy destination");
  }
  if (e == cudaSuccess && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice)) {
    e = CheckDeviceRange(src, bytes, "cudaMemcpy source");
  }
  return e;
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (ForbiddenInCapture("cudaMemcpy (synchronous)")) {
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  if (S().sticky != cudaSuccess) return S().sticky;
  const cudaError_t e = CheckCopy(dst, src, bytes, kind);
  if (e != cudaSuccess) return Fail(e);
  CountCopy(kind, bytes);
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (S().sticky != cudaSuccess) return S().sticky;
  cudaError_t e = CheckCopy(dst, src, bytes, kind);
  if (e != cudaSuccess) return Fail(e);
  CountCopy(kind, bytes);
  e = Enqueue(stream, "cudaMemcpyAsync", [dst, src, bytes] {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
  return e == cudaSuccess ? e : Fail(e);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (ForbiddenInCapture("cudaMemset (synchronous)")) {
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (S().sticky != cudaSuccess) return S().sticky;
  cudaError_t e = CheckDeviceRange(dst, bytes, "cudaMemset");
  if (e != cudaSuccess) return Fail(e);
  e = Enqueue(stream, "cudaMemsetAsync", [dst, value, bytes] {
    std::memset(dst, value, bytes);
    return cudaSuccess;
  });
  return e == cudaSuccess ? e : Fail(e);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = new CUstream_st();
  (*stream)->flags = flags;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (stream == nullptr) return tinyserve::gpu_host::Fail(cudaErrorInvalidResourceHandle);
  auto& cap = S().capturing;
  cap.erase(std::remove(cap.begin(), cap.end(), stream), cap.end());
  delete stream->graph;
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if ((stream != nullptr && stream->capturing) || ForbiddenInCapture("cudaStreamSynchronize")) {
    if (stream != nullptr && stream->capturing && !stream->invalidated) {
      stream->invalidated = true;
      stream->invalid_reason = "cudaStreamSynchronize of the capturing stream";
    }
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  CheckAllGuards("at cudaStreamSynchronize");
  return Ret(cudaSuccess);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return tinyserve::gpu_host::Enqueue(stream, "cudaEventRecord", [event] {
    event->recorded = true;
    return cudaSuccess;
  });
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  (void)event;
  return tinyserve::gpu_host::Ret(cudaSuccess);
}
// Says nothing about speed: every interval is 0 ms.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  *ms = 0.0f;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (stream == nullptr) return Fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream
  if (stream->capturing) return Fail(cudaErrorIllegalAddress);
  if (mode == cudaStreamCaptureModeRelaxed) return Fail(cudaErrorNotSupported);
  stream->capturing = true;
  stream->invalidated = false;
  stream->invalid_reason.clear();
  stream->graph = new CUgraph_st();
  S().capturing.push_back(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  *graph = nullptr;
  if (stream == nullptr || !stream->capturing) return Fail(cudaErrorIllegalAddress);
  auto& cap = S().capturing;
  cap.erase(std::remove(cap.begin(), cap.end(), stream), cap.end());
  stream->capturing = false;
  CUgraph_st* g = stream->graph;
  stream->graph = nullptr;
  if (stream->invalidated) {
    std::fprintf(stderr, "[gpu_host] capture invalidated: %s\n", stream->invalid_reason.c_str());
    delete g;
    return Fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return tinyserve::gpu_host::Fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  using namespace tinyserve::gpu_host;
  std::lock_guard<std::recursive_mutex> lock(S().mu);
  if (exec == nullptr) return Fail(cudaErrorInvalidValue);
  if (S().sticky != cudaSuccess) return S().sticky;
  // Replayed into a capture, a graph's nodes are recorded again.
  for (auto& [name, op] : exec->nodes) {
    const cudaError_t e = Enqueue(stream, name.c_str(), op);
    if (e != cudaSuccess) return Fail(e);
  }
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
