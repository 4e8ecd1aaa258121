// What the CUDA backend's test files share: the plugin driven through its C table (Plugin), the
// two targets every suite runs against (the real plugin on a GPU, the fake-runtime copy anywhere),
// and the fixtures that open one or the other. Included by one test executable's sources only;
// everything is in an anonymous namespace, so each source has its own copy.
#pragma once

#include "test_kernels.hpp"
#include "../../test_support.hpp"

#include <dlfcn.h>
#include <link.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hcr {
namespace {

namespace fs = std::filesystem;

using Options = std::vector<std::pair<std::string, std::string>>;

const std::string kPluginFile = std::string(HCR_TEST_PLUGIN_DIR) + "/libhcr-cuda.so";
const std::string kFakePluginFile = std::string(HCR_TEST_FAKE_CUDA_DIR) + "/libhcr-cuda.so";
constexpr int kFakeDevices = 2;  // the fake runtime's default (HCR_FAKE_CUDA_DEVICES)

inline int gpus() {
  static const int n = test_gpu_count();
  return n;
}

inline bool require_gpu() {
  const char* v = std::getenv("HCR_CUDA_TESTS_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

#define HCR_NEED_GPU()                                                                  \
  do {                                                                                  \
    if (gpus() == 0) {                                                                  \
      std::string why_;                                                                 \
      test_gpu_count(&why_);                                                            \
      if (require_gpu()) FAIL() << "HCR_CUDA_TESTS_REQUIRE_GPU=1 but no GPU: " << why_; \
      GTEST_SKIP() << "no CUDA GPU: " << why_;                                          \
    }                                                                                   \
  } while (0)

/// The fake libraries' folder (fake cuBLAS, cuSOLVER and NVML under the real sonames).
inline fs::path fake_lib_dir() { return fs::path(HCR_TEST_FAKE_NVML).parent_path(); }

/// Where the process already holds a real library under the soname of one of the fakes — a
/// CudaGpu test ran before in the same process, on a machine with a GPU — the fake plugin's dlopen
/// by name would get that library (a loaded soname wins), hand it fake device pointers and crash.
/// Returns the real library's path, or "" when none is loaded. ctest runs each test in its own
/// process; this guards running the whole binary at once on a GPU machine.
inline std::string real_cuda_library_loaded() {
  const fs::path dir = fake_lib_dir();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("libhcr_", 0) == 0 || name.find(".so") == std::string::npos) continue;
    void* h = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) continue;
    std::string path;
    struct link_map* map = nullptr;
    if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr)
      path = map->l_name;
    dlclose(h);
    if (fs::path(path).parent_path() != dir) return path.empty() ? name : path;
  }
  return {};
}

#define HCR_NEED_ONLY_FAKE_CUDA_LIBS()                                                       \
  do {                                                                                       \
    if (const std::string real_ = real_cuda_library_loaded(); !real_.empty())                \
      GTEST_SKIP() << "this process already holds the real " << real_                        \
                   << " (a GPU test ran before): run the Fake* tests in a process of their " \
                      "own (--gtest_filter='Fake*'), as ctest does";                         \
  } while (0)

inline Config cuda_config(Options options = {}) {
  Config c;
  c.use_environment = false;
  c.backends.push_back({"cuda", true, std::move(options), "test"});
  return c;
}

// A copy: the report is a snapshot (hot-plug may add to it).
inline std::optional<PluginRecord> record(const Runtime& rt, const std::string& name) {
  for (auto& p : rt.load_report().plugins)
    if (p.name == name) return p;
  return std::nullopt;
}

// ---- the plugin through its C table ------------------------------------------------------------

/// What one asynchronous operation reported.
struct Outcome {
  bool ok = false;
  hcr_error_code_t code = HCR_ERROR_UNKNOWN;
  std::string message;
  double seconds = -1;
};

