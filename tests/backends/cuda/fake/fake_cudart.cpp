// A fake CUDA runtime, so that the CUDA backend's logic runs in CI without a GPU: the plugin's
// own object files are linked against this library instead of the real (static) cudart.
//
// "Device" memory is host memory (mmap); every stream has a worker thread that runs its operations
// in order, so copies, kernels and events complete asynchronously as on a GPU; events complete when
// their stream reaches them. Misuse the real runtime would punish is caught: an access outside a
// live allocation, or to freed memory (kept mapped PROT_NONE so its address is never reused), sets
// a sticky cudaErrorIllegalAddress. Source kernels: the test kernels (axpy, fill2d<double>, iota,
// scale_n, and cuda_bench's hcr_bench_inc) are emulated on the host by name, so launches, geometry
// and argument passing are checked for real; the image must be one NVRTC produced (an ELF cubin or
// PTX) that names the kernel.
//
// The number of devices: HCR_FAKE_CUDA_DEVICES (default 2), 1 GiB each, compute capability 9.0.
// Device d sits at PCI bus id 0000:<0x17 + 0x20·d>:00.0 (0000:17:00.0, 0000:37:00.0, ...), which
// the fake NVML (fake_nvml.cpp) lists in another order.
// Even-numbered devices have stream-ordered memory pools (cudaMallocAsync), odd ones do not, so
// that both allocation paths of the plugin run.
//
// Stream capture and graphs are in fake_graphs.cpp.
#include "fake_cudart.hpp"

#include <algorithm>
#include <cstdio>
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct FakeKernel;
struct CUlib_st {
  std::string image;
  std::vector<FakeKernel*> kernels;
};

using namespace fake;

namespace fake {

std::atomic<long> g_live{0};  // streams, events, libraries and cuBLAS handles not yet destroyed
// Static TLS (initial-exec), as a real runtime's would be in a library loaded with the process:
// this one is loaded with the plugin and unloaded when the runtime ends, and LeakSanitizer's scan
// at exit read the freed dynamic TLS block of the unloaded library and crashed
// ("Tracer caught signal 11", FakeCuda/CudaRuntime.TiledGemmMovesItsDataThroughTheDataManager).
__attribute__((tls_model("initial-exec"))) thread_local int t_device = 0;

}  // namespace fake

namespace {

struct Block {
  size_t bytes = 0;
  size_t mapped = 0;
  int device = -1;  // -1: pinned host memory
  bool live = true;
};

std::mutex g_mutex;
std::map<uintptr_t, Block> g_blocks;  // base address -> block (freed ones stay, unmapped)
std::vector<uint64_t> g_used;         // bytes allocated per device
std::set<std::pair<int, int>> g_peers;
std::set<CUstream_st*> g_streams;
std::atomic<int> g_sticky{cudaSuccess};
// Static TLS, as t_device.
__attribute__((tls_model("initial-exec"))) thread_local cudaError_t t_last = cudaSuccess;
constexpr uint64_t kDeviceMemory = uint64_t{1} << 30;

int device_count() {
  static const int n = [] {
    const char* v = std::getenv("HCR_FAKE_CUDA_DEVICES");
    int d = v ? std::atoi(v) : 2;
    return d < 0 ? 0 : d;
  }();
  return n;
}

void set_sticky(cudaError_t e) {
  int expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, e);
}

// Where [p, p+n) lies: -1 outside every block (pageable host memory), 0 inside a live block,
// 1 illegal (crosses a block's end, or inside a freed one). `device` gets the block's device.
int classify(const void* p, size_t n, int* device = nullptr, bool* pinned = nullptr) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_blocks.upper_bound(a);
  if (it == g_blocks.begin()) return -1;
  --it;
  const Block& b = it->second;
  if (a >= it->first + std::max(b.mapped, size_t{1})) return -1;
  if (!b.live) return 1;
  if (n > b.bytes || a - it->first > b.bytes - n) return 1;
  if (device) *device = b.device;
  if (pinned) *pinned = b.device < 0;
  return 0;
}

bool range_ok(const void* p, size_t n) { return n == 0 || classify(p, n) <= 0; }

// Inside one live device allocation: what a kernel may touch.
bool device_ok(const void* p, size_t n) {
  int device = -1;
  return n == 0 || (classify(p, n, &device) == 0 && device >= 0);
}

void* map_block(size_t bytes, int device) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (std::max(bytes, size_t{1}) + page - 1) / page * page;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_blocks[reinterpret_cast<uintptr_t>(p)] = {bytes, mapped, device, true};
  return p;
}

