// hcr backend SDK: write a backend as a C++ class, get the C plugin table for free.
//
// Header-only on purpose: an out-of-tree backend compiles it with its own compiler and flags, so no
// C++ ABI is shared between the runtime and the plugin — only <hcr/plugin.h> crosses.
//
//   class MyBackend final : public hcr::sdk::Backend {
//    public:
//     explicit MyBackend(const hcr::sdk::CreateContext& ctx) : Backend(ctx) {
//       ctx.options.check_all_used();   // unknown [[backend]] keys are errors
//     }
//     size_t device_count() override { return 1; }
//     void device_info(size_t, hcr::sdk::DeviceInfo& info) override { info.name = "mine"; ... }
//     ...
//   };
//   HCR_SDK_PLUGIN(MyBackend, "mine", "1.0")
//
// Every ABI entry is noexcept: the adapter turns hcr::sdk::Error (and any other exception) into an
// hcr_error_t. Throw hcr::sdk::Error with a code and a message that names the value at fault.
#pragma once

#include <hcr/plugin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

/// The error object every SDK-built plugin hands out (each plugin has its own, hidden copy).
struct hcr_error {
  hcr_error_code_t code;
  std::string message;
};

namespace hcr::sdk {

/// Exception a backend throws; the adapter turns it into an hcr_error_t with this code.
class Error : public std::runtime_error {
 public:
  Error(hcr_error_code_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  hcr_error_code_t code() const noexcept { return code_; }

 private:
  hcr_error_code_t code_;
};

/// The error handed out when even allocating an error fails; never freed.
inline hcr_error_t* out_of_memory_error() noexcept {
  static hcr_error oom{HCR_ERROR_OUT_OF_MEMORY, "out of memory creating an error"};
  return &oom;
}

/// Allocates an ABI error; ownership passes to whoever receives it.
inline hcr_error_t* make_error(hcr_error_code_t code, std::string message) noexcept {
  try {
    return new hcr_error{code, std::move(message)};
  } catch (...) {
    return out_of_memory_error();
  }
}

/// Runs `f`, turning any exception into an ABI error (NULL on success).
template <class F>
hcr_error_t* guard(F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const Error& e) {
    return make_error(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return make_error(HCR_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return make_error(HCR_ERROR_INTERNAL, e.what());
  } catch (...) {
    return make_error(HCR_ERROR_UNKNOWN, "unknown exception in backend");
  }
}

/// Copies a caller's struct into a zero-initialised local of this build's layout, reading only
/// the bytes both sides know (the caller may be older or newer).
template <class T>
T read_struct(const T* in) {
  T out{};
  if (in == nullptr) return out;
  size_t n = std::min(in->struct_size, sizeof(T));
  std::memcpy(static_cast<void*>(&out), in, n);
  out.struct_size = sizeof(T);
  return out;
}

/// The name of an element type, for messages ("f32"; a value no version defines is "dtype N").
inline std::string dtype_name(hcr_dtype_t t) {
  switch (t) {
    case HCR_DTYPE_BYTES: return "bytes";
    case HCR_DTYPE_F16: return "f16";
    case HCR_DTYPE_BF16: return "bf16";
    case HCR_DTYPE_F32: return "f32";
    case HCR_DTYPE_F64: return "f64";
    case HCR_DTYPE_I32: return "i32";
    case HCR_DTYPE_I64: return "i64";
    case HCR_DTYPE_U8: return "u8";
  }
  return "dtype " + std::to_string(static_cast<int>(t));
}

/// Element i of an array of structs the host sent (hcr_arg_t, hcr_option_t): the stride is the
/// sender's struct_size, which may differ from this build's sizeof in another minor version. Only
/// the fields both sides know may be read (see read_struct).
template <class T>
const T& element(const T* array, size_t i) noexcept {
  const size_t stride = array[0].struct_size;
  return *reinterpret_cast<const T*>(reinterpret_cast<const char*>(array) + i * stride);
}

/// Writes `src` into a caller's out-struct, only the bytes the caller's struct_size covers.
template <class T>
void write_struct(T* dst, const T& src) {
  size_t n = std::min(dst->struct_size, sizeof(T));
  if (n <= sizeof(size_t)) return;
  std::memcpy(reinterpret_cast<char*>(dst) + sizeof(size_t),
              reinterpret_cast<const char*>(&src) + sizeof(size_t), n - sizeof(size_t));
}

/// The host's services: logging goes through here (plugins never print).
class Host {
 public:
  explicit Host(const hcr_host_services_t* s = nullptr) : s_(s) {}
  bool enabled(hcr_log_level_t level) const noexcept {
    return s_ != nullptr && s_->log != nullptr && level >= s_->log_level;
  }
  void log(hcr_log_level_t level, const std::string& message) const noexcept {
    if (enabled(level)) s_->log(s_->host_context, level, message.c_str());
  }
  void info(const std::string& m) const noexcept { log(HCR_LOG_INFO, m); }
  void warn(const std::string& m) const noexcept { log(HCR_LOG_WARN, m); }
  void debug(const std::string& m) const noexcept { log(HCR_LOG_DEBUG, m); }

 private:
  const hcr_host_services_t* s_;
};

/// The [[backend]] table's keys as strings, with typed getters that name the key on a bad value.
/// Call check_all_used() after reading: any key never read is reported as unknown.
class Options {
 public:
  Options() = default;
  Options(const hcr_option_t* options, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (options[i].key == nullptr || options[i].value == nullptr) continue;
      items_.push_back({options[i].key, options[i].value, false});
    }
  }

  std::optional<std::string> get(std::string_view key) const {
    for (auto& it : items_)
      if (it.key == key) {
        it.used = true;
        return it.value;
      }
    return std::nullopt;
  }
  std::string get(std::string_view key, std::string fallback) const {
    auto v = get(key);
    return v ? *v : std::move(fallback);
  }
  long long get_int(std::string_view key, long long fallback) const {
    auto v = get(key);
    if (!v) return fallback;
    try {
      size_t pos = 0;
      long long r = std::stoll(*v, &pos);
      if (pos == v->size()) return r;
    } catch (...) {
    }
    bad(key, *v, "an integer");
  }
  double get_double(std::string_view key, double fallback) const {
    auto v = get(key);
    if (!v) return fallback;
    try {
      size_t pos = 0;
      double r = std::stod(*v, &pos);
      if (pos == v->size()) return r;
    } catch (...) {
    }
    bad(key, *v, "a number");
  }
  bool get_bool(std::string_view key, bool fallback) const {
    auto v = get(key);
    if (!v) return fallback;
    if (*v == "true") return true;
    if (*v == "false") return false;
    bad(key, *v, "true or false");
  }
  /// Every key that starts with `prefix` (e.g. "device." for arrays of tables), marked used.
  std::vector<std::pair<std::string, std::string>> with_prefix(std::string_view prefix) const {
    std::vector<std::pair<std::string, std::string>> r;
    for (auto& it : items_)
      if (it.key.compare(0, prefix.size(), prefix) == 0) {
        it.used = true;
        r.emplace_back(it.key, it.value);
      }
    return r;
  }
  /// Throws HCR_ERROR_INVALID_ARGUMENT naming every key never read, each in quotes ("unknown
  /// options 'threds', 'devcies'"): the host reports them at their lines in the configuration.
  void check_all_used() const {
    std::string unknown;
    size_t n = 0;
    for (auto& it : items_)
      if (!it.used) unknown += std::string(n++ ? ", '" : "'") + it.key + "'";
    if (n > 0)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  (n == 1 ? "unknown option " : "unknown options ") + unknown);
  }

