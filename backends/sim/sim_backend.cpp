// The simulated backend plugin: devices declared in the [[backend]] table, each computing real
// results on the host (OpenBLAS gemm, user host functions) while holding the device for the
// modelled duration, with deterministic noise, slowdowns and fault injection. The timeline lives
// in sim_engine.cpp; this file turns ABI calls into timeline operations.
#include "sim_config.hpp"
#include "sim_engine.hpp"
#include "sim_units.hpp"

#include <hcr/sdk/backend.hpp>

#include <cblas.h>

#include <cstring>
#include <new>
#include <unordered_set>

namespace hcr::sim {
namespace {

using sdk::Error;

constexpr uint64_t kMemoryMagic = 0x68637273696d6d65ull;  // "hcrsimme"

// Streams of the deterministic random draws (see uniform()).
constexpr uint64_t kLaunchNoise = 1, kLaunchFail = 2, kLaunchHang = 3, kCopyNoise = 4,
                   kCopyFail = 5;

/// Host memory standing in for one device allocation.
struct SimMemory {
  uint64_t magic = kMemoryMagic;
  size_t device = 0;
  uint64_t bytes = 0;
  std::byte* data = nullptr;
};

enum class KernelType { gemm_f32, gemm_f64, host };

struct SimKernel {
  size_t device = 0;
  KernelType type = KernelType::host;
  std::string name;
  hcr_kernel_fn fn = nullptr;
  void* user_data = nullptr;
  double speed = 0;  // flop/s for this kernel on this device (gflops * factor)
  KernelCost cost;   // non-gemm kernels
};

size_t dtype_size(hcr_dtype_t t) {
  switch (t) {
    case HCR_DTYPE_BYTES: case HCR_DTYPE_U8: return 1;
    case HCR_DTYPE_F16: case HCR_DTYPE_BF16: return 2;
    case HCR_DTYPE_F32: case HCR_DTYPE_I32: return 4;
    case HCR_DTYPE_F64: case HCR_DTYPE_I64: return 8;
  }
  return 0;
}

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

// FNV-1a: a device's random streams follow its name, not its position in the table.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// a * b + c without wrapping; false when it would.
bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t& out) {
  if (a != 0 && b > (~uint64_t{0} - c) / a) return false;
  out = a * b + c;
  return true;
}

// Bytes spanned by `rows` rows of `width` bytes `pitch` apart, from `offset`; false on overflow.
bool span_end(uint64_t offset, uint64_t rows, uint64_t pitch, uint64_t width, uint64_t& end) {
  if (rows == 0 || width == 0) {
    end = offset;
    return true;
  }
  uint64_t last = 0;
  return mul_add(rows - 1, pitch, width, last) && mul_add(1, offset, last, end);
}

hcr_gemm_params_t gemm_params(const hcr_launch_args_t& a) {
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0};
  if (a.params_size >= HCR_GEMM_PARAMS_STRUCT_SIZE && a.params != nullptr)
    p = sdk::read_struct(static_cast<const hcr_gemm_params_t*>(a.params));
  else if (a.params_size != 0)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, "gemm parameters: " + std::to_string(a.params_size) +
                                                " bytes, expected an hcr_gemm_params_t");
  return p;
}

// Checks a gemm's arguments; returns its flops (2mnk).
double gemm_flops(const SimKernel& k, const std::vector<hcr_arg_t>& args) {
  if (args.size() != 3)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                k.name + " takes 3 buffers (A, B, C), got " + std::to_string(args.size()));
  const hcr_dtype_t want = k.type == KernelType::gemm_f32 ? HCR_DTYPE_F32 : HCR_DTYPE_F64;
  for (size_t i = 0; i < 3; ++i)
    if (args[i].dtype != want)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, k.name + " argument " + std::to_string(i) +
                                                  " is not an " +
                                                  (want == HCR_DTYPE_F32 ? "f32" : "f64") +
                                                  " matrix");
  const hcr_arg_t &A = args[0], &B = args[1], &C = args[2];
  if (B.rows != A.cols || C.rows != A.rows || C.cols != B.cols)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, k.name + " shapes do not match: A is " + shape(A) +
                                                ", B is " + shape(B) + ", C is " + shape(C));
  return 2.0 * static_cast<double>(A.rows) * static_cast<double>(B.cols) *
         static_cast<double>(A.cols);
}

