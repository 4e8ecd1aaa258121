// Helpers of the simulated backend's ABI tests (sim_plugin_abi_test, sim_graph_abi_test): the
// library loaded with dlopen like the runtime would, one plugin instance, errors, `done` callbacks
// and the fixture that checks the library loaded.
#pragma once

#include <hcr/plugin.h>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hcr::test {

using Options = std::vector<std::pair<std::string, std::string>>;

/// The library, loaded once for the whole suite.
inline const hcr_plugin_api_t* sim_api() {
  static const hcr_plugin_api_t* api = [] {
    void* lib = dlopen(HCR_TEST_PLUGIN_DIR "/libhcr-sim.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return static_cast<const hcr_plugin_api_t*>(nullptr);
    auto get = reinterpret_cast<hcr_plugin_get_api_fn>(dlsym(lib, HCR_PLUGIN_ENTRY_SYMBOL));
    return get ? get() : nullptr;
  }();
  return api;
}

/// An error's code and text (the error is freed); code 0 for success.
struct Status {
  int code = 0;
  std::string message;
};

inline Status take(hcr_error_t* e) {
  if (e == nullptr) return {};
  const hcr_plugin_api_t* api = sim_api();
  Status s{static_cast<int>(api->error_code(e)), api->error_message(e)};
  api->error_destroy(e);
  return s;
}

/// One `done` callback: how often it was called, with what.
class Done {
 public:
  static void fn(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
    auto* self = static_cast<Done*>(user);
    Status s = take(error);
    std::lock_guard<std::mutex> lock(self->mutex_);
    ++self->calls_;
    self->status_ = s;
    self->seconds_ = info ? info->device_seconds : -1;
    self->cv_.notify_all();
  }
  /// Waits (at most a minute, so that a broken plugin fails the test instead of hanging it).
  bool wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return calls_ > 0; });
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  Status status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  double seconds() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seconds_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int calls_ = 0;
  Status status_;
  double seconds_ = -1;
};

/// One plugin instance.
class Sim {
 public:
  Sim(std::initializer_list<std::pair<std::string, std::string>> options) : api_(sim_api()) {
    create_status_ = create(Options(options));
  }
  ~Sim() { destroy(); }
  Sim(const Sim&) = delete;
  Sim& operator=(const Sim&) = delete;

  const Status& created() const { return create_status_; }
  /// Releases the kernels (or leaves them to the plugin, which owns them), then destroys.
  void destroy(bool release_kernels = true) {
    if (p_ == nullptr) return;
    if (release_kernels)
      for (hcr_kernel_t* k : kernels_) api_->kernel_release(p_, k);
    kernels_.clear();
    api_->plugin_destroy(p_);
    p_ = nullptr;
  }

  hcr_device_info_t info(size_t device) {
    hcr_device_info_t i{};
    i.struct_size = HCR_DEVICE_INFO_STRUCT_SIZE;
    EXPECT_EQ(take(api_->device_info(p_, device, &i)).code, 0);
    return i;
  }

  std::pair<Status, hcr_memory_t*> alloc(size_t device, uint64_t bytes) {
    hcr_mem_alloc_args_t a{};
    a.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
    a.device = device;
    a.bytes = bytes;
    Status s = take(api_->mem_alloc(p_, &a));
    return {s, a.memory};
  }
  void free(size_t device, hcr_memory_t* m) { api_->mem_free(p_, device, m); }

  /// A 2-D copy; each end is a memory (with offset) or a host pointer.
  struct End {
    hcr_memory_t* memory = nullptr;
    void* host = nullptr;
    uint64_t offset = 0;
    uint64_t pitch = 0;
  };
  Status copy(size_t device, End src, End dst, uint64_t width, uint64_t rows, Done& done) {
    hcr_copy_args_t a{};
    a.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    a.device = device;
    a.src_memory = src.memory;
    a.src_host = src.host;
    a.src_offset = src.offset;
    a.src_pitch = src.pitch;
    a.dst_memory = dst.memory;
    a.dst_host = dst.host;
    a.dst_offset = dst.offset;
    a.dst_pitch = dst.pitch;
    a.width = width;
    a.rows = rows;
    a.done = &Done::fn;
    a.done_user_data = &done;
    return take(api_->copy(p_, &a));
  }
  /// Copies and waits; fails the test on any error.
  void copy_sync(size_t device, End src, End dst, uint64_t width, uint64_t rows) {
    Done d;
    ASSERT_EQ(copy(device, src, dst, width, rows, d).code, 0);
    ASSERT_TRUE(d.wait());
    ASSERT_EQ(d.status().code, 0) << d.status().message;
  }

  std::pair<Status, hcr_kernel_t*> kernel(size_t device, const char* name, hcr_impl_kind_t kind,
                                          hcr_kernel_fn fn = nullptr, void* user = nullptr) {
    hcr_kernel_desc_t desc{};
    desc.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
    desc.name = name;
    desc.kind = kind;
    desc.api = kind == HCR_IMPL_HOST_FUNCTION ? "host" : nullptr;
    desc.fn = fn;
    desc.user_data = user;
    hcr_kernel_get_args_t a{};
    a.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
    a.device = device;
    a.desc = &desc;
    Status s = take(api_->kernel_get(p_, &a));
    if (s.code == 0) kernels_.push_back(a.kernel);
    return {s, a.kernel};
  }

  hcr_launch_args_t launch_args(size_t device, hcr_kernel_t* k, const std::vector<hcr_arg_t>& args,
                                const void* params, size_t params_size, Done* done) {
    hcr_launch_args_t a{};
    a.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    a.device = device;
    a.kernel = k;
    a.args = args.data();
    a.num_args = args.size();
    a.params = params;
    a.params_size = params_size;
    a.done = &Done::fn;
    a.done_user_data = done;
    return a;
  }
  Status launch(const hcr_launch_args_t& a) { return take(api_->launch(p_, &a)); }
  Status synchronize(size_t device) { return take(api_->synchronize(p_, device)); }
  std::pair<Status, double> estimate(const hcr_launch_args_t& a) {
    double s = -1;
    Status st = take(api_->estimate(p_, &a, &s));
    return {st, s};
  }

  const hcr_plugin_api_t* api() const { return api_; }
  hcr_plugin_t* handle() const { return p_; }

 private:
  Status create(const Options& options) {
    std::vector<hcr_option_t> opts;
    for (auto& [k, v] : options) opts.push_back({HCR_OPTION_STRUCT_SIZE, k.c_str(), v.c_str()});
    hcr_plugin_create_args_t a{};
    a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
    a.options = opts.data();
    a.num_options = opts.size();
    a.library_path = "libhcr-sim.so";
    Status s = take(api_->plugin_create(&a));
    p_ = a.plugin;
    return s;
  }

  const hcr_plugin_api_t* api_;
  hcr_plugin_t* p_ = nullptr;
  Status create_status_;
  std::vector<hcr_kernel_t*> kernels_;
};

inline hcr_arg_t matrix(hcr_memory_t* m, uint64_t offset, hcr_dtype_t t, uint64_t rows,
                        uint64_t cols, uint64_t ld, hcr_access_t access) {
  hcr_arg_t a{};
  a.struct_size = HCR_ARG_STRUCT_SIZE;
  a.memory = m;
  a.offset = offset;
  a.dtype = t;
  a.access = access;
  a.rows = rows;
  a.cols = cols;
  a.ld = ld;
  return a;
}

class SimPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(sim_api(), nullptr) << "cannot load " HCR_TEST_PLUGIN_DIR "/libhcr-sim.so: "
                                  << dlerror();
  }
};

}  // namespace hcr::test