 private:
  [[noreturn]] static void bad(std::string_view key, const std::string& value, const char* want) {
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                "option '" + std::string(key) + "' = '" + value + "' is not " + want);
  }
  struct Item {
    std::string key, value;
    mutable bool used;
  };
  std::vector<Item> items_;
};

/// What a backend's constructor receives.
struct CreateContext {
  Host host;
  Options options;
  std::string library_path;
};

/// Device description a backend fills in; the adapter copies it into the caller's struct.
struct DeviceInfo {
  std::string name;
  std::string arch;
  hcr_device_kind_t kind = HCR_DEVICE_CPU;
  uint32_t flags = 0;
  uint64_t memory_bytes = 0;
  uint32_t compute_units = 1;
  uint32_t concurrency = 1;
  double peak_gflops = 0;
  double link_bandwidth = 0;
  double link_latency = 0;
};

/// A built-in kernel's parameter block of type T (plugin.h's hcr_*_params_t), or nullopt when the
/// launch sent none (the defaults apply). It must hold at least `min_size` bytes (the fields of the
/// oldest ABI version that has the kernel) and say so in its struct_size; bytes past the caller's
/// struct_size are not read, so a field the caller does not know keeps its zero, which each
/// enumeration makes the BLAS default (an ABI 1.0 gemm block: no transposes). `type` names T in
/// the error ("hcr_gemm_params_t"), `kernel` the kernel.
template <class T>
std::optional<T> read_params(const std::string& kernel, const char* type,
                             const hcr_launch_args_t& a, size_t min_size) {
  if (a.params_size == 0) return std::nullopt;
  const std::string expected =
      std::string("expected an ") + type + " of at least " + std::to_string(min_size) + " bytes";
  if (a.params == nullptr || a.params_size < min_size)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                kernel + " parameters: " + std::to_string(a.params_size) + " bytes, " + expected);
  size_t declared = 0;
  std::memcpy(&declared, a.params, sizeof declared);
  if (declared < min_size || declared > a.params_size)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                kernel + " parameters: struct_size = " + std::to_string(declared) +
                    " in a block of " + std::to_string(a.params_size) + " bytes, " + expected);
  T p{};
  std::memcpy(static_cast<void*>(&p), a.params, std::min(declared, sizeof(T)));
  return p;
}