// Frees a block's pages but keeps its addresses reserved and inaccessible.
cudaError_t unmap_block(void* p, bool want_device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_blocks.end() || !it->second.live || (it->second.device >= 0) != want_device)
    return cudaErrorInvalidValue;
  it->second.live = false;
  madvise(p, it->second.mapped, MADV_DONTNEED);
  mprotect(p, it->second.mapped, PROT_NONE);
  if (want_device) g_used[static_cast<size_t>(it->second.device)] -= it->second.bytes;
  return cudaSuccess;
}

void stream_loop(CUstream_st* s) {
  for (;;) {
    std::function<void()> op;
    {
      std::unique_lock<std::mutex> lock(s->mutex);
      s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
      if (s->queue.empty()) return;
      op = std::move(s->queue.front());
      s->queue.pop_front();
      s->busy = true;
    }
    op();
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->busy = false;
    }
    s->cv.notify_all();
  }
}

void drain(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  s->cv.wait(lock, [&] { return s->queue.empty() && !s->busy; });
}

// A copy of `rows` rows, checked on the stream as the DMA engine would fault.
cudaError_t copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                   size_t rows, cudaStream_t stream) {
  if (cudaError_t e = sticky()) return fail(e);
  if (rows > 1 && (dpitch < width || spitch < width)) return fail(cudaErrorInvalidPitchValue);
  if (width == 0 || rows == 0) return cudaSuccess;
  const size_t dspan = (rows - 1) * dpitch + width, sspan = (rows - 1) * spitch + width;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  enqueue(stream, [=] {
    if (!range_ok(dst, dspan) || !range_ok(src, sspan)) {
      set_sticky(cudaErrorIllegalAddress);
      return;
    }
    for (size_t r = 0; r < rows; ++r)
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                   width);
  });
  return cudaSuccess;
}

}  // namespace

cudaError_t fake::fail(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

cudaError_t fake::sticky() { return static_cast<cudaError_t>(g_sticky.load()); }

void fake::enqueue(cudaStream_t s, std::function<void()> op) {
  if (s == nullptr) {  // the legacy default stream: run in the caller
    op();
    return;
  }
  if (captured(s, op)) return;  // recorded, not run
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->queue.push_back(std::move(op));
  }
  s->cv.notify_all();
}

// ---- source kernels emulated on the host --------------------------------------------------------

struct FakeKernel {
  std::string name;
  std::vector<size_t> params;  // bytes of each parameter
  // Runs the kernel over the whole grid with the parameter bytes; false: an illegal access.
  std::function<bool(dim3, dim3, const std::vector<std::vector<char>>&)> run;
};