template <class T>
void gemm(const std::vector<hcr_arg_t>& args, const hcr_gemm_params_t& p) {
  const hcr_arg_t &A = args[0], &B = args[1], &C = args[2];
  const auto m = static_cast<blasint>(A.rows), k = static_cast<blasint>(A.cols),
             n = static_cast<blasint>(B.cols);
  if (m == 0 || n == 0) return;
  // BLAS insists on ld >= max(1, columns) even where a single row makes ld meaningless, and it
  // prints (plugins never print) when it disagrees.
  auto ld = [](const hcr_arg_t& x) {
    return static_cast<blasint>(std::max<uint64_t>(x.ld, std::max<uint64_t>(1, x.cols)));
  };
  if constexpr (sizeof(T) == 4)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, static_cast<float>(p.alpha),
                static_cast<const float*>(A.host), ld(A),
                static_cast<const float*>(B.host), ld(B),
                static_cast<float>(p.beta), static_cast<float*>(C.host),
                ld(C));
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, p.alpha,
                static_cast<const double*>(A.host), ld(A),
                static_cast<const double*>(B.host), ld(B), p.beta,
                static_cast<double*>(C.host), ld(C));
}

class SimBackend final : public sdk::Backend {
 public:
  explicit SimBackend(const sdk::CreateContext& ctx)
      : Backend(ctx), machine_(parse_machine(ctx.options)), used_(machine_.devices.size(), 0) {
    // Each launch multiplies one tile on one worker: BLAS must not start threads of its own.
    openblas_set_num_threads(1);
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < machine_.devices.size(); ++i) {
      // Devices of the same name get distinct streams by their occurrence.
      uint64_t same = 0;
      for (size_t j = 0; j < i; ++j) same += machine_.devices[j].name == machine_.devices[i].name;
      keys.push_back(name_hash(machine_.devices[i].name) + same);
    }
    for (const DeviceConfig& c : machine_.devices)
      for (const std::string& key : c.ignored)
        host().warn("sim: option '" + key + "' has no effect: device '" + c.name +
                    "' works in host memory and has no link");
    sim_ = std::make_unique<Simulator>(machine_, std::move(keys),
                                       [this](const std::string& m) { host().warn(m); });
    host().info("sim: " + std::to_string(machine_.devices.size()) + " device(s), seed " +
                std::to_string(machine_.seed) + ", time_scale " +
                std::to_string(machine_.time_scale) + (machine_.compute ? "" : ", timing only"));
  }

  // Outstanding operations end first (hung ones with a timeout), then what the host did not free
  // (allocations, kernels) goes with the plugin that owns it.
  ~SimBackend() noexcept override {
    sim_->shutdown();
    for (SimMemory* m : live_) release(m);
    for (SimKernel* k : kernels_) delete k;
  }

  size_t device_count() override { return machine_.devices.size(); }

  void device_info(size_t device, sdk::DeviceInfo& info) override {
    const DeviceConfig& c = machine_.devices[device];
    info.name = c.name;
    info.arch = c.arch;
    info.kind = c.kind;
    info.flags = c.host_memory ? HCR_DEVICE_HOST_MEMORY : 0u;
    info.memory_bytes = c.memory;
    info.compute_units = c.compute_units;
    info.concurrency = c.concurrency;
    // Real-time figures: time_scale makes the whole device that much slower.
    info.peak_gflops = c.gflops / machine_.time_scale;
    // A host-memory device has no link: nothing is ever transferred to it.
    info.link_bandwidth = c.host_memory ? 0 : c.bandwidth / machine_.time_scale;
    info.link_latency = c.host_memory ? 0 : c.latency * machine_.time_scale;
  }

  // ---- memory -------------------------------------------------------------------------------

  hcr_memory_t* mem_alloc(size_t device, uint64_t bytes) override {
    const DeviceConfig& c = own_memory(device, "mem_alloc");
    check_not_lost(device, "mem_alloc");
    std::lock_guard<std::mutex> lock(memory_mutex_);
    if (bytes > c.memory - used_[device])
      throw Error(HCR_ERROR_OUT_OF_MEMORY,
                  "device '" + c.name + "': cannot allocate " + std::to_string(bytes) +
                      " bytes: " + std::to_string(used_[device]) + " of " +
                      std::to_string(c.memory) + " bytes (option memory) are in use");
    auto* data = static_cast<std::byte*>(
        ::operator new(std::max<uint64_t>(bytes, 1), std::align_val_t{64}, std::nothrow));
    if (data == nullptr)
      throw Error(HCR_ERROR_OUT_OF_MEMORY, "device '" + c.name + "': the host has no " +
                                               std::to_string(bytes) + " bytes to back it");
    auto* m = new SimMemory{kMemoryMagic, device, bytes, data};
    live_.insert(m);
    used_[device] += bytes;
    return reinterpret_cast<hcr_memory_t*>(m);
  }

  void mem_free(size_t, hcr_memory_t* memory) noexcept override {
    auto* m = reinterpret_cast<SimMemory*>(memory);
    std::lock_guard<std::mutex> lock(memory_mutex_);
    if (live_.erase(m) == 0) {
      host().warn("sim: mem_free of memory that is not a live allocation of this plugin");
      return;
    }
    used_[m->device] -= m->bytes;
    release(m);
  }

  void copy(const hcr_copy_args_t& a) override {
    const DeviceConfig& c = own_memory(a.device, "copy");
    check_not_lost(a.device, "copy");
    if ((a.src_memory == nullptr) == (a.src_host == nullptr))
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "copy: the source must be exactly one of src_memory and src_host");
    if ((a.dst_memory == nullptr) == (a.dst_host == nullptr))
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "copy: the destination must be exactly one of dst_memory and dst_host");
    if (a.src_host != nullptr && a.dst_host != nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "copy: host to host; a device engine copies to or from device memory");
    if (a.rows > 1 && (a.src_pitch < a.width || a.dst_pitch < a.width))
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "copy: pitches " + std::to_string(a.src_pitch) + " (source) and " +
                      std::to_string(a.dst_pitch) + " (destination) must be at least the width " +
                      std::to_string(a.width));
    const std::byte* src = a.src_host ? static_cast<const std::byte*>(a.src_host) : nullptr;
    std::byte* dst = a.dst_host ? static_cast<std::byte*>(a.dst_host) : nullptr;
    bool from_device = false, into_device = false;  // an end in a.device's own memory
    {
      std::lock_guard<std::mutex> lock(memory_mutex_);
      if (a.src_memory) {
        SimMemory& m = live(a.src_memory, "copy source");
        check_span(m, a.src_offset, a.rows, a.src_pitch, a.width, "copy source");
        src = m.data + a.src_offset;
        from_device = m.device == a.device;
      }
      if (a.dst_memory) {
        SimMemory& m = live(a.dst_memory, "copy destination");
        check_span(m, a.dst_offset, a.rows, a.dst_pitch, a.width, "copy destination");
        dst = m.data + a.dst_offset;
        into_device = m.device == a.device;
      }
    }
    if (!from_device && !into_device)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "copy: device " + std::to_string(a.device) + " ('" + c.name +
                      "') performs it but neither end is in its memory");

    const uint64_t seq = sim_->next_copy(a.device);
    const uint64_t key = sim_->device_key(a.device);
    const double bytes = static_cast<double>(a.width) * static_cast<double>(a.rows);
    auto op = std::make_unique<Op>();
    op->device = a.device;
    // One engine per direction, as on GPUs with two copy engines: into this device (from the host
    // or a peer), and out of it (to the host, a peer, or within its own memory).
    op->engine = into_device && !from_device ? EngineKind::copy_in : EngineKind::copy_out;
    op->what = "copy #" + std::to_string(seq) + " (" + std::to_string(a.width * a.rows) + " bytes)";
    op->base = (c.latency + bytes / c.bandwidth) *
               noise_factor(c.noise, machine_.seed, key, kCopyNoise, seq);
    if (uniform(machine_.seed, key, kCopyFail, seq) < c.copy_fail_probability) {
      op->fault = HCR_ERROR_BACKEND;
      op->fault_message = "device '" + c.name + "': injected failure of " + op->what +
                          " (copy_fail_probability " + std::to_string(c.copy_fail_probability) +
                          ")";
    }
    // Timing only (compute = false) moves no bytes either: nothing computes on them, and real
    // copies into fresh pages would cost the host more than the modelled link does.
    if (machine_.compute)
      op->work = [src, dst, a](uint32_t) -> hcr_error_t* {
        for (uint64_t r = 0; r < a.rows; ++r)
          std::memmove(dst + r * a.dst_pitch, src + r * a.src_pitch, a.width);
        return nullptr;
      };
    op->done = a.done;
    op->done_user_data = a.done_user_data;
    sim_->submit(std::move(op));
  }

  // ---- kernels ------------------------------------------------------------------------------

  hcr_kernel_t* kernel_get(size_t device, const hcr_kernel_desc_t& desc) override {
    const DeviceConfig& c = machine_.devices[device];
    std::string name = desc.name;
    if (!c.offers(name)) {
      std::string list;
      for (auto& k : *c.kernels) list += (list.empty() ? "" : ", ") + k;
      throw Error(HCR_ERROR_NOT_FOUND, "device '" + c.name + "' does not offer kernel '" + name +
                                           "' (its kernels: " + (list.empty() ? "none" : list) +
                                           ")");
    }
    auto k = std::make_unique<SimKernel>();
    k->device = device;
    k->name = name;
    k->speed = c.gflops * 1e9 * c.factor(name);
    switch (desc.kind) {
      case HCR_IMPL_BUILTIN:
        if (name == "gemm_f32") k->type = KernelType::gemm_f32;
        else if (name == "gemm_f64") k->type = KernelType::gemm_f64;
        else throw Error(HCR_ERROR_NOT_FOUND, "no built-in kernel '" + name + "'");
        break;
      case HCR_IMPL_HOST_FUNCTION:
        if (desc.fn == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "host function '" + name + "' is NULL");
        k->type = KernelType::host;
        k->fn = desc.fn;
        k->user_data = desc.user_data;
        k->cost = machine_.cost(name);
        break;
      default:
        throw Error(HCR_ERROR_UNSUPPORTED,
                    "simulated devices run host functions and their built-ins, not " +
                        std::string(desc.api ? desc.api : "?") + " code");
    }
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    kernels_.insert(k.get());
    return reinterpret_cast<hcr_kernel_t*>(k.release());
  }

  void kernel_release(hcr_kernel_t* kernel) noexcept override {
    auto* k = reinterpret_cast<SimKernel*>(kernel);
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (kernels_.erase(k) == 0) {
      host().warn("sim: kernel_release of a kernel that is not live in this plugin");
      return;
    }
    delete k;
  }

  void launch(const hcr_launch_args_t& a) override {
    const SimKernel& k = kernel_of(a);
    const DeviceConfig& c = machine_.devices[a.device];
    check_not_lost(a.device, "launch of '" + k.name + "'");
    std::vector<hcr_arg_t> args = resolve_args(a, c);
    const double base = nominal_seconds(k, c, args);
    if (k.type != KernelType::host) gemm_params(a);  // reject bad parameters now, not later

    const uint64_t seq = sim_->next_launch(a.device);
    const uint64_t key = sim_->device_key(a.device);
    auto op = std::make_unique<Op>();
    op->device = a.device;
    op->engine = EngineKind::compute;
    op->what = "launch #" + std::to_string(seq) + " of '" + k.name + "'";
    op->base = base * noise_factor(c.noise, machine_.seed, key, kLaunchNoise, seq);
    if (seq >= c.fail_after) {
      op->fault = HCR_ERROR_BACKEND;
      op->fault_message = "device '" + c.name + "': injected failure of " + op->what +
                          " (fail_after " + std::to_string(c.fail_after) + ")";
    } else if (uniform(machine_.seed, key, kLaunchFail, seq) < c.fail_probability) {
      op->fault = HCR_ERROR_BACKEND;
      op->fault_message = "device '" + c.name + "': injected failure of " + op->what +
                          " (fail_probability " + std::to_string(c.fail_probability) + ")";
    }
    op->hang = uniform(machine_.seed, key, kLaunchHang, seq) < c.hang_probability;
    if (machine_.compute) {
      const SimKernel* kp = &k;  // kernels are released only after synchronize
      op->work = [a, kp, args = std::move(args)](uint32_t slot) { return run(*kp, a, args, slot); };
    }
    op->done = a.done;
    op->done_user_data = a.done_user_data;
    sim_->submit(std::move(op));
  }

  void synchronize(size_t device) override { sim_->synchronize(device); }

  std::optional<double> estimate(const hcr_launch_args_t& a) override {
    if (!machine_.estimates) return std::nullopt;
    const SimKernel& k = kernel_of(a);
    std::vector<hcr_arg_t> args(a.args, a.args + a.num_args);
    return nominal_seconds(k, machine_.devices[a.device], args) * machine_.time_scale;
  }

 private:
  const SimKernel& kernel_of(const hcr_launch_args_t& a) {
    check_device(a.device);
    if (a.kernel == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch without a kernel");
    const auto& k = *reinterpret_cast<const SimKernel*>(a.kernel);
    if (k.device != a.device)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "kernel '" + k.name + "' was made for device " + std::to_string(k.device) +
                      ", not device " + std::to_string(a.device));
    if (a.num_args > 0 && a.args == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch of '" + k.name + "': args is NULL");
    return k;
  }

  // The modelled duration before noise and slowdown: what `estimate` reports.
  double nominal_seconds(const SimKernel& k, const DeviceConfig& c,
                         const std::vector<hcr_arg_t>& args) const {
    double flops = 0;
    if (k.type == KernelType::host) {
      double bytes = 0;
      for (const hcr_arg_t& x : args)
        bytes += static_cast<double>(x.rows) * static_cast<double>(x.cols) *
                 static_cast<double>(dtype_size(x.dtype));
      flops = k.cost.flops + k.cost.flops_per_byte * bytes;
    } else {
      flops = gemm_flops(k, args);
    }
    return c.launch_overhead + flops / k.speed;
  }

  // The launch's arguments with `host` pointing at the data: the caller's pointer on a host-memory
  // device, the simulated allocation (base + offset) otherwise. Checks every argument's extent.
  std::vector<hcr_arg_t> resolve_args(const hcr_launch_args_t& a, const DeviceConfig& c) {
    std::vector<hcr_arg_t> args;
    args.reserve(a.num_args);
    std::lock_guard<std::mutex> lock(memory_mutex_);
    for (size_t i = 0; i < a.num_args; ++i) {
      hcr_arg_t x = sdk::read_struct(&a.args[i]);
      const std::string which = "argument " + std::to_string(i) + " (" + shape(x) + ")";
      size_t esize = dtype_size(x.dtype);
      if (esize == 0)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + " has unknown dtype " + std::to_string(static_cast<int>(x.dtype)));
      if (x.rows > 1 && x.ld < x.cols)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + ": ld " + std::to_string(x.ld) + " is below its columns");
      const bool empty = x.rows == 0 || x.cols == 0;
      if (c.host_memory) {
        if (x.memory != nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      which + " is device memory, but device '" + c.name + "' works in host memory");
        if (x.host == nullptr && !empty)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " has no host pointer");
      } else {
        if (x.memory == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      which + " is not in device memory; device '" + c.name +
                          "' has its own (stage it with mem_alloc and copy)");
        SimMemory& m = live(x.memory, which);
        if (m.device != a.device)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      which + " lives on device " + std::to_string(m.device) +
                          ", not on device " + std::to_string(a.device));
        uint64_t width = 0, pitch = 0;
        if (!mul_add(x.cols, esize, 0, width) || !mul_add(x.ld, esize, 0, pitch))
          throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is implausibly large");
        check_span(m, x.offset, x.rows, pitch, width, which);
        x.host = m.data + x.offset;
      }
      args.push_back(x);
    }
    return args;
  }

  // Runs on a worker: the real computation behind a launch. Returns its error (NULL: success).
  static hcr_error_t* run(const SimKernel& k, hcr_launch_args_t a,
                          const std::vector<hcr_arg_t>& args, uint32_t slot) noexcept {
    switch (k.type) {
      case KernelType::gemm_f32:
        return sdk::guard([&] { gemm<float>(args, gemm_params(a)); });
      case KernelType::gemm_f64:
        return sdk::guard([&] { gemm<double>(args, gemm_params(a)); });
      case KernelType::host:
        break;
    }
    a.args = args.data();  // with host pointers into the simulated memory
    return sdk::run_host_function(k.fn, k.user_data, sdk::exec_context(a, slot));
  }

  const DeviceConfig& own_memory(size_t device, const char* what) {
    check_device(device);
    const DeviceConfig& c = machine_.devices[device];
    if (c.host_memory)
      throw Error(HCR_ERROR_UNSUPPORTED, std::string(what) + ": device '" + c.name +
                                             "' works in host memory (host_memory = true)");
    return c;
  }

  void check_not_lost(size_t device, const std::string& what) {
    const DeviceConfig& c = machine_.devices[device];
    if (sim_->clock().now() >= c.lost_at)
      throw Error(HCR_ERROR_DEVICE_LOST, "device '" + c.name + "' was lost at " +
                                             format_seconds(c.lost_at) +
                                             " (modelled, lost_at): " + what + " refused");
  }

  // Under memory_mutex_.
  SimMemory& live(hcr_memory_t* memory, const std::string& what) {
    auto* m = reinterpret_cast<SimMemory*>(memory);
    if (live_.count(m) == 0 || m->magic != kMemoryMagic)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  what + ": memory is not a live allocation of this plugin");
    return *m;
  }

  static void check_span(const SimMemory& m, uint64_t offset, uint64_t rows, uint64_t pitch,
                         uint64_t width, const std::string& what) {
    uint64_t end = 0;
    if (!span_end(offset, rows, pitch, width, end) || end > m.bytes)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  what + ": " + std::to_string(rows) + " row(s) of " + std::to_string(width) +
                      " bytes, " + std::to_string(pitch) + " apart, from offset " +
                      std::to_string(offset) + " overrun the allocation of " +
                      std::to_string(m.bytes) + " bytes");
  }

  static void release(SimMemory* m) noexcept {
    ::operator delete(m->data, std::align_val_t{64});
    delete m;
  }

  MachineConfig machine_;
  std::mutex memory_mutex_;
  std::unordered_set<SimMemory*> live_;
  std::vector<uint64_t> used_;
  std::mutex kernels_mutex_;
  std::unordered_set<SimKernel*> kernels_;
  std::unique_ptr<Simulator> sim_;  // last: its threads stop before the rest goes
};

}  // namespace
}  // namespace hcr::sim

HCR_SDK_PLUGIN(hcr::sim::SimBackend, "sim", "0.1.0")