/// An enumeration field of a built-in's parameter block that is 0 or 1 (HCR_NO_TRANS/HCR_TRANS,
/// HCR_LOWER/HCR_UPPER, ...): whether it is 1; any other value refuses the launch naming it.
inline bool param_flag(const std::string& kernel, const char* field, int32_t v, const char* zero,
                       const char* one) {
  if (v != 0 && v != 1)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, kernel + " parameter " + field + " = " +
                                                std::to_string(v) + ": must be " + zero +
                                                " (0) or " + one + " (1)");
  return v == 1;
}

/// The kernel of launch `a` as the backend's own type K (one with `device` and `name` members, made
/// by its kernel_get): throws Error(HCR_ERROR_INVALID_ARGUMENT) for a launch without a kernel, with
/// a kernel made for another device, or with arguments but no array of them.
template <class K>
K& launch_kernel(const hcr_launch_args_t& a) {
  if (a.kernel == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch without a kernel");
  K& k = *reinterpret_cast<K*>(a.kernel);
  if (k.device != a.device)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "kernel '" + k.name + "' was made for device " +
                                                std::to_string(k.device) + ", not device " +
                                                std::to_string(a.device));
  if (a.num_args > 0 && a.args == nullptr)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch of '" + k.name + "': args is NULL");
  return k;
}

/// Calls the launch's or copy's done callback exactly once. `joules`: what the operation used
/// above the device's idle draw, where the plugin knows it for the operation alone (< 0: not).
inline void complete(hcr_done_fn done, void* user, hcr_error_t* error, double seconds = -1,
                     double joules = -1) noexcept {
  hcr_completion_info_t info{HCR_COMPLETION_INFO_STRUCT_SIZE, seconds, joules};
  done(user, error, &info);
}

/// The context a host or native function receives for launch `a`.
inline hcr_exec_context_t exec_context(const hcr_launch_args_t& a, uint32_t worker = 0,
                                       void* native_queue = nullptr,
                                       void* native_device = nullptr) noexcept {
  hcr_exec_context_t ctx{};
  ctx.struct_size = HCR_EXEC_CONTEXT_STRUCT_SIZE;
  ctx.args = a.args;
  ctx.num_args = a.num_args;
  ctx.params = a.params;
  ctx.params_size = a.params_size;
  ctx.host_token = a.host_token;
  ctx.native_queue = native_queue;
  ctx.native_device = native_device;
  ctx.device = a.device;
  ctx.worker = worker;
  ctx.param_offsets = a.param_offsets;
  ctx.num_params = a.num_params;
  return ctx;
}

/// Runs a host-function implementation and returns its error (NULL on success).
inline hcr_error_t* run_host_function(hcr_kernel_fn fn, void* user_data,
                                      const hcr_exec_context_t& ctx) noexcept {
  char message[512] = {0};
  int rc = 0;
  try {
    rc = fn(user_data, &ctx, message, sizeof message);
  } catch (...) {  // a C function must not throw; be tolerant anyway
    return make_error(HCR_ERROR_KERNEL, "kernel threw across the C boundary");
  }
  if (rc == 0) return nullptr;
  message[sizeof message - 1] = '\0';
  return make_error(HCR_ERROR_KERNEL, message[0] ? message : "kernel failed");
}

