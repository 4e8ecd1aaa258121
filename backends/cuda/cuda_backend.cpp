// The CUDA backend plugin: one device per visible GPU (or those the `devices` option names), with
// device memory, pinned host memory, asynchronous 2-D copies, the built-in BLAS kernels on cuBLAS
// and cuSOLVER, native launcher functions, CUDA C++ source kernels compiled with NVRTC, device
// graphs captured into CUDA graphs (cuda_graphs.cpp), and each GPU's energy through NVML. Without a
// driver or a GPU it loads and reports no devices, saying why through the host's log.
#include "cuda_blas.hpp"
#include "cuda_check.hpp"
#include "cuda_device.hpp"
#include "cuda_graphs.hpp"
#include "cuda_libs.hpp"
#include "nvml_meter.hpp"
#include "nvrtc_cache.hpp"

#include <hcr/sdk/backend.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace hcr::cuda {
namespace {

using sdk::Error;

constexpr uint32_t kMemoryMagic = 0x68637243;  // "Crch": tells our allocations from stray pointers
constexpr uint32_t kKernelMagic = 0x6863724b;

/// A device allocation: what hcr_memory_t points to.
struct DeviceMemory {
  uint32_t magic = kMemoryMagic;
  const void* owner = nullptr;  // the backend instance
  size_t device = 0;            // the plugin's device index
  char* ptr = nullptr;
  uint64_t bytes = 0;
};

/// A source kernel loaded for one device; unloaded when the last launch using it has completed.
struct Module {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  std::string name;
  bool params_known = false;
  std::vector<size_t> param_sizes;  // bytes of each kernel parameter, from the compiled code
  ~Module() {
    if (library != nullptr && cudaLibraryUnload(library) != cudaSuccess) (void)cudaGetLastError();
  }
};

enum class KernelKind { blas, native, source };

struct CudaKernel {
  uint32_t magic = kKernelMagic;
  KernelKind kind = KernelKind::blas;
  size_t device = 0;
  std::string name;
  Builtin builtin;             // blas
  hcr_kernel_fn fn = nullptr;  // native
  void* user_data = nullptr;
  std::shared_ptr<const Module> module;  // source
};

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && x[0] == '/')
    return std::string(x) + "/hcr/cuda";
  if (const char* h = std::getenv("HOME"); h && h[0] == '/')
    return std::string(h) + "/.cache/hcr/cuda";
  return {};
}

// "share:K/N" (hcr::mpi::split_node: local rank K of N on a node): K and N; nullopt for any other
// form. Throws on a malformed share.
std::optional<std::pair<int, int>> parse_share(const std::string& text) {
  if (text.rfind("share:", 0) != 0) return std::nullopt;
  int k = -1, n = -1;
  char slash = 0;
  std::istringstream in(text.substr(6));
  in >> k >> slash >> n;
  if (!in || slash != '/' || !in.eof() || n < 1 || n > 4096 || k < 0 || k >= n)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                "option 'devices' = '" + text +
                    "': a share is \"share:K/N\" with 0 <= K < N (local rank K of N)");
  return std::pair{k, n};
}

// "0,2" -> {0, 2}; "" or "all" or a share -> {} (every device; a share is applied once the count is
// known).
std::vector<int> parse_devices(const std::string& text) {
  std::vector<int> out;
  if (text.empty() || text == "all" || parse_share(text)) return out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    size_t pos = 0;
    long v = -1;
    try {
      v = std::stol(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (item.empty() || pos != item.size() || v < 0 || v > 4095)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "option 'devices' = '" + text + "': '" + item +
                      "' is not a device index (a comma-separated list like \"0,2\", or \"all\")");
    if (std::find(out.begin(), out.end(), static_cast<int>(v)) != out.end())
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "option 'devices' = '" + text + "' names device " + item + " twice");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

// Whether the GPU can read `bytes` at `p` directly: pinned, registered, managed or device memory.
// Pageable memory goes through the staging buffers instead.
bool device_accessible(const void* p, uint64_t span) {
  for (const char* q : {static_cast<const char*>(p), static_cast<const char*>(p) + span - 1}) {
    cudaPointerAttributes at{};
    if (cudaPointerGetAttributes(&at, q) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (at.type != cudaMemoryTypeHost && at.type != cudaMemoryTypeDevice &&
        at.type != cudaMemoryTypeManaged)
      return false;
  }
  return true;
}

// A 2-D copy, as a 1-D one when both sides are contiguous.
cudaError_t copy_rect(void* dst, uint64_t dpitch, const void* src, uint64_t spitch, uint64_t width,
                      uint64_t rows, cudaStream_t stream) {
  if (rows <= 1 || (dpitch == width && spitch == width))
    return cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDefault, stream);
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, stream);
}