namespace {

template <class T>
T arg(const std::vector<std::vector<char>>& a, size_t i) {
  T v;
  std::memcpy(&v, a[i].data(), sizeof v);
  return v;
}

FakeKernel* emulation(const std::string& name) {
  auto* k = new FakeKernel{name, {}, {}};
  if (name == "axpy") {  // (float* y, const float* x, float a, unsigned long long n)
    k->params = {8, 8, 4, 8};
    k->run = [](dim3 g, dim3 b, const std::vector<std::vector<char>>& a) {
      auto* y = arg<float*>(a, 0);
      auto* x = arg<const float*>(a, 1);
      const float s = arg<float>(a, 2);
      const auto n = arg<unsigned long long>(a, 3);
      const unsigned long long threads = 1ull * g.x * b.x;
      const unsigned long long m = std::min(n, threads);
      if (!device_ok(y, m * 4) || !device_ok(x, m * 4)) return false;
      for (unsigned long long i = 0; i < m; ++i) y[i] += s * x[i];
      return true;
    };
  } else if (name.find("fill2d") != std::string::npos && name.find("Id") != std::string::npos) {
    // fill2d<double>(double* m, ull rows, ull cols, ull ld, double v)
    k->params = {8, 8, 8, 8, 8};
    k->run = [](dim3 g, dim3 b, const std::vector<std::vector<char>>& a) {
      auto* m = arg<double*>(a, 0);
      const auto rows = arg<unsigned long long>(a, 1), cols = arg<unsigned long long>(a, 2),
                 ld = arg<unsigned long long>(a, 3);
      const double v = arg<double>(a, 4);
      const unsigned long long tr = std::min<unsigned long long>(rows, 1ull * g.y * b.y),
                               tc = std::min<unsigned long long>(cols, 1ull * g.x * b.x);
      if (tr > 0 && tc > 0 && !device_ok(m, ((tr - 1) * ld + tc) * 8)) return false;
      for (unsigned long long r = 0; r < tr; ++r)
        for (unsigned long long c = 0; c < tc; ++c)
          m[r * ld + c] = v + static_cast<double>(r * 1000 + c);
      return true;
    };
  } else if (name == "scale_n") {  // (float* x, float a, int n)
    k->params = {8, 4, 4};
    k->run = [](dim3 g, dim3 b, const std::vector<std::vector<char>>& a) {
      auto* x = arg<float*>(a, 0);
      const float s = arg<float>(a, 1);
      const int n = arg<int>(a, 2);
      const unsigned long long m = std::min<unsigned long long>(n < 0 ? 0 : n, 1ull * g.x * b.x);
      if (!device_ok(x, m * 4)) return false;
      for (unsigned long long i = 0; i < m; ++i) x[i] *= s;
      return true;
    };
  } else if (name == "hcr_bench_inc") {  // bench/cuda_bench.cpp: (float* x, ull n), x[i] += 1
    k->params = {8, 8};
    k->run = [](dim3 g, dim3 b, const std::vector<std::vector<char>>& a) {
      auto* x = arg<float*>(a, 0);
      const auto n = arg<unsigned long long>(a, 1);
      const unsigned long long m = std::min(n, 1ull * g.x * b.x);
      if (!device_ok(x, m * 4)) return false;
      for (unsigned long long i = 0; i < m; ++i) x[i] += 1;
      return true;
    };
  } else if (name == "iota") {  // (unsigned long long* out, unsigned long long n, int mul)
    k->params = {8, 8, 4};
    k->run = [](dim3 g, dim3 b, const std::vector<std::vector<char>>& a) {
      auto* out = arg<unsigned long long*>(a, 0);
      const auto n = arg<unsigned long long>(a, 1);
      const int mul = arg<int>(a, 2);
      const unsigned long long m = std::min<unsigned long long>(n, 1ull * g.x * b.x);
      if (!device_ok(out, m * 8)) return false;
      for (unsigned long long i = 0; i < m; ++i) out[i] = i * static_cast<unsigned long long>(mul);
      return true;
    };
  }
  return k;
}

}  // namespace

// ---- what the fake cuBLAS uses ------------------------------------------------------------------

/// Runs `fn(ctx)` on `stream` in order with its other work.
FAKE_EXPORT void hcr_fake_enqueue(cudaStream_t stream, void (*fn)(void*), void* ctx) {
  enqueue(stream, [fn, ctx] { fn(ctx); });
}

/// 1 when [p, p+bytes) lies inside one live device allocation.
FAKE_EXPORT int hcr_fake_device_range(const void* p, size_t bytes) { return device_ok(p, bytes); }

/// Marks the context broken, as a faulting kernel would.
FAKE_EXPORT void hcr_fake_fault() { set_sticky(cudaErrorIllegalAddress); }

/// The fake cuBLAS counts its handles here too.
FAKE_EXPORT void hcr_fake_track(int delta) { g_live += delta; }

/// Objects of the fake not yet released: streams, events, libraries, cuBLAS handles, live device
/// allocations and pinned blocks. Zero once a plugin instance is destroyed.
FAKE_EXPORT long hcr_fake_live() {
  long blocks = 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [base, b] : g_blocks) blocks += b.live;
  return g_live.load() + blocks;
}

/// The operation the context failed with (cudaSuccess while healthy).
FAKE_EXPORT int hcr_fake_sticky() { return g_sticky.load(); }