/// One node of a device graph (ABI 1.2), owned: the adapter copies what hcr_graph_node_t lends
/// for graph_create alone (the parameter bytes, their offsets, the successors), so that a backend
/// keeps a node by moving it, never field by field.
struct GraphNode {
  hcr_kernel_t* kernel = nullptr;  // the backend's own, from kernel_get on the graph's device
  std::vector<std::byte> params;
  std::vector<uint32_t> param_offsets;
  uint64_t global_size[3] = {0, 0, 0};
  uint32_t local_size[3] = {0, 0, 0};
  void* host_token = nullptr;
  size_t first_arg = 0;  // its arguments: num_args of the graph's array from first_arg
  size_t num_args = 0;
  std::vector<uint32_t> successors;  // all later nodes (checked)

  /// The node as a launch over `args` (its own arguments, already offset by first_arg) on
  /// `device`: no done and no flags, which are the graph's. Points into the node: valid while it
  /// lives unchanged.
  hcr_launch_args_t launch(size_t device, const hcr_arg_t* args) const noexcept {
    hcr_launch_args_t a{};
    a.struct_size = sizeof a;
    a.device = device;
    a.kernel = kernel;
    a.args = args;
    a.num_args = num_args;
    a.params = params.empty() ? nullptr : params.data();
    a.params_size = params.size();
    a.param_offsets = param_offsets.empty() ? nullptr : param_offsets.data();
    a.num_params = param_offsets.size();
    std::copy(global_size, global_size + 3, a.global_size);
    std::copy(local_size, local_size + 3, a.local_size);
    a.host_token = host_token;
    return a;
  }
};

/// A device graph as graph_create hands it over (ABI 1.2), read into this build's structs and
/// checked: every successor index names a later node, and the nodes' argument counts add up to
/// the argument array's. The nodes are the backend's to keep (move them out); the argument array
/// is borrowed for the call, as the ABI says.
struct GraphDesc {
  size_t device = 0;
  std::vector<GraphNode> nodes;
  std::vector<uint32_t> predecessors;  // per node: how many nodes list it as a successor
  std::vector<uint32_t> roots;         // the nodes without predecessors, in node order
  const hcr_arg_t* args = nullptr;     // the sender's stride: sdk::element, or arg_at below
  size_t num_args = 0;

  /// The address of argument `i` of the array (its sender's stride).
  static const hcr_arg_t* arg_at(const hcr_arg_t* array, size_t i) noexcept {
    return i == 0 ? array : &element(array, i);
  }
};

/// Base class of a backend instance. One object per [[backend]] table.
class Backend {
 public:
  explicit Backend(const CreateContext& ctx) : host_(ctx.host) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual size_t device_count() = 0;
  virtual void device_info(size_t device, DeviceInfo& info) = 0;

  virtual hcr_memory_t* mem_alloc(size_t /*device*/, uint64_t /*bytes*/) {
    throw Error(HCR_ERROR_UNSUPPORTED, "this backend has no device memory");
  }
  virtual void mem_free(size_t /*device*/, hcr_memory_t* /*memory*/) noexcept {}
  virtual void copy(const hcr_copy_args_t& /*args*/) {
    throw Error(HCR_ERROR_UNSUPPORTED, "this backend has no device memory");
  }

  /// Throw Error(HCR_ERROR_NOT_FOUND or HCR_ERROR_UNSUPPORTED) when the device cannot run it.
  virtual hcr_kernel_t* kernel_get(size_t device, const hcr_kernel_desc_t& desc) = 0;
  virtual void kernel_release(hcr_kernel_t* kernel) noexcept = 0;
  virtual void launch(const hcr_launch_args_t& args) = 0;
  virtual void synchronize(size_t device) = 0;