class CudaBackend final : public sdk::Backend, private GraphNodeWork {
 public:
  explicit CudaBackend(const sdk::CreateContext& ctx) : Backend(ctx) {
    const std::string devices = ctx.options.get("devices", "");
    const long long streams = ctx.options.get_int("streams", 2);
    const long long copy_threads = ctx.options.get_int("copy_threads", 0);
    std::string cache_dir = ctx.options.get("cache_dir", default_cache_dir());
    // As the cpu backend's powercap: where the meter reads from, or "off" (or empty) for none.
    std::string nvml = ctx.options.get("nvml", NvmlMeter::kDefaultLibrary);
    ctx.options.check_all_used();
    if (nvml == "off") nvml.clear();
    if (!nvml.empty() && nvml.find('/') != std::string::npos && nvml[0] != '/')
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "option 'nvml' = '" + nvml +
                                                  "': must be \"off\", a library name the loader "
                                                  "searches (" +
                                                  NvmlMeter::kDefaultLibrary +
                                                  ") or an absolute path");
    if (streams < 1 || streams > 64)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "option 'streams' = " + std::to_string(streams) + ": must be 1 to 64");
    streams_ = static_cast<uint32_t>(streams);
    if (copy_threads < 0 || copy_threads > 64)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "option 'copy_threads' = " + std::to_string(copy_threads) +
                      ": must be 0 (automatic) or 1 to 64");
    copy_threads_ = static_cast<uint32_t>(copy_threads);
    const std::vector<int> wanted = parse_devices(devices);
    if (cache_dir.rfind("~/", 0) == 0)
      if (const char* h = std::getenv("HOME"); h && *h) cache_dir = h + cache_dir.substr(1);
    if (!cache_dir.empty() && cache_dir[0] != '/')
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "option 'cache_dir' = '" + cache_dir +
                                                  "': must be an absolute path (or empty: "
                                                  "no kernel cache on disk)");
    cache_ = std::make_unique<NvrtcCache>(cache_dir, host());

    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      (void)cudaGetLastError();
      // No driver at all is the normal state of a CPU-only machine: info. A driver that is there
      // but refuses (too old for this runtime, broken install) deserves a warning.
      const bool driver = driver_library_present();
      std::string why = "no devices: cudaGetDeviceCount failed: " + error_text(e) +
                        (driver ? "" : " (no NVIDIA driver: libcuda.so.1 not found)");
      if (driver && e != cudaErrorNoDevice) {
        int drv = 0;
        if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
          why += " (driver supports CUDA " + std::to_string(drv / 1000) + "." +
                 std::to_string(drv % 1000 / 10) + ", the plugin was built with " +
                 std::to_string(CUDART_VERSION / 1000) + "." +
                 std::to_string(CUDART_VERSION % 1000 / 10) + ")";
        host().warn(why);
      } else {
        host().info(why);
      }
      return;
    }
    if (count == 0) {
      host().info("no devices: the driver reports no GPU (check CUDA_VISIBLE_DEVICES)");
      return;
    }
    std::vector<int> ordinals = wanted;
    if (const auto share = parse_share(devices)) {
      // Local rank K of N takes the GPUs whose ordinal is K modulo N; with fewer GPUs than ranks,
      // ranks share them (GPU K % count).
      const auto [k, n] = *share;
      for (int i = k; i < count; i += n) ordinals.push_back(i);
      if (ordinals.empty()) ordinals.push_back(k % count);
    } else if (ordinals.empty()) {
      for (int i = 0; i < count; ++i) ordinals.push_back(i);
    }
    for (int o : ordinals)
      if (o >= count)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "option 'devices' = '" + devices + "': there is no CUDA device " +
                        std::to_string(o) + " (" + std::to_string(count) + " visible)");
    for (int o : ordinals) {
      GpuInfo g = query_gpu(o);
      host().info("device " + std::to_string(gpus_.size()) + ": " + g.arch + ", " +
                  std::to_string(g.memory_bytes >> 20) + " MiB, " +
                  std::to_string(g.multiprocessors) + " SMs");
      gpus_.push_back(
          std::make_unique<Gpu>(std::move(g), gpus_.size(), streams_, copy_threads_, host()));
    }
    // Opened now, not at the first reading: joules count from the plugin's creation.
    if (!nvml.empty()) {
      std::vector<int> metered;
      for (auto& g : gpus_) metered.push_back(g->ordinal());
      meter_ = std::make_unique<NvmlMeter>(nvml, metered, host());
    }
  }

  // Waits for every outstanding operation, frees what the host left allocated (plugin_destroy
  // frees everything the plugin owns), then each Gpu joins its threads before its streams go.
  ~CudaBackend() override {
    for (auto& g : gpus_) g->wait_idle();
    if (!memory_.empty() || !pinned_.empty())
      host().debug("freeing " + std::to_string(memory_.size()) + " device allocation(s) and " +
                   std::to_string(pinned_.size()) + " pinned block(s) left at destruction");
    for (DeviceMemory* m : memory_) {
      gpus_[m->device]->release(m->ptr);
      m->magic = 0;
      delete m;
    }
    for (void* p : pinned_) cudaFreeHost(p);
    graphs_.destroy_all();
    for (CudaKernel* k : kernels_) delete k;
    (void)cudaGetLastError();
    while (!gpus_.empty()) gpus_.pop_back();
  }

  size_t device_count() override { return gpus_.size(); }

  void device_info(size_t device, sdk::DeviceInfo& info) override {
    const GpuInfo& g = gpu(device).info();
    info.name = g.name;
    info.arch = g.arch;
    info.kind = HCR_DEVICE_GPU;
    info.flags = HCR_DEVICE_PINNED_HOST;
    info.memory_bytes = g.memory_bytes;
    info.compute_units = g.multiprocessors;
    info.concurrency = streams_;
    info.peak_gflops = g.peak_gflops;
    info.link_bandwidth = 0;  // unknown until measured; the cost model learns it
    info.link_latency = 0;
  }

  // ---- memory ----------------------------------------------------------------------------------

  hcr_memory_t* mem_alloc(size_t device, uint64_t bytes) override {
    Gpu& g = started(device);
    void* p = g.allocate(bytes);
    try {
      auto m = std::make_unique<DeviceMemory>();
      m->owner = this;
      m->device = device;
      m->ptr = static_cast<char*>(p);
      m->bytes = bytes;
      std::lock_guard<std::mutex> lock(alloc_mutex_);
      memory_.insert(m.get());
      return reinterpret_cast<hcr_memory_t*>(m.release());
    } catch (...) {
      g.release(p);
      throw;
    }
  }

  void mem_free(size_t, hcr_memory_t* memory) noexcept override {
    auto* m = reinterpret_cast<DeviceMemory*>(memory);
    {
      std::lock_guard<std::mutex> lock(alloc_mutex_);
      if (m == nullptr || memory_.erase(m) == 0) {
        host().warn("mem_free of memory this plugin did not allocate: ignored");
        return;
      }
    }
    gpus_[m->device]->release(m->ptr);
    m->magic = 0;
    delete m;
  }

  void* host_alloc(uint64_t bytes) override {
    if (gpus_.empty()) throw Error(HCR_ERROR_UNSUPPORTED, "no CUDA device to pin memory for");
    Gpu& g = started(0);
    DeviceGuard guard(g.ordinal());
    void* p = nullptr;
    // Portable: pinned for every device, not only the one current here.
    if (cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); e != cudaSuccess) {
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw Error(HCR_ERROR_OUT_OF_MEMORY,
                    "cannot pin " + std::to_string(bytes) + " bytes of host memory");
      }
      throw_cuda(e, "cudaHostAlloc");
    }
    try {
      std::lock_guard<std::mutex> lock(alloc_mutex_);
      pinned_.insert(p);
    } catch (...) {
      cudaFreeHost(p);
      throw;
    }
    return p;
  }

  void host_free(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(alloc_mutex_);
      if (pinned_.erase(ptr) == 0) {
        host().warn("host_free of memory this plugin did not pin: ignored");
        return;
      }
    }
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
  }

  void copy(const hcr_copy_args_t& a) override {
    if (a.done == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "copy without done");
    Gpu& g = started(a.device);
    if ((a.src_memory == nullptr) == (a.src_host == nullptr) ||
        (a.dst_memory == nullptr) == (a.dst_host == nullptr))
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "copy: each end needs exactly one of memory and host pointer");
    if (a.src_memory == nullptr && a.dst_memory == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "copy between two host pointers: not a device copy");
    if (a.rows > 1 && (a.src_pitch < a.width || a.dst_pitch < a.width))
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "copy: pitch (source " + std::to_string(a.src_pitch) +
                                                  ", destination " + std::to_string(a.dst_pitch) +
                                                  ") smaller than the row width " +
                                                  std::to_string(a.width));
    const uint64_t src_pitch = a.rows > 1 ? a.src_pitch : a.width;
    const uint64_t dst_pitch = a.rows > 1 ? a.dst_pitch : a.width;
    DeviceMemory* sm = memory(a.src_memory, "source");
    DeviceMemory* dm = memory(a.dst_memory, "destination");
    char* src = sm ? sm->ptr + a.src_offset : static_cast<char*>(const_cast<void*>(a.src_host));
    char* dst = dm ? dm->ptr + a.dst_offset : static_cast<char*>(a.dst_host);
    if (sm) check_extent(*sm, a.src_offset, src_pitch, a.width, a.rows, "source");
    if (dm) check_extent(*dm, a.dst_offset, dst_pitch, a.width, a.rows, "destination");

    if (a.width == 0 || a.rows == 0) {  // nothing to move: report at once
      g.begin_op();
      g.complete_now(a.done, a.done_user_data, nullptr);
      return;
    }
    const uint64_t w = a.width, rows = a.rows;

    if (sm && dm) {
      if (sm->device == dm->device) {
        g.run_on(g.d2d(), a.done, a.done_user_data, false, [&](Lane& l) -> hcr_error_t* {
          HCR_CUDA_CHECK(copy_rect(dst, dst_pitch, src, src_pitch, w, rows, l.stream()));
          return nullptr;
        });
        return;
      }
      Gpu& gs = started(sm->device);
      Gpu& gd = started(dm->device);
      enable_peer(gs, gd);
      g.run_on(g.d2d(), a.done, a.done_user_data, false, [&](Lane& l) -> hcr_error_t* {
        if (rows <= 1 || (src_pitch == w && dst_pitch == w)) {
          HCR_CUDA_CHECK(
              cudaMemcpyPeerAsync(dst, gd.ordinal(), src, gs.ordinal(), w * rows, l.stream()));
        } else {
          cudaMemcpy3DPeerParms p{};
          p.srcPtr = cudaPitchedPtr{src, src_pitch, w, rows};
          p.srcDevice = gs.ordinal();
          p.dstPtr = cudaPitchedPtr{dst, dst_pitch, w, rows};
          p.dstDevice = gd.ordinal();
          p.extent = cudaExtent{w, rows, 1};
          HCR_CUDA_CHECK(cudaMemcpy3DPeerAsync(&p, l.stream()));
        }
        return nullptr;
      });
      return;
    }

    const bool to_device = dm != nullptr;
    char* host_side = to_device ? src : dst;
    const uint64_t host_pitch = to_device ? src_pitch : dst_pitch;
    const uint64_t host_span = (rows - 1) * host_pitch + w;
    bool direct = false;
    {
      DeviceGuard guard(g.ordinal());
      direct = device_accessible(host_side, host_span);
    }
    if (direct) {
      g.run_on(to_device ? g.h2d() : g.d2h(), a.done, a.done_user_data, false,
               [&](Lane& l) -> hcr_error_t* {
                 HCR_CUDA_CHECK(copy_rect(dst, dst_pitch, src, src_pitch, w, rows, l.stream()));
                 return nullptr;
               });
      return;
    }
    StagedCopy job;
    job.host = host_side;
    job.host_pitch = host_pitch;
    job.device = to_device ? dst : src;
    job.device_pitch = to_device ? dst_pitch : src_pitch;
    job.width = w;
    job.rows = rows;
    job.done = a.done;
    job.user = a.done_user_data;
    Stager& s = g.stager(to_device);
    g.begin_op();
    try {
      s.submit(job);
    } catch (...) {
      g.end_op();
      throw;
    }
  }

  // ---- kernels ---------------------------------------------------------------------------------

  hcr_kernel_t* kernel_get(size_t device, const hcr_kernel_desc_t& desc) override {
    Gpu& g = gpu(device);
    const std::string name = desc.name;
    const std::string api = desc.api ? desc.api : "";
    auto k = std::make_unique<CudaKernel>();
    k->device = device;
    k->name = name;
    switch (desc.kind) {
      case HCR_IMPL_BUILTIN: {
        auto b = builtin(name);
        if (!b) throw Error(HCR_ERROR_NOT_FOUND, "no built-in kernel '" + name + "'");
        // Declined (never placed here) when a library it needs is missing: the rest stay offered.
        if (!cublas().ok)
          throw Error(HCR_ERROR_UNSUPPORTED,
                      "built-in " + name + " needs cuBLAS: " + cublas().error);
        if (needs_cusolver(b->op) && !cusolver().ok)
          throw Error(HCR_ERROR_UNSUPPORTED,
                      "built-in " + name + " needs cuSOLVER: " + cusolver().error);
        if (b->dtype == HCR_DTYPE_BF16 && g.info().cc_major < 8)
          throw Error(HCR_ERROR_UNSUPPORTED, "gemm_bf16 needs compute capability 8.0 or later, " +
                                                 g.info().name + " has " + cc(g));
        k->kind = KernelKind::blas;
        k->builtin = *b;
        break;
      }
      case HCR_IMPL_NATIVE_FUNCTION:
        if (api != "cuda")
          throw Error(HCR_ERROR_UNSUPPORTED, "runs cuda native functions, not " + api + " ones");
        if (desc.fn == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "native function '" + name + "' is NULL");
        k->kind = KernelKind::native;
        k->fn = desc.fn;
        k->user_data = desc.user_data;
        break;
      case HCR_IMPL_SOURCE:
        if (api != "cuda")
          throw Error(HCR_ERROR_UNSUPPORTED, "compiles cuda source, not " + api + " code");
        if (desc.source == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "source kernel '" + name + "' has no source");
        k->kind = KernelKind::source;
        k->module = load_source(g, name, desc);
        break;
      case HCR_IMPL_HOST_FUNCTION:
        throw Error(HCR_ERROR_UNSUPPORTED,
                    "runs no host functions: a GPU runs cuda native functions, sources and its "
                    "built-ins");
      default:
        throw Error(HCR_ERROR_UNSUPPORTED,
                    "runs cuda native functions, cuda sources and its built-ins, not " +
                        (api.empty() ? std::string("this kind of kernel") : api + " binaries"));
    }
    std::lock_guard<std::mutex> lock(alloc_mutex_);
    kernels_.insert(k.get());
    return reinterpret_cast<hcr_kernel_t*>(k.release());
  }

  void kernel_release(hcr_kernel_t* kernel) noexcept override {
    auto* k = reinterpret_cast<CudaKernel*>(kernel);
    {
      std::lock_guard<std::mutex> lock(alloc_mutex_);
      if (k == nullptr || kernels_.erase(k) == 0) return;
    }
    k->magic = 0;
    delete k;  // a source module lives on in launches still in flight
  }

  void launch(const hcr_launch_args_t& a) override {
    auto* k = reinterpret_cast<CudaKernel*>(a.kernel);
    if (k == nullptr || k->magic != kKernelMagic)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch of a kernel this plugin did not create");
    if (k->device != a.device)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "kernel '" + k->name + "' was made for device " + std::to_string(k->device) +
                      ", launched on device " + std::to_string(a.device));
    Gpu& g = started(a.device);
    const bool measure = (a.flags & HCR_LAUNCH_MEASURE) != 0;
    std::vector<void*> ptrs = device_pointers(a);
    switch (k->kind) {
      case KernelKind::blas: {
        const BlasCall call = make_call(k->builtin, a, ptrs.data());
        InfoCheck info;
        if (needs_cusolver(call.kernel.op)) {
          // The factorization's status comes back through a pinned slot read at completion: a
          // matrix that is not positive definite, or a zero pivot, fails the launch there.
          info.to_error = [call](int value) { return factor_error(call, value); };
          info.host = g.take_info();
        }
        int* slot = info.host;
        g.run_on(
            g.compute_lane(), a.done, a.done_user_data, measure,
            [&](Lane& l) -> hcr_error_t* {
              enqueue_blas(l, call, slot);
              return nullptr;
            },
            nullptr, std::move(info));
        return;
      }
      case KernelKind::native: {
        // The function sees device pointers in `host`; `memory` and `offset` stay as given.
        std::vector<hcr_arg_t> args(a.args, a.args + a.num_args);
        for (size_t i = 0; i < args.size(); ++i) args[i].host = ptrs[i];
        g.run_on(g.compute_lane(), a.done, a.done_user_data, measure, [&](Lane& l) -> hcr_error_t* {
          hcr_exec_context_t ctx = sdk::exec_context(a, l.index(), static_cast<void*>(l.stream()),
                                                     const_cast<int*>(g.ordinal_ptr()));
          ctx.args = args.data();
          return sdk::run_host_function(k->fn, k->user_data, ctx);
        });
        return;
      }
      case KernelKind::source: launch_source(g, *k, a, ptrs, measure); return;
    }
  }

  // ---- device graphs (ABI 1.2): captured into CUDA graphs (cuda_graphs.cpp) -------------------

  hcr_graph_t* graph_create(sdk::GraphDesc d) override {
    Gpu& g = started(d.device);
    // Every launch keeps the source kernels' modules alive until its done.
    auto modules = std::make_shared<std::vector<std::shared_ptr<const Module>>>();
    for (size_t i = 0; i < d.nodes.size(); ++i) {
      const auto* k = reinterpret_cast<const CudaKernel*>(d.nodes[i].kernel);
      const std::string which = "graph node " + std::to_string(i);
      if (k->magic != kKernelMagic)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, which + ": a kernel this plugin did not create");
      if (k->device != d.device)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + ": kernel '" + k->name + "' was made for device " +
                        std::to_string(k->device) + ", the graph is on device " +
                        std::to_string(d.device));
      // cuBLAS and cuSOLVER calls would need workspaces fixed for capture, and a factorization's
      // status word one slot per launch: their tasks are launched one by one instead.
      if (k->kind == KernelKind::blas)
        throw Error(HCR_ERROR_UNSUPPORTED,
                    which + ": built-in '" + k->name +
                        "' is not captured into a CUDA graph (cuBLAS/cuSOLVER); the host "
                        "replays the graph task by task");
      if (k->module) modules->push_back(k->module);
    }
    return graphs_.create(g, std::move(d), std::move(modules));
  }

  void graph_launch(const hcr_graph_launch_args_t& a) override { graphs_.launch(a); }

  void graph_release(hcr_graph_t* graph) noexcept override { graphs_.release(graph); }

  void synchronize(size_t device) override { gpu(device).wait_idle(); }

  // NVML, where the driver's library is there and knows the device (measured: the whole board).
  bool device_energy(size_t device, hcr_energy_reading_t& r) override {
    NvmlMeter::Reading m;
    if (!meter_ || !meter_->read(device, m)) return false;
    r.source = HCR_ENERGY_MEASURED;
    r.joules = m.joules;
    r.watts = m.watts;
    r.resolution = m.resolution;
    return true;
  }

  std::optional<double> estimate(const hcr_launch_args_t& a) override {
    auto* k = reinterpret_cast<CudaKernel*>(a.kernel);
    if (k == nullptr || k->magic != kKernelMagic || k->kind != KernelKind::blas ||
        a.device >= gpus_.size() || (a.num_args > 0 && a.args == nullptr))
      return std::nullopt;
    const std::vector<void*> none(a.num_args, nullptr);
    return estimate_seconds(make_call(k->builtin, a, none.data()), gpus_[a.device]->info());
  }

 private:
  // What a graph's capture asks (GraphNodeWork): a node's work enqueued as launch() would; a
  // native function's failure is returned, argument mistakes are thrown.
  hcr_error_t* enqueue_node(Gpu& g, const hcr_launch_args_t& a, std::vector<void*>& ptrs,
                            cudaStream_t stream) override {
    const auto& k = *reinterpret_cast<const CudaKernel*>(a.kernel);
    switch (k.kind) {
      case KernelKind::source: enqueue_source(g, k, a, ptrs, stream); return nullptr;
      case KernelKind::native: {
        std::vector<hcr_arg_t> with_ptrs(a.args, a.args + a.num_args);
        for (size_t i = 0; i < with_ptrs.size(); ++i) with_ptrs[i].host = ptrs[i];
        hcr_exec_context_t ctx =
            sdk::exec_context(a, 0, static_cast<void*>(stream), const_cast<int*>(g.ordinal_ptr()));
        ctx.args = with_ptrs.data();
        return sdk::run_host_function(k.fn, k.user_data, ctx);
      }
      case KernelKind::blas: break;
    }
    throw Error(HCR_ERROR_INTERNAL, "kernel '" + k.name + "': a built-in in a device graph");
  }

  Gpu& gpu(size_t device) {
    if (device >= gpus_.size())
      throw Error(HCR_ERROR_NOT_FOUND, "no device " + std::to_string(device) +
                                           " (the cuda plugin has " + std::to_string(gpus_.size()) +
                                           ")");
    return *gpus_[device];
  }

  Gpu& started(size_t device) {
    Gpu& g = gpu(device);
    g.ensure_started();
    return g;
  }

  static std::string cc(const Gpu& g) {
    return std::to_string(g.info().cc_major) + "." + std::to_string(g.info().cc_minor);
  }

  DeviceMemory* memory(hcr_memory_t* m, const char* which) {
    if (m == nullptr) return nullptr;
    auto* d = reinterpret_cast<DeviceMemory*>(m);
    if (d->magic != kMemoryMagic || d->owner != this)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  std::string("copy: the ") + which + " memory was not allocated by this plugin");
    return d;
  }

  static void check_extent(const DeviceMemory& m, uint64_t offset, uint64_t pitch, uint64_t width,
                           uint64_t rows, const char* which) {
    if (width == 0 || rows == 0) return;
    const uint64_t end = offset + (rows - 1) * pitch + width;
    if (end > m.bytes || end < offset)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  std::string("copy: the ") + which + " region (offset " + std::to_string(offset) +
                      ", " + std::to_string(rows) + " rows of " + std::to_string(width) +
                      " bytes, pitch " + std::to_string(pitch) + ") ends at byte " +
                      std::to_string(end) + " of a " + std::to_string(m.bytes) +
                      "-byte allocation");
  }

  // The device pointer of each argument's element (0,0), after checking that the argument is
  // memory of this plugin on the launch's device and that its view fits in it.
  std::vector<void*> device_pointers(const hcr_launch_args_t& a) override {
    std::vector<void*> out(a.num_args, nullptr);
    if (a.num_args > 0 && a.args == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "launch: " + std::to_string(a.num_args) + " arguments but no argument array");
    for (size_t i = 0; i < a.num_args; ++i) {
      const hcr_arg_t& x = a.args[i];
      const std::string which =
          "argument " + std::to_string(i) + " (" + shape(x) + " " + sdk::dtype_name(x.dtype) + ")";
      const uint64_t elems = x.rows == 0 || x.cols == 0 ? 0 : (x.rows - 1) * x.ld + x.cols;
      if (x.rows > 1 && x.ld < x.cols)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + " has ld " + std::to_string(x.ld) + " < its columns");
      if (x.memory == nullptr) {
        if (elems == 0) continue;  // an empty view needs no memory
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + " is not in device memory (the device has no HCR_DEVICE_HOST_MEMORY: "
                            "the host must copy it to an allocation of this plugin)");
      }
      auto* m = reinterpret_cast<DeviceMemory*>(x.memory);
      if (m->magic != kMemoryMagic || m->owner != this)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is memory this plugin did not allocate");
      if (m->device != a.device)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + " lives on device " + std::to_string(m->device) +
                        "; the launch is on device " + std::to_string(a.device));
      const uint64_t end = x.offset + elems * dtype_size(x.dtype);
      if (end > m->bytes || end < x.offset)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + " at offset " + std::to_string(x.offset) + " with ld " +
                        std::to_string(x.ld) + " ends at byte " + std::to_string(end) + " of a " +
                        std::to_string(m->bytes) + "-byte allocation");
      out[i] = m->ptr + x.offset;
    }
    return out;
  }

  void enable_peer(Gpu& a, Gpu& b) {
    std::lock_guard<std::mutex> lock(peer_mutex_);
    // A pair of values: std::minmax returns references, here to the temporaries index() returns.
    std::pair<size_t, size_t> key = std::minmax(a.index(), b.index());
    if (!peers_.insert(key).second) return;
    std::string how;
    for (auto [from, to] : {std::pair<Gpu*, Gpu*>{&a, &b}, std::pair<Gpu*, Gpu*>{&b, &a}}) {
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, from->ordinal(), to->ordinal()) != cudaSuccess) {
        (void)cudaGetLastError();
        can = 0;
      }
      if (!can) {
        how = "no peer access: copies go through host memory";
        continue;
      }
      DeviceGuard guard(from->ordinal());
      cudaError_t e = cudaDeviceEnablePeerAccess(to->ordinal(), 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        how = "enabling peer access failed (" + error_text(e) + "): copies go through host memory";
      (void)cudaGetLastError();
      // Memory from a stream-ordered pool is reachable by a peer only once the pool says so.
      if (to->pools()) {
        cudaMemPool_t pool = nullptr;
        cudaMemAccessDesc access{};
        access.location.type = cudaMemLocationTypeDevice;
        access.location.id = from->ordinal();
        access.flags = cudaMemAccessFlagsProtReadWrite;
        if (cudaDeviceGetDefaultMemPool(&pool, to->ordinal()) != cudaSuccess ||
            cudaMemPoolSetAccess(pool, &access, 1) != cudaSuccess) {
          how = "no peer access to pool memory: copies go through host memory";
          (void)cudaGetLastError();
        }
      }
    }
    host().debug("devices " + std::to_string(a.index()) + " and " + std::to_string(b.index()) +
                 ": " + (how.empty() ? "peer access enabled" : how));
  }

  std::shared_ptr<const Module> load_source(Gpu& g, const std::string& name,
                                            const hcr_kernel_desc_t& desc) {
    const std::string source = desc.source_size > 0 ? std::string(desc.source, desc.source_size)
                                                    : std::string(desc.source);
    const std::string entry = desc.entry && *desc.entry ? desc.entry : name;
    auto program = cache_->get(name, source, desc.build_options ? desc.build_options : "", entry,
                               g.info().cc_major, g.info().cc_minor);
    g.ensure_started();
    DeviceGuard guard(g.ordinal());
    auto m = std::make_shared<Module>();
    m->name = name;
    if (cudaError_t e = cudaLibraryLoadData(&m->library, program->image.data(), nullptr, nullptr, 0,
                                            nullptr, nullptr, 0);
        e != cudaSuccess) {
      m->library = nullptr;
      (void)cudaGetLastError();
      throw Error(
          error_code(e) == HCR_ERROR_DEVICE_LOST ? HCR_ERROR_DEVICE_LOST : HCR_ERROR_BACKEND,
          "cannot load kernel '" + name + "' compiled for " + program->target + " (" +
              program->origin + "): " + error_text(e));
    }
    if (cudaError_t e = cudaLibraryGetKernel(&m->kernel, m->library, program->lowered.c_str());
        e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(HCR_ERROR_BACKEND, "kernel '" + name + "': no function '" + program->lowered +
                                         "' in the compiled program: " + error_text(e));
    }
#if CUDART_VERSION >= 12040
    // The parameter layout, to check each launch's arguments: a mismatch would otherwise make
    // the driver read past the argument array.
    for (size_t i = 0;; ++i) {
      size_t offset = 0, size = 0;
      cudaError_t e =
          cudaFuncGetParamInfo(reinterpret_cast<const void*>(m->kernel), i, &offset, &size);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        // Past the last parameter is "invalid value"; anything else (a driver without this
        // query) leaves the layout unknown and the launches unchecked. So does an error at the
        // first parameter: a kernel without parameters gains nothing from the check, and a
        // driver that cannot answer must not make every launch look wrong.
        m->params_known = e == cudaErrorInvalidValue && i > 0;
        break;
      }
      m->param_sizes.push_back(size);
      if (i > 4096) {
        m->params_known = false;
        break;
      }
    }