// ---- the runtime API the plugin uses ------------------------------------------------------------

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "Fake CUDA device %d", device);
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = kDeviceMemory;
  prop->multiProcessorCount = 4;
  prop->maxThreadsPerBlock = 1024;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->pciDomainID = 0;
  prop->pciBusID = 0x17 + 0x20 * device;
  prop->pciDeviceID = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  if (bus_id == nullptr || len < 13) return fail(cudaErrorInvalidValue);
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:%02X:00.0", 0x17 + 0x20 * device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  *value = attr == cudaDevAttrClockRate              ? 1000000
           : attr == cudaDevAttrMemoryPoolsSupported ? (device % 2 == 0)
                                                     : 0;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  if (cudaError_t e = sticky()) return e;
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorInvalidKernelImage: return "cudaErrorInvalidKernelImage";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorGraphExecUpdateFailure: return "cudaErrorGraphExecUpdateFailure";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered (fake)";
    default: return "fake CUDA error";
  }
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;  // "create the context"
  if (forbidden_in_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  // Like the real one, waits for the device's work first.
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    streams.assign(g_streams.begin(), g_streams.end());
  }
  for (CUstream_st* s : streams) drain(s);
  return fail(unmap_block(p, true));
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (cudaError_t e = sticky()) return fail(e);
  if (forbidden_in_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_used.resize(static_cast<size_t>(device_count()), 0);
    if (g_used[static_cast<size_t>(t_device)] + bytes > kDeviceMemory)
      return fail(cudaErrorMemoryAllocation);
    g_used[static_cast<size_t>(t_device)] += bytes;
  }
  if (bytes == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  *p = map_block(bytes, t_device);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
  const int device = s ? s->device : t_device;
  if (device % 2 != 0) return fail(cudaErrorNotSupported);  // this fake device has no pools
  const int saved = t_device;
  t_device = device;
  cudaError_t e = cudaMalloc(p, bytes);
  t_device = saved;
  return e;
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (p == nullptr) return cudaSuccess;
  int device = -1;
  if (classify(p, 1, &device) != 0 || device < 0) return fail(cudaErrorInvalidValue);
  enqueue(s, [p] {
    if (unmap_block(p, true) != cudaSuccess) set_sticky(cudaErrorIllegalAddress);
  });
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= device_count() || device % 2 != 0) return fail(cudaErrorNotSupported);
  *pool = reinterpret_cast<cudaMemPool_t>(static_cast<uintptr_t>(device + 1));
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* desc, size_t n) {
  if (pool == nullptr || n == 0 || desc->location.type != cudaMemLocationTypeDevice ||
      desc->location.id < 0 || desc->location.id >= device_count())
    return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  *p = map_block(bytes, -1);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* p) { return fail(unmap_block(p, false)); }

// Synchronous calls an application (or bench/cuda_bench.cpp) uses on its own side.
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (forbidden_in_capture()) return fail(cudaErrorStreamCaptureImplicit);
  if (!range_ok(dst, n) || !range_ok(src, n)) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, n);
  return sticky();
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  if (forbidden_in_capture()) return fail(cudaErrorStreamCaptureImplicit);
  if (classify(p, n) != 0) return fail(cudaErrorInvalidValue);
  std::memset(p, value, n);
  return sticky();
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* at, const void* p) {
  std::memset(at, 0, sizeof *at);
  int device = -1;
  bool pinned = false;
  if (classify(p, 1, &device, &pinned) == 0) {
    at->type = pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    at->device = pinned ? 0 : device;
    at->devicePointer = const_cast<void*>(p);
    at->hostPointer = pinned ? const_cast<void*>(p) : nullptr;
  } else {
    at->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  auto* st = new CUstream_st;
  ++g_live;
  st->device = t_device;
  st->worker = std::thread(stream_loop, st);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_streams.insert(st);
  *s = st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_streams.erase(s);
  }
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->stop = true;
  }
  s->cv.notify_all();
  s->worker.join();
  delete s;
  --g_live;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (s != nullptr && capturing_refuses_sync(s)) return fail(cudaErrorStreamCaptureUnsupported);
  if (s != nullptr) drain(s);
  return sticky();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  *e = new CUevent_st;
  ++g_live;
  (*e)->flags = flags;
  (*e)->device = t_device;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  --g_live;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (cudaError_t err = sticky()) return fail(err);
  // As on a GPU: an event belongs to its device's context, and so must the stream.
  if (s != nullptr && s->device != e->device) return fail(cudaErrorInvalidResourceHandle);
  if (record_in_capture(e, s)) return cudaSuccess;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    gen = ++e->recorded;
  }
  enqueue(s, [e, gen] {
    // Notified under the lock: a waiter that wakes may destroy the event right away.
    std::lock_guard<std::mutex> lock(e->mutex);
    e->completed = std::max(e->completed, gen);
    e->when = Clock::now();
    e->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (captured_refuses_sync(e)) return fail(cudaErrorCapturedEvent);
  std::unique_lock<std::mutex> lock(e->mutex);
  const uint64_t want = e->recorded;
  e->cv.wait(lock, [&] { return e->completed >= want; });
  return sticky();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle);
  std::scoped_lock lock(start->mutex, end->mutex);  // an event may be a start here, an end there
  if (start->completed < start->recorded || end->completed < end->recorded || start->recorded == 0)
    return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
  return copy2d(dst, n, src, n, n, 1, s);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind, cudaStream_t s) {
  return copy2d(dst, dpitch, src, spitch, width, height, s);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dd, const void* src, int sd, size_t n,
                                cudaStream_t s) {
  int d = -1, e = -1;
  if (classify(dst, n, &d) != 0 || classify(src, n, &e) != 0 || d != dd || e != sd)
    return fail(cudaErrorInvalidValue);
  return copy2d(dst, n, src, n, n, 1, s);
}