  virtual void* host_alloc(uint64_t /*bytes*/) {
    throw Error(HCR_ERROR_UNSUPPORTED, "this backend has no pinned host memory");
  }
  virtual void host_free(void* /*ptr*/) noexcept {}
  virtual std::optional<double> estimate(const hcr_launch_args_t& /*args*/) { return std::nullopt; }
  /// The device's energy meter (ABI 1.1): fill `reading` (its source, joules, watts, idle watts,
  /// resolution) and return true; false (the default) when the device has none.
  virtual bool device_energy(size_t /*device*/, hcr_energy_reading_t& /*reading*/) { return false; }
  /// Device graphs (ABI 1.2, see hcr_graph_node_t): throw Error(HCR_ERROR_UNSUPPORTED) (the
  /// default) for a graph this device cannot run as one; the host then replays it task by task.
  /// The desc is the backend's: it moves out the nodes it keeps.
  virtual hcr_graph_t* graph_create(GraphDesc /*graph*/) {
    throw Error(HCR_ERROR_UNSUPPORTED, "this backend does not run device graphs");
  }
  virtual void graph_launch(const hcr_graph_launch_args_t& /*args*/) {
    throw Error(HCR_ERROR_UNSUPPORTED, "this backend does not run device graphs");
  }
  virtual void graph_release(hcr_graph_t* /*graph*/) noexcept {}

  const Host& host() const noexcept { return host_; }

  /// Keeps a device's name and arch strings alive until destruction: they cross the ABI by
  /// pointer, and a pointer once handed out stays valid even if a later query returns new text.
  const std::pair<std::string, std::string>& kept_strings(std::string name, std::string arch) {
    std::lock_guard<std::mutex> lock(kept_mutex_);
    for (auto& k : kept_)
      if (k->first == name && k->second == arch) return *k;
    kept_.push_back(
        std::make_unique<std::pair<std::string, std::string>>(std::move(name), std::move(arch)));
    return *kept_.back();
  }

  /// Checks a device index from the host against the count last reported to it.
  void check_device(size_t device) {
    size_t n = reported_devices_.load(std::memory_order_relaxed);
    if (n == kUnknown) n = report_device_count();
    if (device >= n) throw Error(HCR_ERROR_NOT_FOUND, "no device " + std::to_string(device));
  }
  /// device_count(), remembered for check_device.
  size_t report_device_count() {
    size_t n = device_count();
    reported_devices_.store(n, std::memory_order_relaxed);
    return n;
  }

 private:
  Host host_;
  static constexpr size_t kUnknown = ~size_t{0};
  std::atomic<size_t> reported_devices_{kUnknown};
  std::mutex kept_mutex_;
  std::vector<std::unique_ptr<std::pair<std::string, std::string>>> kept_;
};