#endif
    host().debug("kernel '" + name + "' (" + program->lowered + ") on device " +
                 std::to_string(g.index()) + " from " + program->origin);
    return m;
  }

  void launch_source(Gpu& g, const CudaKernel& k, const hcr_launch_args_t& a,
                     std::vector<void*>& ptrs, bool measure) {
    std::shared_ptr<const void> keep = k.module;
    g.run_on(
        g.compute_lane(), a.done, a.done_user_data, measure,
        [&](Lane& l) -> hcr_error_t* {
          enqueue_source(g, k, a, ptrs, l.stream());
          return nullptr;
        },
        std::move(keep));
  }

  // Puts a source kernel's launch on `stream` (throws for arguments that do not fit the kernel).
  static void enqueue_source(const Gpu& g, const CudaKernel& k, const hcr_launch_args_t& a,
                             std::vector<void*>& ptrs, cudaStream_t stream) {
    const Module& m = *k.module;
    // Scalars: the i-th runs from param_offsets[i] to the next offset (or params_size). A host
    // that gives bytes but no offsets passes them as one parameter.
    std::vector<std::pair<size_t, size_t>> params;  // offset, span
    if (a.num_params > 0) {
      if (a.param_offsets == nullptr || a.params == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "launch: parameters without their bytes or offsets");
      for (size_t i = 0; i < a.num_params; ++i) {
        const size_t off = a.param_offsets[i];
        const size_t end = i + 1 < a.num_params ? a.param_offsets[i + 1] : a.params_size;
        if (off > end || end > a.params_size)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      "launch: parameter " + std::to_string(i) + " offsets are out of order");
        params.emplace_back(off, end - off);
      }
    } else if (a.params_size > 0 && a.params != nullptr) {
      params.emplace_back(0, a.params_size);
    }
    if (m.params_known) check_signature(k, m, a.num_args, params);

    std::vector<void*> argv;
    argv.reserve(ptrs.size() + params.size());
    for (void*& p : ptrs) argv.push_back(&p);
    for (auto& [off, span] : params)
      argv.push_back(const_cast<char*>(static_cast<const char*>(a.params) + off));

    dim3 grid, block;
    if (!geometry(g, k, a, grid, block)) return;
    HCR_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(m.kernel), grid, block,
                                    argv.data(), 0, stream));
  }

  static void check_signature(const CudaKernel& k, const Module& m, size_t buffers,
                              const std::vector<std::pair<size_t, size_t>>& params) {
    auto describe = [&] {
      std::string s = "kernel '" + k.name + "' takes " + std::to_string(m.param_sizes.size()) +
                      " argument(s) (";
      for (size_t i = 0; i < m.param_sizes.size(); ++i)
        s += (i ? ", " : "") + std::to_string(m.param_sizes[i]);
      s += " bytes); the task gives " + std::to_string(buffers) + " buffer(s) then " +
           std::to_string(params.size()) + " parameter(s) (";
      for (size_t i = 0; i < params.size(); ++i)
        s += (i ? ", " : "") + std::to_string(params[i].second);
      return s + " bytes with padding): buffers come first as pointers, then each parameter";
    };
    if (m.param_sizes.size() != buffers + params.size())
      throw Error(HCR_ERROR_INVALID_ARGUMENT, describe());
    for (size_t i = 0; i < buffers; ++i)
      if (m.param_sizes[i] != sizeof(void*)) throw Error(HCR_ERROR_INVALID_ARGUMENT, describe());
    // A parameter's span includes the padding before the next one: the last one is exact, and
    // another may exceed the kernel's size only by what rounds its end up to the next parameter's
    // alignment, a power of two that divides that parameter's size (C++ makes a type's size a
    // multiple of its alignment). A double given for a float followed by an int spans 8 bytes
    // where 4 and no padding fit: the kernel would read the double's low half (0 for 2.0).
    // Checked from the last, so that the parameter named is the one that is wrong.
    for (size_t i = params.size(); i-- > 0;) {
      const size_t want = m.param_sizes[buffers + i];
      const auto [offset, have] = params[i];
      bool fits = have == want;
      if (have > want && i + 1 < params.size()) {
        const size_t next = m.param_sizes[buffers + i + 1], end = offset + have;
        for (size_t align = 1; align <= (next & (~next + 1)) && !fits; align *= 2)
          fits = (offset + want + align - 1) / align * align == end;
      }
      if (!fits)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "kernel '" + k.name + "': parameter " + std::to_string(i) + " spans " +
                        std::to_string(have) + " bytes" +
                        (i + 1 < params.size() ? " up to the next" : "") + " where argument " +
                        std::to_string(buffers + i) + " takes " + std::to_string(want) +
                        " (Task::param passes a value's bytes unconverted: give the argument's "
                        "exact type, a float as 2.0f, not 2.0); " +
                        describe());
    }
  }

  // Grid and block for a source launch; false when there is no thread to run.
  static bool geometry(const Gpu& g, const CudaKernel& k, const hcr_launch_args_t& a, dim3& grid,
                       dim3& block) {
    uint64_t n[3] = {a.global_size[0], a.global_size[1], a.global_size[2]};
    if (n[0] == 0) {
      // Default: one thread per element of the first buffer the task writes, 1-D.
      const hcr_arg_t* w = nullptr;
      for (size_t i = 0; i < a.num_args && !w; ++i)
        if (a.args[i].access == HCR_ACCESS_WRITE || a.args[i].access == HCR_ACCESS_READ_WRITE)
          w = &a.args[i];
      if (w == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "kernel '" + k.name +
                        "': no grid given and no buffer written to size one by "
                        "(Task::grid)");
      n[0] = w->rows * w->cols;
      n[1] = n[2] = 1;
    }
    for (int i = 1; i < 3; ++i)
      if (n[i] == 0) n[i] = 1;
    uint32_t b[3] = {a.local_size[0], a.local_size[1], a.local_size[2]};
    if (b[0] == 0 && b[1] == 0 && b[2] == 0) {
      if (n[2] > 1) b[0] = 8, b[1] = 8, b[2] = 4;
      else if (n[1] > 1) b[0] = 16, b[1] = 16, b[2] = 1;
      else b[0] = 256, b[1] = 1, b[2] = 1;
    }
    for (auto& x : b)
      if (x == 0) x = 1;
    const uint64_t threads = uint64_t{b[0]} * b[1] * b[2];
    if (threads > g.info().max_threads_per_block)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "kernel '" + k.name + "': block " + std::to_string(b[0]) + "x" +
                      std::to_string(b[1]) + "x" + std::to_string(b[2]) + " has " +
                      std::to_string(threads) + " threads; the device allows " +
                      std::to_string(g.info().max_threads_per_block));
    if (n[0] * n[1] * n[2] == 0) return false;
    uint64_t blocks[3];
    for (int i = 0; i < 3; ++i) {
      blocks[i] = (n[i] + b[i] - 1) / b[i];
      if (blocks[i] > g.info().max_grid[i])
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "kernel '" + k.name + "': " + std::to_string(n[i]) + " threads in dimension " +
                        std::to_string(i) + " need " + std::to_string(blocks[i]) +
                        " blocks; the device allows " + std::to_string(g.info().max_grid[i]));
    }
    grid = dim3(static_cast<unsigned>(blocks[0]), static_cast<unsigned>(blocks[1]),
                static_cast<unsigned>(blocks[2]));
    block = dim3(b[0], b[1], b[2]);
    return true;
  }

  uint32_t streams_ = 2;
  uint32_t copy_threads_ = 0;          // 0: automatic
  std::unique_ptr<NvrtcCache> cache_;  // destroyed after the devices
  std::vector<std::unique_ptr<Gpu>> gpus_;
  std::unique_ptr<NvmlMeter> meter_;  // null: no meter (option nvml off, or no device)
  std::mutex alloc_mutex_;
  std::unordered_set<DeviceMemory*> memory_;  // live device allocations
  std::unordered_set<void*> pinned_;          // live host_alloc blocks
  std::unordered_set<CudaKernel*> kernels_;   // live kernel handles
  std::mutex peer_mutex_;
  std::set<std::pair<size_t, size_t>> peers_;  // device pairs whose peer access was settled
  CudaGraphs graphs_{*this, host()};           // destroyed by hand, while the devices live
};

}  // namespace
}  // namespace hcr::cuda

HCR_SDK_PLUGIN(hcr::cuda::CudaBackend, "cuda", "0.1.0")