/// Counts done calls; wait() blocks until `expected` of them arrived.
class Waiter {
 public:
  explicit Waiter(const hcr_plugin_api_t* api) : api_(api) {}
  static void on_done(void* user, hcr_error_t* error, const hcr_completion_info_t* info) {
    auto* w = static_cast<Waiter*>(user);
    Outcome o;
    o.ok = error == nullptr;
    if (error != nullptr) {
      o.code = w->api_->error_code(error);
      o.message = w->api_->error_message(error);
      w->api_->error_destroy(error);
    }
    if (info != nullptr && info->struct_size >= HCR_COMPLETION_INFO_STRUCT_SIZE)
      o.seconds = info->device_seconds;
    std::lock_guard<std::mutex> lock(w->mutex_);
    w->outcomes_.push_back(o);
    w->cv_.notify_all();
  }
  std::vector<Outcome> wait(size_t expected) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return outcomes_.size() >= expected; });
    return outcomes_;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return outcomes_.size();
  }

 private:
  const hcr_plugin_api_t* api_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Outcome> outcomes_;
};

/// An error returned by a starting call (NULL: success).
struct CallError {
  bool ok = true;
  hcr_error_code_t code = HCR_ERROR_UNKNOWN;
  std::string message;
};

/// One instance of libhcr-cuda.so, created through its table, with its log captured.
class Plugin {
 public:
  explicit Plugin(Options options = {}, const std::string& file = kPluginFile) : file_(file) {
    lib_ = dlopen(file_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      create_error_ = std::string("dlopen: ") + dlerror();
      return;
    }
    auto get = reinterpret_cast<hcr_plugin_get_api_fn>(dlsym(lib_, HCR_PLUGIN_ENTRY_SYMBOL));
    api_ = get ? get() : nullptr;
    if (api_ == nullptr) {
      create_error_ = "no table";
      return;
    }
    services_.struct_size = HCR_HOST_SERVICES_STRUCT_SIZE;
    services_.abi_major = HCR_ABI_MAJOR;
    services_.abi_minor = HCR_ABI_MINOR;
    services_.host_context = this;
    services_.log = &Plugin::on_log;
    services_.log_level = HCR_LOG_DEBUG;
    options_ = std::move(options);
    std::vector<hcr_option_t> opts;
    for (auto& [k, v] : options_) opts.push_back({HCR_OPTION_STRUCT_SIZE, k.c_str(), v.c_str()});
    hcr_plugin_create_args_t a{};
    a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
    a.services = &services_;
    a.options = opts.data();
    a.num_options = opts.size();
    a.library_path = file_.c_str();
    if (hcr_error_t* e = api_->plugin_create(&a)) {
      create_error_ = api_->error_message(e);
      api_->error_destroy(e);
      return;
    }
    plugin_ = a.plugin;
  }
  ~Plugin() {
    destroy();
    if (lib_ != nullptr) dlclose(lib_);
  }
  void destroy() {
    if (plugin_ != nullptr) api_->plugin_destroy(plugin_);
    plugin_ = nullptr;
  }

  bool ok() const { return plugin_ != nullptr; }
  const std::string& create_error() const { return create_error_; }
  const hcr_plugin_api_t* api() const { return api_; }
  hcr_plugin_t* get() const { return plugin_; }

