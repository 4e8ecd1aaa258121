// What the CUDA benches share (cuda_bench, cuda_graph_bench): the plugin from the build tree
// through its C table, created once; a done callback waited for; whether there is a GPU to run
// on; one hcr::Runtime over the CUDA backend.
#pragma once

#include <hcr/hcr.hpp>
#include <hcr/plugin.h>

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Waits for one done callback.
struct Done {
  std::mutex m;
  std::condition_variable cv;
  bool fired = false;
  std::string error;
  const hcr_plugin_api_t* api = nullptr;
  static void cb(void* user, hcr_error_t* e, const hcr_completion_info_t*) {
    auto* d = static_cast<Done*>(user);
    std::lock_guard<std::mutex> lock(d->m);
    if (e != nullptr) {
      d->error = d->api->error_message(e);
      d->api->error_destroy(e);
    }
    d->fired = true;
    d->cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return fired; });
  }
};

/// The plugin, created once with default options; `why` says why not.
struct Plugin {
  void* lib = nullptr;
  const hcr_plugin_api_t* api = nullptr;
  hcr_plugin_t* p = nullptr;
  hcr_host_services_t services{};
  std::string why;

  Plugin() {
    const char* dir = std::getenv("HCR_CUDA_BENCH_PLUGIN_DIR");
    const std::string file =
        std::string(dir && *dir ? dir : HCR_BENCH_PLUGIN_DIR) + "/libhcr-cuda.so";
    lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      why = dlerror();
      return;
    }
    auto get = reinterpret_cast<hcr_plugin_get_api_fn>(dlsym(lib, HCR_PLUGIN_ENTRY_SYMBOL));
    api = get ? get() : nullptr;
    if (api == nullptr) {
      why = "no plugin table in " + file;
      return;
    }
    services.struct_size = HCR_HOST_SERVICES_STRUCT_SIZE;
    services.abi_major = HCR_ABI_MAJOR;
    services.abi_minor = HCR_ABI_MINOR;
    services.host_context = this;
    services.log = [](void* ctx, hcr_log_level_t, const char* msg) {
      static_cast<Plugin*>(ctx)->why = msg;  // the last message: why there is no device
    };
    services.log_level = HCR_LOG_INFO;
    hcr_plugin_create_args_t a{};
    a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
    a.services = &services;
    a.library_path = file.c_str();
    if (hcr_error_t* e = api->plugin_create(&a)) {
      why = take(e);
      return;
    }
    p = a.plugin;
    size_t n = 0;
    if (hcr_error_t* e = api->device_count(p, &n)) why = take(e);
    else if (n == 0) why = "the cuda plugin found no device: " + why;
    else why.clear();
  }
  ~Plugin() {
    if (p != nullptr) api->plugin_destroy(p);
  }
  bool ok() const { return p != nullptr && why.empty(); }
  std::string take(hcr_error_t* e) const {
    std::string s = api->error_message(e);
    api->error_destroy(e);
    return s;
  }
  hcr_memory_t* alloc(uint64_t bytes) {
    hcr_mem_alloc_args_t a{};
    a.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
    a.bytes = bytes;
    if (hcr_error_t* e = api->mem_alloc(p, &a)) {
      why = take(e);
      return nullptr;
    }
    return a.memory;
  }
  /// One 1-D copy between host memory and `m`, waited for. Empty string on success.
  std::string copy(hcr_memory_t* m, void* host, uint64_t bytes, bool to_device) {
    Done d;
    d.api = api;
    hcr_copy_args_t c{};
    c.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    if (to_device) {
      c.src_host = host;
      c.dst_memory = m;
    } else {
      c.src_memory = m;
      c.dst_host = host;
    }
    c.width = bytes;
    c.rows = 1;
    c.done = &Done::cb;
    c.done_user_data = &d;
    if (hcr_error_t* e = api->copy(p, &c)) return take(e);
    d.wait();
    return d.error;
  }
};

inline Plugin& plugin() {
  static Plugin p;
  return p;
}

inline bool have_gpu(benchmark::State& state) {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    state.SkipWithError(
        ("no CUDA GPU: " + std::string(e ? cudaGetErrorString(e) : "0 devices")).c_str());
    return false;
  }
  if (!plugin().ok()) {
    state.SkipWithError(("the cuda plugin is not usable: " + plugin().why).c_str());
    return false;
  }
  return true;
}

inline hcr::Runtime& runtime() {
  static hcr::Runtime* rt = [] {
    hcr::Config c;
    c.use_environment = false;
    if (const char* dir = std::getenv("HCR_CUDA_BENCH_PLUGIN_DIR"); dir && *dir)
      c.plugin_paths = {dir};
    c.backends.push_back({"cuda", true, {}, "cuda_bench"});
    return new hcr::Runtime(c);  // lives to the end of the process
  }();
  return *rt;
}

}  // namespace