namespace detail {

inline Backend* self(hcr_plugin_t* p) { return reinterpret_cast<Backend*>(p); }

template <class B>
struct Adapter {
  static hcr_error_code_t error_code(const hcr_error_t* e) noexcept {
    return e ? e->code : HCR_ERROR_UNKNOWN;
  }
  static const char* error_message(const hcr_error_t* e) noexcept {
    return e ? e->message.c_str() : "";
  }
  static void error_destroy(hcr_error_t* e) noexcept {
    if (e != out_of_memory_error()) delete e;
  }
  static hcr_error_t* plugin_create(hcr_plugin_create_args_t* args) noexcept {
    if (args == nullptr || args->struct_size < HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE)
      return make_error(HCR_ERROR_INVALID_ARGUMENT, "plugin_create: args too small");
    return guard([&] {
      CreateContext ctx{Host(args->services), Options(args->options, args->num_options),
                        args->library_path ? args->library_path : ""};
      Backend* b = new B(ctx);
      args->plugin = reinterpret_cast<hcr_plugin_t*>(b);
    });
  }
  static void plugin_destroy(hcr_plugin_t* p) noexcept { delete self(p); }
  static hcr_error_t* device_count(hcr_plugin_t* p, size_t* count) noexcept {
    return guard([&] { *count = self(p)->report_device_count(); });
  }
  static hcr_error_t* device_info(hcr_plugin_t* p, size_t device, hcr_device_info_t* out) noexcept {
    return guard([&] {
      self(p)->check_device(device);
      DeviceInfo d;
      self(p)->device_info(device, d);
      // The strings must live until plugin_destroy: the instance keeps them.
      auto& keep = self(p)->kept_strings(std::move(d.name), std::move(d.arch));
      hcr_device_info_t full{};
      full.struct_size = HCR_DEVICE_INFO_STRUCT_SIZE;
      full.name = keep.first.c_str();
      full.arch = keep.second.c_str();
      full.kind = d.kind;
      full.flags = d.flags;
      full.memory_bytes = d.memory_bytes;
      full.compute_units = d.compute_units;
      full.concurrency = d.concurrency == 0 ? 1 : d.concurrency;
      full.peak_gflops = d.peak_gflops;
      full.link_bandwidth = d.link_bandwidth;
      full.link_latency = d.link_latency;
      write_struct(out, full);
    });
  }
  static hcr_error_t* mem_alloc(hcr_plugin_t* p, hcr_mem_alloc_args_t* args) noexcept {
    return guard([&] {
      self(p)->check_device(args->device);
      args->memory = self(p)->mem_alloc(args->device, args->bytes);
    });
  }
  static void mem_free(hcr_plugin_t* p, size_t device, hcr_memory_t* m) noexcept {
    if (m == nullptr) return;
    if (hcr_error_t* e = guard([&] { self(p)->check_device(device); })) {
      error_destroy(e);  // nothing to report to: the memory is not ours to free
      return;
    }
    self(p)->mem_free(device, m);
  }
  static hcr_error_t* copy(hcr_plugin_t* p, const hcr_copy_args_t* args) noexcept {
    return guard([&] {
      auto a = read_struct(args);
      self(p)->check_device(a.device);
      self(p)->copy(a);
    });
  }
  static hcr_error_t* kernel_get(hcr_plugin_t* p, hcr_kernel_get_args_t* args) noexcept {
    return guard([&] {
      self(p)->check_device(args->device);
      auto desc = read_struct(args->desc);
      if (desc.name == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "kernel without a name");
      args->kernel = self(p)->kernel_get(args->device, desc);
    });
  }
  static void kernel_release(hcr_plugin_t* p, hcr_kernel_t* k) noexcept {
    self(p)->kernel_release(k);
  }
  static hcr_error_t* launch(hcr_plugin_t* p, const hcr_launch_args_t* args) noexcept {
    return guard([&] {
      auto a = read_struct(args);
      if (a.done == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch without done");
      self(p)->check_device(a.device);
      self(p)->launch(a);
    });
  }
  static hcr_error_t* synchronize(hcr_plugin_t* p, size_t device) noexcept {
    return guard([&] {
      self(p)->check_device(device);
      self(p)->synchronize(device);
    });
  }
  static hcr_error_t* host_alloc(hcr_plugin_t* p, uint64_t bytes, void** out) noexcept {
    return guard([&] { *out = self(p)->host_alloc(bytes); });
  }
  static void host_free(hcr_plugin_t* p, void* ptr) noexcept { self(p)->host_free(ptr); }
  static hcr_error_t* estimate(hcr_plugin_t* p, const hcr_launch_args_t* args,
                               double* seconds) noexcept {
    return guard([&] {
      auto r = self(p)->estimate(read_struct(args));
      if (!r) throw Error(HCR_ERROR_UNSUPPORTED, "no estimate");
      *seconds = *r;
    });
  }
  static hcr_error_t* device_energy(hcr_plugin_t* p, size_t device,
                                    hcr_energy_reading_t* out) noexcept {
    return guard([&] {
      self(p)->check_device(device);
      hcr_energy_reading_t r{HCR_ENERGY_READING_STRUCT_SIZE, HCR_ENERGY_NONE, 0, -1, -1, 0};
      if (!self(p)->device_energy(device, r)) throw Error(HCR_ERROR_UNSUPPORTED, "no energy meter");
      write_struct(out, r);
    });
  }
  static hcr_error_t* graph_create(hcr_plugin_t* p, hcr_graph_create_args_t* args) noexcept {
    return guard([&] {
      if (args == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_create without args");
      self(p)->check_device(args->device);
      if (args->num_nodes > 0 && args->nodes == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_create: nodes is NULL");
      if (args->num_args > 0 && args->args == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_create: args is NULL");
      GraphDesc g;
      g.device = args->device;
      g.args = args->args;
      g.num_args = args->num_args;
      g.nodes.reserve(args->num_nodes);
      g.predecessors.assign(args->num_nodes, 0);
      size_t next = 0;
      for (size_t i = 0; i < args->num_nodes; ++i) {
        hcr_graph_node_t n = read_struct(&element(args->nodes, i));
        if (n.kernel == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      "graph_create: node " + std::to_string(i) + " has no kernel");
        if (n.num_successors > 0 && n.successors == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      "graph_create: node " + std::to_string(i) + "'s successors are NULL");
        for (size_t k = 0; k < n.num_successors; ++k)
          if (n.successors[k] <= i || n.successors[k] >= args->num_nodes)
            throw Error(HCR_ERROR_INVALID_ARGUMENT,
                        "graph_create: node " + std::to_string(i) + "'s successor " +
                            std::to_string(n.successors[k]) +
                            " is not a later node (nodes come in dependency order)");
        // What the node borrows is copied now: it lives only for this call.
        GraphNode& x = g.nodes.emplace_back();
        x.kernel = n.kernel;
        if (n.params_size > 0 && n.params != nullptr) {
          const auto* bytes = static_cast<const std::byte*>(n.params);
          x.params.assign(bytes, bytes + n.params_size);
        }
        if (n.num_params > 0 && n.param_offsets != nullptr)
          x.param_offsets.assign(n.param_offsets, n.param_offsets + n.num_params);
        std::copy(n.global_size, n.global_size + 3, x.global_size);
        std::copy(n.local_size, n.local_size + 3, x.local_size);
        x.host_token = n.host_token;
        x.first_arg = next;
        x.num_args = n.num_args;
        x.successors.assign(n.successors, n.successors + n.num_successors);
        for (uint32_t s : x.successors) ++g.predecessors[s];
        next += n.num_args;
      }
      if (next != args->num_args)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "graph_create: the nodes take " + std::to_string(next) +
                        " arguments, the array has " + std::to_string(args->num_args));
      for (size_t i = 0; i < g.predecessors.size(); ++i)
        if (g.predecessors[i] == 0) g.roots.push_back(static_cast<uint32_t>(i));
      args->graph = self(p)->graph_create(std::move(g));
    });
  }
  static hcr_error_t* graph_launch(hcr_plugin_t* p, const hcr_graph_launch_args_t* args) noexcept {
    return guard([&] {
      auto a = read_struct(args);
      if (a.graph == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch without a graph");
      if (a.done == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch without done");
      if (a.num_args > 0 && a.args == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, "graph_launch: args is NULL");
      self(p)->graph_launch(a);
    });
  }
  static void graph_release(hcr_plugin_t* p, hcr_graph_t* g) noexcept {
    if (g != nullptr) self(p)->graph_release(g);
  }
};

}  // namespace detail

/// The static table for backend class B.
template <class B>
const hcr_plugin_api_t* plugin_api(const char* name, const char* version) noexcept {
  using A = detail::Adapter<B>;
  static const hcr_plugin_api_t api = [&] {
    hcr_plugin_api_t t{};
    t.struct_size = HCR_PLUGIN_API_STRUCT_SIZE;
    t.abi_major = HCR_ABI_MAJOR;
    t.abi_minor = HCR_ABI_MINOR;
    t.name = name;
    t.version = version;
    t.error_code = &A::error_code;
    t.error_message = &A::error_message;
    t.error_destroy = &A::error_destroy;
    t.plugin_create = &A::plugin_create;
    t.plugin_destroy = &A::plugin_destroy;
    t.device_count = &A::device_count;
    t.device_info = &A::device_info;
    t.mem_alloc = &A::mem_alloc;
    t.mem_free = &A::mem_free;
    t.copy = &A::copy;
    t.kernel_get = &A::kernel_get;
    t.kernel_release = &A::kernel_release;
    t.launch = &A::launch;
    t.synchronize = &A::synchronize;
    t.host_alloc = &A::host_alloc;
    t.host_free = &A::host_free;
    t.estimate = &A::estimate;
    t.device_energy = &A::device_energy;
    t.graph_create = &A::graph_create;
    t.graph_launch = &A::graph_launch;
    t.graph_release = &A::graph_release;
    return t;
  }();
  return &api;
}

}  // namespace hcr::sdk

/// Defines the plugin's one exported entry point for backend class `Class`.
#define HCR_SDK_PLUGIN(Class, name, version)                                      \
  extern "C" HCR_PLUGIN_EXPORT const hcr_plugin_api_t* hcr_plugin_get_api(void) { \
    return ::hcr::sdk::plugin_api<Class>(name, version);                          \
  }