cudaError_t cudaMemcpy3DPeerAsync(const cudaMemcpy3DPeerParms* p, cudaStream_t s) {
  if (p->extent.depth != 1) return fail(cudaErrorInvalidValue);
  int d = -1, e = -1;
  if (classify(p->dstPtr.ptr, 1, &d) != 0 || classify(p->srcPtr.ptr, 1, &e) != 0 ||
      d != p->dstDevice || e != p->srcDevice)
    return fail(cudaErrorInvalidValue);
  return copy2d(p->dstPtr.ptr, p->dstPtr.pitch, p->srcPtr.ptr, p->srcPtr.pitch, p->extent.width,
                p->extent.height, s);
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_peers.insert({t_device, peer}).second) return fail(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaLibraryLoadData(cudaLibrary_t* lib, const void* code, cudaJitOption*, void**,
                                unsigned int, cudaLibraryOption*, void**, unsigned int) {
  const char* c = static_cast<const char*>(code);
  // A cubin is an ELF file; PTX is text. Anything else is not what NVRTC produced.
  const bool elf = std::memcmp(c,
                               "\x7f"
                               "ELF",
                               4) == 0;
  const bool ptx = std::strstr(c, ".version") != nullptr && std::strstr(c, ".target") != nullptr;
  if (!elf && !ptx) return fail(cudaErrorInvalidKernelImage);
  auto* l = new CUlib_st;
  ++g_live;
  if (elf) {
    // The image's size is in its ELF header: section table offset + entries.
    uint64_t shoff = 0;
    uint16_t shentsize = 0, shnum = 0;
    std::memcpy(&shoff, c + 0x28, 8);
    std::memcpy(&shentsize, c + 0x3a, 2);
    std::memcpy(&shnum, c + 0x3c, 2);
    const uint64_t size = shoff + uint64_t{shentsize} * shnum;
    if (size < 64 || size > (uint64_t{64} << 20)) {
      delete l;
      --g_live;
      return fail(cudaErrorInvalidKernelImage);
    }
    l->image.assign(c, size);
  } else {
    l->image = c;
  }
  *lib = l;
  return cudaSuccess;
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t* kernel, cudaLibrary_t lib, const char* name) {
  // The symbol must be in the image, as the driver would look it up there.
  if (lib->image.find(std::string(name) + '\0') == std::string::npos &&
      lib->image.find(std::string(name) + '(') == std::string::npos)
    return fail(cudaErrorSymbolNotFound);
  FakeKernel* k = emulation(name);
  lib->kernels.push_back(k);
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t lib) {
  for (FakeKernel* k : lib->kernels) delete k;
  delete lib;
  --g_live;
  return cudaSuccess;
}

cudaError_t cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset, size_t* size) {
  auto* k = static_cast<const FakeKernel*>(func);
  if (!k->run) return fail(cudaErrorNotSupported);  // not one we know: layout unknown
  if (index >= k->params.size()) return fail(cudaErrorInvalidValue);
  size_t off = 0;
  for (size_t i = 0; i < index; ++i) off = (off + k->params[i] + 7) / 8 * 8;
  *offset = off;
  *size = k->params[index];
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t,
                             cudaStream_t s) {
  if (cudaError_t e = sticky()) return fail(e);
  auto* k = static_cast<const FakeKernel*>(func);
  if (!k->run) return fail(cudaErrorInvalidDeviceFunction);
  // A launch goes to the current device's context: the stream must belong to it.
  if (s != nullptr && s->device != t_device) return fail(cudaErrorInvalidResourceHandle);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 ||
      1ull * block.x * block.y * block.z > 1024)
    return fail(cudaErrorInvalidConfiguration);
  // The argument bytes are read now, at the launch, as the real runtime does.
  std::vector<std::vector<char>> a;
  for (size_t i = 0; i < k->params.size(); ++i) {
    const char* p = static_cast<const char*>(args[i]);
    a.emplace_back(p, p + k->params[i]);
  }
  auto run = k->run;
  enqueue(s, [run, grid, block, a] {
    if (sticky() == cudaSuccess && !run(grid, block, a)) set_sticky(cudaErrorIllegalAddress);
  });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  if (cudaError_t err = sticky()) return fail(err);
  if (cudaError_t captured_result; wait_in_capture(s, e, captured_result)) return captured_result;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    gen = e->recorded;
  }
  enqueue(s, [e, gen] {
    std::unique_lock<std::mutex> lock(e->mutex);
    e->cv.wait(lock, [&] { return e->completed >= gen; });
  });
  return cudaSuccess;
}

}  // extern "C"