  bool logged(const std::string& needle) const {
    std::lock_guard<std::mutex> lock(log_mutex_);
    for (auto& l : log_)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
  std::string log_text() const {
    std::lock_guard<std::mutex> lock(log_mutex_);
    std::string s;
    for (auto& l : log_) s += l + "\n";
    return s;
  }

  CallError check(hcr_error_t* e) const {
    CallError r;
    if (e == nullptr) return r;
    r.ok = false;
    r.code = api_->error_code(e);
    r.message = api_->error_message(e);
    api_->error_destroy(e);
    return r;
  }

  size_t device_count() const {
    size_t n = 0;
    EXPECT_TRUE(check(api_->device_count(plugin_, &n)).ok);
    return n;
  }
  hcr_device_info_t info(size_t d) const {
    hcr_device_info_t i{};
    i.struct_size = HCR_DEVICE_INFO_STRUCT_SIZE;
    CallError e = check(api_->device_info(plugin_, d, &i));
    EXPECT_TRUE(e.ok) << e.message;
    return i;
  }

  hcr_memory_t* alloc(size_t device, uint64_t bytes) {
    hcr_mem_alloc_args_t a{};
    a.struct_size = HCR_MEM_ALLOC_ARGS_STRUCT_SIZE;
    a.device = device;
    a.bytes = bytes;
    CallError e = check(api_->mem_alloc(plugin_, &a));
    EXPECT_TRUE(e.ok) << e.message;
    return a.memory;
  }
  void free(size_t device, hcr_memory_t* m) { api_->mem_free(plugin_, device, m); }

  /// Starts a copy and waits for its done. Outcome.ok false with the starting call's error too.
  Outcome copy(hcr_copy_args_t a) {
    Waiter w(api_);
    a.struct_size = HCR_COPY_ARGS_STRUCT_SIZE;
    a.done = &Waiter::on_done;
    a.done_user_data = &w;
    CallError e = check(api_->copy(plugin_, &a));
    if (!e.ok) return {false, e.code, e.message, -1};
    return w.wait(1)[0];
  }
  /// Host (pointer, pitch) -> device (memory, offset, pitch).
  Outcome upload(size_t device, hcr_memory_t* m, uint64_t off, uint64_t dpitch, const void* src,
                 uint64_t spitch, uint64_t width, uint64_t rows) {
    hcr_copy_args_t a{};
    a.device = device;
    a.src_host = src;
    a.src_pitch = spitch;
    a.dst_memory = m;
    a.dst_offset = off;
    a.dst_pitch = dpitch;
    a.width = width;
    a.rows = rows;
    return copy(a);
  }
  Outcome download(size_t device, void* dst, uint64_t dpitch, hcr_memory_t* m, uint64_t off,
                   uint64_t spitch, uint64_t width, uint64_t rows) {
    hcr_copy_args_t a{};
    a.device = device;
    a.src_memory = m;
    a.src_offset = off;
    a.src_pitch = spitch;
    a.dst_host = dst;
    a.dst_pitch = dpitch;
    a.width = width;
    a.rows = rows;
    return copy(a);
  }

  /// A kernel handle, or the error.
  hcr_kernel_t* kernel(size_t device, const hcr_kernel_desc_t& desc, CallError* err = nullptr) {
    hcr_kernel_desc_t d = desc;
    d.struct_size = HCR_KERNEL_DESC_STRUCT_SIZE;
    hcr_kernel_get_args_t a{};
    a.struct_size = HCR_KERNEL_GET_ARGS_STRUCT_SIZE;
    a.device = device;
    a.desc = &d;
    CallError e = check(api_->kernel_get(plugin_, &a));
    if (err != nullptr) *err = e;
    else EXPECT_TRUE(e.ok) << e.message;
    return e.ok ? a.kernel : nullptr;
  }
  hcr_kernel_t* builtin(size_t device, const char* name, CallError* err = nullptr) {
    hcr_kernel_desc_t d{};
    d.name = name;
    d.kind = HCR_IMPL_BUILTIN;
    return kernel(device, d, err);
  }
  hcr_kernel_t* source(size_t device, const char* name, const std::string& text,
                       const char* entry = nullptr, CallError* err = nullptr) {
    hcr_kernel_desc_t d{};
    d.name = name;
    d.kind = HCR_IMPL_SOURCE;
    d.api = "cuda";
    d.source = text.c_str();
    d.source_size = text.size();
    d.entry = entry;
    return kernel(device, d, err);
  }
  void release(hcr_kernel_t* k) { api_->kernel_release(plugin_, k); }

  /// Launches and waits for done.
  Outcome launch(hcr_launch_args_t a) {
    Waiter w(api_);
    a.struct_size = HCR_LAUNCH_ARGS_STRUCT_SIZE;
    a.done = &Waiter::on_done;
    a.done_user_data = &w;
    CallError e = check(api_->launch(plugin_, &a));
    if (!e.ok) return {false, e.code, e.message, -1};
    return w.wait(1)[0];
  }

 private:
  static void on_log(void* ctx, hcr_log_level_t, const char* message) {
    auto* self = static_cast<Plugin*>(ctx);
    std::lock_guard<std::mutex> lock(self->log_mutex_);
    self->log_.emplace_back(message);
  }

  std::string file_;
  void* lib_ = nullptr;
  const hcr_plugin_api_t* api_ = nullptr;
  hcr_plugin_t* plugin_ = nullptr;
  hcr_host_services_t services_{};
  Options options_;
  std::string create_error_;
  mutable std::mutex log_mutex_;
  std::vector<std::string> log_;
};

inline hcr_arg_t matrix_arg(hcr_memory_t* m, uint64_t offset, hcr_dtype_t t, hcr_access_t access,
                            uint64_t rows, uint64_t cols, uint64_t ld) {
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

/// Which plugin a suite drives: the real one (needs a GPU) or the fake-runtime copy.
struct Target {
  bool fake = false;
  const std::string& file() const { return fake ? kFakePluginFile : kPluginFile; }
  int devices() const { return fake ? kFakeDevices : gpus(); }
  friend void PrintTo(const Target& t, std::ostream* os) { *os << (t.fake ? "fake" : "gpu"); }
};

/// Opens the target's plugin (one of its own, with a kernel cache in a temporary directory). On the
/// fake runtime, TearDown checks that the destroyed plugin released every stream, event, library
/// handle and allocation it made, and that the fake device never faulted.
class PluginFixture : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (!fake()) HCR_NEED_GPU();
    else HCR_NEED_ONLY_FAKE_CUDA_LIBS();
    p_ = make(Options{{"cache_dir", cache_.path().string()}});
    ASSERT_TRUE(p_->ok()) << p_->create_error();
    ASSERT_GT(p_->device_count(), 0u) << p_->log_text();
  }
  // On the fake runtime, a destroyed plugin must have released every stream, event, library,
  // cuBLAS handle and allocation it made, and never have faulted.
  void TearDown() override {
    if (!fake() || !p_) return;
    p_->destroy();
    void* h = dlopen("libhcr_fake_cudart.so", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(h, nullptr) << "the fake CUDA runtime is not loaded";
    auto live = reinterpret_cast<long (*)()>(dlsym(h, "hcr_fake_live"));
    auto sticky = reinterpret_cast<int (*)()>(dlsym(h, "hcr_fake_sticky"));
    ASSERT_TRUE(live && sticky);
    EXPECT_EQ(live(), 0) << "CUDA objects left behind by the destroyed plugin";
    EXPECT_EQ(sticky(), 0) << "the fake device faulted (an access outside device memory)";
    dlclose(h);
  }
  bool fake() const { return GetParam().fake; }
  int devices() const { return GetParam().devices(); }
  std::unique_ptr<Plugin> make(Options options) const {
    return std::make_unique<Plugin>(std::move(options), GetParam().file());
  }
  Plugin& p() { return *p_; }
  test::TempDir cache_;
  std::unique_ptr<Plugin> p_;
};

/// A runtime whose only backend is the target's CUDA plugin.
class RuntimeFixture : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (!fake()) HCR_NEED_GPU();
    else HCR_NEED_ONLY_FAKE_CUDA_LIBS();
    Config c = cuda_config({{"cache_dir", cache_.path().string()}});
    if (fake()) c.plugin_paths = {HCR_TEST_FAKE_CUDA_DIR};  // found before the real one
    rt_ = std::make_unique<Runtime>(c);
    ASSERT_EQ(rt_->devices().size(), static_cast<size_t>(GetParam().devices()));
  }
  bool fake() const { return GetParam().fake; }
  Runtime& rt() { return *rt_; }
  test::TempDir cache_;
  std::unique_ptr<Runtime> rt_;
};

}  // namespace
}  // namespace hcr
