// The OpenCL backend plugin: the devices of every OpenCL platform the ICD loader knows (GPUs, FPGAs
// and other accelerators; CPU devices only when asked for), each with its own memory, one copy
// queue and `queues` compute queues. Built-in gemm, syrk and trsm through CLBlast; user kernels as
// OpenCL C (compiled once per device and cached on disk) or as prebuilt binaries (FPGA bitstreams,
// offline builds named in TOML). Operations complete through OpenCL events and a completion thread
// per device (completion.hpp).
#include "cl_api.hpp"
#include "cl_error.hpp"
#include "cl_handle.hpp"
#include "cl_info.hpp"
#include "completion.hpp"
#include "kernel_args.hpp"
#include "opencl_options.hpp"
#include "program_cache.hpp"
#include "safe_file.hpp"
#include "sha256.hpp"

#include <hcr/sdk/backend.hpp>
#include <hcr/sdk/blas.hpp>
#include <hcr/sdk/memory.hpp>

#include <clblast.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace hcr::opencl {
namespace {

using sdk::Error;

constexpr uint64_t kMemoryMagic = 0x68637263'6c6d656dull;  // "hcrclmem"

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

const char* kind_name(hcr_device_kind_t k) {
  switch (k) {
    case HCR_DEVICE_CPU: return "cpu";
    case HCR_DEVICE_GPU: return "gpu";
    case HCR_DEVICE_ACCELERATOR: return "accelerator";
    default: return "other";
  }
}

// A program binary named by the application or the configuration: a regular file (a FIFO or a
// device is refused unopened) of at most the program cache's largest entry.
std::vector<unsigned char> read_file(const std::filesystem::path& path, const std::string& what) {
  std::string text;
  try {
    text = files::read_file(path, ProgramCache::kMaxEntryBytes);
  } catch (const files::FileError& e) {
    throw Error(HCR_ERROR_BACKEND, what + ": cannot read the program binary: " + e.what());
  }
  if (text.empty()) throw Error(HCR_ERROR_BACKEND, what + ": '" + path.string() + "' is empty");
  return std::vector<unsigned char>(text.begin(), text.end());
}

/// One allocation of device memory.
struct Memory {
  uint64_t magic = kMemoryMagic;
  size_t device = 0;
  uint64_t bytes = 0;
  Mem mem;
};

enum class KernelType { blas, program };

/// The built-in BLAS kernels CLBlast offers (<hcr/builtin_params.h>): gemm, syrk and trsm, the
/// first three operations. No LAPACK: potrf and getrf_nopiv are declined.
using sdk::BlasOp;
constexpr int kBlasOps = 3;

/// A kernel on one device. Launches share its cl_kernel: clSetKernelArg and the enqueue that
/// captures the arguments happen under `mutex` (argument setting is not thread-safe per kernel).
struct Kernel {
  size_t device = 0;
  KernelType type = KernelType::program;
  BlasOp op = BlasOp::gemm;  // blas
  bool f64 = false;          // blas
  std::string name;
  Program program;
  KernelHandle kernel;
  cl_uint num_args = 0;
  std::mutex mutex;
  std::vector<ArgSpec> arg_specs;  // program kernels: what each argument takes, read once
};

struct Platform {
  cl_platform_id id = nullptr;
  std::string name;
  std::string version;
  Context context;
};

struct Device {
  size_t platform = 0;
  cl_context context = nullptr;  // the platform's, owned by Platform
  cl_device_id id = nullptr;
  std::string name, vendor, driver, version;
  hcr_device_kind_t kind = HCR_DEVICE_GPU;
  uint64_t memory_bytes = 0;
  uint64_t max_alloc = 0;
  uint32_t compute_units = 1;
  uint64_t base_align = 1;  // bytes; sub-buffer origins must be multiples of it
  size_t max_parameter = 1024;  // CL_DEVICE_MAX_PARAMETER_SIZE: bytes of all kernel arguments
  size_t address_bytes = 8;     // CL_DEVICE_ADDRESS_BITS / 8: a size_t kernel argument
  double peak_gflops = 0;
  bool fp64 = false;
  std::vector<Queue> compute;  // in order, profiling enabled
  // Operations in flight per compute queue: a launch goes to the least loaded one.
  std::unique_ptr<std::atomic<uint32_t>[]> load;
  std::atomic<uint32_t> next_queue{0};  // where the search for the least loaded starts
  // Copies, apart from the compute queues so that they overlap kernels; one queue per direction
  // (into the device, including device to device; out to the host), as GPUs have a copy engine
  // for each.
  Queue copy_in, copy_out;
  std::unique_ptr<Completer> completer;

  std::mutex build_mutex;               // one program build at a time on this device
  std::map<std::string, Program> programs;  // by cache key: kernels of one source share a build
  std::mutex blas_mutex;
  bool blas_ready[kBlasOps][2] = {};  // CLBlast's program for (op, f32/f64) built
  Mem scratch;                        // tiny buffer for preparing CLBlast

  /// The compute queue with the fewest operations in flight; the caller's op holds `*counter`.
  cl_command_queue pick_compute(std::atomic<uint32_t>*& counter) {
    const size_t n = compute.size();
    const size_t first = next_queue.fetch_add(1, std::memory_order_relaxed) % n;
    size_t best = first;
    for (size_t i = 1; i < n; ++i) {
      const size_t q = (first + i) % n;
      if (load[q].load(std::memory_order_relaxed) < load[best].load(std::memory_order_relaxed))
        best = q;
    }
    counter = &load[best];
    return compute[best].get();
  }
};

// "64x8": the first `dims` sizes.
std::string dims_text(const size_t* v, cl_uint dims) {
  std::string s = std::to_string(v[0]);
  for (cl_uint i = 1; i < dims; ++i) s.append("x").append(std::to_string(v[i]));
  return s;
}

// Source programs are built with -cl-kernel-arg-info: the program then keeps each argument's name
// and type (a cached binary too, where it is rebuilt with the same options), so that a launch that
// does not fit names them (kernel_args.hpp). Part of the program cache key, as every option is.
std::string with_arg_info(std::string options) {
  if (options.find("-cl-kernel-arg-info") == std::string::npos)
    options += options.empty() ? "-cl-kernel-arg-info" : " -cl-kernel-arg-info";
  return options;
}

// A device property that only refines an estimate: 0 when the driver does not answer.
template <class T>
T optional_value(cl_device_id id, cl_device_info what) {
  T v{};
  if (clGetDeviceInfo(id, what, sizeof v, &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

// One launch of a built-in, its parameters read and checked (plugin.h's defaults when the caller
// sent none): alpha and beta, and the flags that stand for the enumerations.
sdk::BlasParams blas_params(BlasOp op, const std::string& kname, const hcr_launch_args_t& a) {
  // The block is the whole of the parameters: one more after it would be ignored without a word
  // (the runtime refuses such a task at submit; a host that calls the plugin directly may not).
  if (a.num_params > 1)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + " takes one parameter, an " +
                                                sdk::blas_operands(op).params + "; got " +
                                                std::to_string(a.num_params));
  return sdk::read_blas_params(op, kname, a);
}

clblast::Transpose transpose(bool t) {
  return t ? clblast::Transpose::kYes : clblast::Transpose::kNo;
}
clblast::Triangle triangle(bool upper) {
  return upper ? clblast::Triangle::kUpper : clblast::Triangle::kLower;
}

class OpenClBackend final : public sdk::Backend {
 public:
  explicit OpenClBackend(const sdk::CreateContext& ctx)
      : Backend(ctx), options_(parse_options(ctx.options)), cache_(options_.cache_dir) {
    // Cached binaries are loaded and run: a directory another user owns or may write into could
    // feed us their code (the loader refuses world-writable plugin directories likewise). Checked
    // here once for the warning, and again by every load and store.
    if (std::string why = cache_.check(); !why.empty()) {
      host().warn("opencl: cache_dir '" + cache_.dir().string() +
                  "' not used (program cache disabled): " + why);
      cache_ = ProgramCache();
    }
    discover();
  }

  // Everything issued is waited for, then the completion threads stop, then OpenCL objects go
  // (kernels and memory the host did not free included).
  ~OpenClBackend() noexcept override {
    for (auto& d : devices_) d->completer->drain();
    for (auto& d : devices_) {
      for (auto& q : d->compute) clFinish(q.get());
      if (d->copy_in) clFinish(d->copy_in.get());
      if (d->copy_out) clFinish(d->copy_out.get());
      d->completer.reset();
    }
    {
      std::lock_guard<std::mutex> lock(kernels_mutex_);
      for (Kernel* k : kernels_) delete k;
      kernels_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(memory_mutex_);
      for (Memory* m : live_) delete m;
      live_.clear();
    }
    devices_.clear();
    platforms_.clear();
    if (cache_hits_ + cache_misses_ > 0)
      host().debug("opencl: program cache: " + std::to_string(cache_hits_.load()) + " hit(s), " +
                   std::to_string(cache_misses_.load()) + " build(s) from source");
  }

  // ---- devices ------------------------------------------------------------------------------

  size_t device_count() override { return devices_.size(); }

  void device_info(size_t device, sdk::DeviceInfo& info) override {
    const Device& d = *devices_[device];
    info.name = d.name;
    info.arch = "opencl:" + d.vendor + ":" + d.name + ":" + d.driver;
    info.kind = d.kind;
    info.flags = 0;  // own memory: the runtime stages buffers with mem_alloc and copy
    info.memory_bytes = d.memory_bytes;
    info.compute_units = d.compute_units;
    info.concurrency = static_cast<uint32_t>(d.compute.size());
    info.peak_gflops = d.peak_gflops;
  }

  // ---- memory -------------------------------------------------------------------------------

  hcr_memory_t* mem_alloc(size_t device, uint64_t bytes) override {
    Device& d = *devices_[device];
    if (bytes > d.max_alloc)
      throw Error(HCR_ERROR_OUT_OF_MEMORY,
                  "allocating " + std::to_string(bytes) + " bytes on '" + d.name +
                      "': above its largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE " +
                      std::to_string(d.max_alloc) + ")");
    // OpenCL has no empty buffers; a zero-byte allocation gets one byte.
    const size_t size = static_cast<size_t>(std::max<uint64_t>(bytes, 1));
    auto m = std::make_unique<Memory>();
    m->device = device;
    m->bytes = bytes;
    try {
      m->mem = Mem(cl_create("clCreateBuffer", [&](cl_int* e) {
        return clCreateBuffer(context_of(device), CL_MEM_READ_WRITE, size, nullptr, e);
      }));
    } catch (const Error& e) {
      throw Error(e.code(), "allocating " + std::to_string(bytes) + " bytes on '" + d.name +
                                "': " + e.what());
    }
    std::lock_guard<std::mutex> lock(memory_mutex_);
    live_.insert(m.get());
    return reinterpret_cast<hcr_memory_t*>(m.release());
  }

  void mem_free(size_t, hcr_memory_t* memory) noexcept override {
    auto* m = reinterpret_cast<Memory*>(memory);
    {
      std::lock_guard<std::mutex> lock(memory_mutex_);
      if (live_.erase(m) == 0) {
        host().warn("opencl: mem_free of memory that is not a live allocation of this plugin");
        return;
      }
    }
    delete m;  // OpenCL keeps the buffer until commands still using it are done
  }

  void copy(const hcr_copy_args_t& a) override {
    sdk::check_copy_ends(a, "an OpenCL device copies to or from its memory");
    Memory* src = a.src_memory ? live(a.src_memory, "copy source") : nullptr;
    Memory* dst = a.dst_memory ? live(a.dst_memory, "copy destination") : nullptr;
    if (src) sdk::check_span(src->bytes, a.src_offset, a.rows, a.src_pitch, a.width, "copy source");
    if (dst)
      sdk::check_span(dst->bytes, a.dst_offset, a.rows, a.dst_pitch, a.width, "copy destination");
    if (a.width == 0 || a.rows == 0) {  // nothing to move
      sdk::complete(a.done, a.done_user_data, nullptr);
      return;
    }

    Device& dev = *devices_[a.device];
    const std::string bytes = std::to_string(a.width * a.rows);
    auto op = std::make_unique<Op>();
    op->done = a.done;
    op->done_user_data = a.done_user_data;
    Ticket ticket(*dev.completer);
    cl_event ev = nullptr;
    if (src && dst && platform_of(src->device) != platform_of(dst->device)) {
      // Two contexts: through a host buffer, in two stages on the two devices' copy queues.
      op->what = "copy of " + bytes + " bytes from '" + devices_[src->device]->name + "' to '" +
                 devices_[dst->device]->name + "'";
      op->staging.resize(static_cast<size_t>(a.width * a.rows));
      cl_command_queue q = devices_[src->device]->copy_out.get();
      read_rect(q, src->mem.get(), a.src_offset, a.src_pitch, op->staging.data(), a.width,
                a.width, a.rows, &ev);
      op->event = Event(ev);
      HCR_CL_CHECK(clFlush(q));
      Device* to = devices_[dst->device].get();
      const hcr_copy_args_t args = a;
      Mem target = dst->mem;  // a reference of our own for the second stage
      op->next = [to, target, args](Op& o) {
        cl_event e = nullptr;
        write_rect(to->copy_in.get(), target.get(), args.dst_offset, args.dst_pitch,
                   o.staging.data(), args.width, args.width, args.rows, &e);
        Event out(e);
        HCR_CL_CHECK(clFlush(to->copy_in.get()));
        return out;
      };
    } else {
      // One context: the named device's queue for the direction, unless the memory lives in
      // another context.
      const size_t owner = (dst ? dst : src)->device;
      Device& by = platform_of(owner) == platform_of(a.device) ? dev : *devices_[owner];
      cl_command_queue q = dst ? by.copy_in.get() : by.copy_out.get();
      if (src && dst) {
        op->what = "copy of " + bytes + " bytes within '" + devices_[owner]->name + "'";
        copy_rect(q, src->mem.get(), a.src_offset, a.src_pitch, dst->mem.get(), a.dst_offset,
                  a.dst_pitch, a.width, a.rows, &ev);
      } else if (dst) {
        op->what = "copy of " + bytes + " bytes to '" + devices_[owner]->name + "'";
        write_rect(q, dst->mem.get(), a.dst_offset, a.dst_pitch, a.src_host, a.src_pitch,
                   a.width, a.rows, &ev);
      } else {
        op->what = "copy of " + bytes + " bytes from '" + devices_[owner]->name + "'";
        read_rect(q, src->mem.get(), a.src_offset, a.src_pitch, a.dst_host, a.dst_pitch, a.width,
                  a.rows, &ev);
      }
      op->event = Event(ev);
      HCR_CL_CHECK(clFlush(q));
    }
    ticket.watch(std::move(op));
  }

  // ---- kernels ------------------------------------------------------------------------------

  hcr_kernel_t* kernel_get(size_t device, const hcr_kernel_desc_t& desc) override {
    Device& d = *devices_[device];
    const std::string name = desc.name;
    // An offline binary named in the configuration is this device's own implementation of the
    // kernel: it answers the host's first question (the built-in of that name), before any
    // implementation the application offers. If it cannot be loaded, the host hears why and
    // tries those implementations next.
    if (desc.kind == HCR_IMPL_BUILTIN)
      for (const BinarySpec& b : options_.binaries) {
        if (b.kernel != name || !contains_icase(d.name, b.device)) continue;
        const std::string what = "kernel '" + name + "' from " + b.key + ".path";
        Program p = program_from_binary(d, b.path, b.build_options, what);
        host().debug("opencl: " + what + " ('" + b.path.string() + "') loaded on '" + d.name +
                     "'");
        return make_kernel(device, name, std::move(p), b.entry.empty() ? name : b.entry);
      }
    const std::string api = desc.api ? desc.api : "";
    switch (desc.kind) {
      case HCR_IMPL_BUILTIN: {
        // Declined with NOT_FOUND (the runtime never places the kernel here): what CLBlast lacks,
        // and double precision on a device without it.
        const auto b = sdk::find_blas_builtin(name);
        if (!b)
          throw Error(HCR_ERROR_NOT_FOUND, "no built-in kernel '" + name +
                                               "' on OpenCL device '" + d.name + "'");
        if (b->op == BlasOp::potrf || b->op == BlasOp::getrf_nopiv)
          throw Error(HCR_ERROR_NOT_FOUND,
                      "no built-in " + name + " on OpenCL devices: CLBlast has no LAPACK "
                      "factorizations (potrf, getrf_nopiv)");
        if (b->dtype == HCR_DTYPE_F32) return make_blas<float>(device, b->op, name);
        if (!d.fp64)
          throw Error(HCR_ERROR_NOT_FOUND, "device '" + d.name +
                                               "' has no double precision (cl_khr_fp64): no " +
                                               name);
        return make_blas<double>(device, b->op, name);
      }
      case HCR_IMPL_SOURCE: {
        if (api != "opencl")
          throw Error(HCR_ERROR_UNSUPPORTED,
                      "OpenCL devices compile OpenCL C, not " + api + " source");
        if (desc.source == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "kernel '" + name + "': source is NULL");
        const std::string source(desc.source, desc.source_size);
        const std::string opts = with_arg_info(desc.build_options ? desc.build_options : "");
        Program p = program_from_source(d, source, opts, "kernel '" + name + "'");
        return make_kernel(device, name, std::move(p), desc.entry ? desc.entry : name);
      }
      case HCR_IMPL_BINARY: {
        if (api != "opencl")
          throw Error(HCR_ERROR_UNSUPPORTED,
                      "OpenCL devices load OpenCL program binaries, not " + api + " ones");
        if (desc.binary_path == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "kernel '" + name + "': binary_path is NULL");
        const std::string opts = desc.build_options ? desc.build_options : "";
        Program p = program_from_binary(d, desc.binary_path, opts, "kernel '" + name + "'");
        return make_kernel(device, name, std::move(p), desc.entry ? desc.entry : name);
      }
      default:
        throw Error(HCR_ERROR_UNSUPPORTED,
                    "OpenCL devices run OpenCL C sources, program binaries and their built-ins, "
                    "not host or native functions");
    }
  }

  void kernel_release(hcr_kernel_t* kernel) noexcept override {
    auto* k = reinterpret_cast<Kernel*>(kernel);
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (kernels_.erase(k) == 0) {
      host().warn("opencl: kernel_release of a kernel that is not live in this plugin");
      return;
    }
    delete k;
  }

  void launch(const hcr_launch_args_t& a) override {
    check_device(a.device);
    if (a.kernel == nullptr) throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch without a kernel");
    Kernel& k = *reinterpret_cast<Kernel*>(a.kernel);
    if (k.device != a.device)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "kernel '" + k.name + "' was made for device " + std::to_string(k.device) +
                      ", not device " + std::to_string(a.device));
    if (a.num_args > 0 && a.args == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "launch of '" + k.name + "': args is NULL");
    switch (k.type) {
      case KernelType::blas:
        if (k.f64) launch_blas<double>(a, k);
        else launch_blas<float>(a, k);
        break;
      case KernelType::program: launch_program(a, k); break;
    }
  }

  void synchronize(size_t device) override { devices_[device]->completer->drain(); }

 private:
  // ---- discovery ----------------------------------------------------------------------------

  void discover() {
    std::vector<std::string> skipped;  // why each device found is not used
    std::vector<cl_platform_id> ids;
    try {
      ids = list_platforms();
    } catch (const Error& e) {
      host().info(std::string("opencl: no devices: ") + e.what());
      return;
    }
    if (ids.empty()) {
      host().info("opencl: no devices: the OpenCL ICD loader found no platform (no vendor "
                  "driver registered in /etc/OpenCL/vendors or $OCL_ICD_VENDORS)");
      return;
    }
    for (cl_platform_id pid : ids) {
      try {
        add_platform(pid, skipped);
      } catch (const Error& e) {
        host().warn(std::string("opencl: skipping a platform: ") + e.what());
      }
    }
    if (devices_.empty()) {
      std::string why;
      for (auto& s : skipped) why += (why.empty() ? "" : "; ") + s;
      host().info("opencl: no devices selected (device_types = " + options_.device_types_text +
                  (options_.platform.empty() ? "" : ", platform = '" + options_.platform + "'") +
                  (options_.device.empty() ? "" : ", device = '" + options_.device + "'") +
                  "): " + (why.empty() ? "the platforms have no devices" : why));
    }
  }

  void add_platform(cl_platform_id pid, std::vector<std::string>& skipped) {
    auto p = std::make_unique<Platform>();
    p->id = pid;
    p->name = platform_string(pid, CL_PLATFORM_NAME);
    p->version = platform_string(pid, CL_PLATFORM_VERSION);
    if (!contains_icase(p->name, options_.platform)) {
      skipped.push_back("platform '" + p->name + "' does not match platform = '" +
                        options_.platform + "'");
      return;
    }
    // Only the wanted types are asked for, and only a platform with a wanted device gets a
    // context, queues and builds. (Asking at all initialises the platform's drivers: PoCL
    // initialises all of them whatever the type asked for; OpenCL has no cheaper way to learn
    // what a platform offers. A platform that `platform` rules out is never asked.)
    const std::vector<cl_device_id> wanted = list_devices(pid, options_.device_types);
    if (wanted.empty()) {
      // Why nothing is used here: the devices it has of other types (its drivers are up already).
      for (cl_device_id id : list_devices(pid, CL_DEVICE_TYPE_ALL)) {
        const auto type = device_value<cl_ulong>(id, CL_DEVICE_TYPE);
        const std::string t = (type & CL_DEVICE_TYPE_GPU)           ? "gpu"
                              : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                              : (type & CL_DEVICE_TYPE_CPU)         ? "cpu"
                                                                    : "custom";
        const std::string name = device_string(id, CL_DEVICE_NAME);
        skipped.push_back("'" + name + "' (" + p->name + ") is a " + t + " device" +
                          (t == "cpu" ? ", which competes with the cpu backend for the same "
                                        "cores: add \"cpu\" to device_types to use it"
                                      : ""));
      }
      return;
    }
    std::vector<cl_device_id> chosen;
    for (cl_device_id id : wanted) {
      const std::string name = device_string(id, CL_DEVICE_NAME);
      if (!contains_icase(name, options_.device)) {
        skipped.push_back("'" + name + "' does not match device = '" + options_.device + "'");
        continue;
      }
      if (!device_value<cl_bool>(id, CL_DEVICE_AVAILABLE)) {
        skipped.push_back("'" + name + "' is not available");
        continue;
      }
      chosen.push_back(id);
    }
    if (chosen.empty()) return;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     reinterpret_cast<cl_context_properties>(pid), 0};
    p->context = Context(cl_create("clCreateContext", [&](cl_int* e) {
      return clCreateContext(props, static_cast<cl_uint>(chosen.size()), chosen.data(), nullptr,
                             nullptr, e);
    }));
    const size_t index = platforms_.size();
    platforms_.push_back(std::move(p));
    for (cl_device_id id : chosen) {
      try {
        add_device(index, id);
      } catch (const Error& e) {
        host().warn("opencl: skipping device '" + device_string(id, CL_DEVICE_NAME) + "': " +
                    e.what());
      }
    }
  }

  void add_device(size_t platform, cl_device_id id) {
    auto d = std::make_unique<Device>();
    d->platform = platform;
    d->id = id;
    d->name = device_string(id, CL_DEVICE_NAME);
    d->vendor = device_string(id, CL_DEVICE_VENDOR);
    d->driver = device_string(id, CL_DRIVER_VERSION);
    d->version = device_string(id, CL_DEVICE_VERSION);
    const auto type = device_value<cl_ulong>(id, CL_DEVICE_TYPE);
    d->kind = (type & CL_DEVICE_TYPE_GPU)   ? HCR_DEVICE_GPU
              : (type & CL_DEVICE_TYPE_CPU) ? HCR_DEVICE_CPU
                                            : HCR_DEVICE_ACCELERATOR;  // FPGAs, custom devices
    d->memory_bytes = device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE);
    d->max_alloc = device_value<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    d->compute_units =
        std::max<cl_uint>(1, device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS));
    // CL_DEVICE_MEM_BASE_ADDR_ALIGN is in bits.
    d->base_align =
        std::max<cl_uint>(8, device_value<cl_uint>(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN)) / 8;
    if (const auto bytes = optional_value<size_t>(id, CL_DEVICE_MAX_PARAMETER_SIZE); bytes != 0)
      d->max_parameter = std::min<size_t>(bytes, 0xffff);  // a task's parameters are below 64 KiB
    if (const auto bits = optional_value<cl_uint>(id, CL_DEVICE_ADDRESS_BITS); bits != 0)
      d->address_bytes = bits / 8;
    d->fp64 = optional_value<cl_ulong>(id, CL_DEVICE_DOUBLE_FP_CONFIG) != 0 ||
              device_string(id, CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
    if (d->kind == HCR_DEVICE_CPU) {
      // A CPU device's peak follows from its clock and vector width (one FMA per lane per
      // cycle); for GPUs and FPGAs OpenCL does not say how many lanes a compute unit has.
      const double mhz = optional_value<cl_uint>(id, CL_DEVICE_MAX_CLOCK_FREQUENCY);
      const double lanes = optional_value<cl_uint>(id, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT);
      d->peak_gflops = d->compute_units * mhz * 1e-3 * lanes * 2;
    }
    cl_context ctx = platforms_[platform]->context.get();
    d->context = ctx;
    for (uint32_t i = 0; i < options_.queues; ++i)
      d->compute.emplace_back(cl_create("clCreateCommandQueue", [&](cl_int* e) {
        return clCreateCommandQueue(ctx, id, CL_QUEUE_PROFILING_ENABLE, e);
      }));
    d->load = std::make_unique<std::atomic<uint32_t>[]>(d->compute.size());
    for (Queue* q : {&d->copy_in, &d->copy_out})
      *q = Queue(cl_create("clCreateCommandQueue",
                           [&](cl_int* e) { return clCreateCommandQueue(ctx, id, 0, e); }));
    d->completer = std::make_unique<Completer>(d->name, host());
    host().info("opencl: device " + std::to_string(devices_.size()) + ": '" + d->name + "' (" +
                kind_name(d->kind) + ", " + std::to_string(d->memory_bytes >> 20) + " MiB, " +
                std::to_string(d->compute_units) + " compute units, " +
                std::to_string(d->compute.size()) + " queues) on '" +
                platforms_[platform]->name + "'");
    devices_.push_back(std::move(d));
  }

  size_t platform_of(size_t device) const { return devices_[device]->platform; }
  cl_context context_of(size_t device) const {
    return platforms_[platform_of(device)]->context.get();
  }

  // ---- memory helpers -----------------------------------------------------------------------

  Memory* live(hcr_memory_t* memory, const std::string& what) {
    auto* m = reinterpret_cast<Memory*>(memory);
    std::lock_guard<std::mutex> lock(memory_mutex_);
    if (live_.count(m) == 0 || m->magic != kMemoryMagic)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  what + ": memory is not a live allocation of this plugin");
    return m;
  }

  // Buffer-side origin of a rectangle starting at byte `offset` with rows `pitch` apart.
  static void origin_of(uint64_t offset, uint64_t pitch, size_t origin[3]) {
    origin[0] = static_cast<size_t>(pitch ? offset % pitch : offset);
    origin[1] = static_cast<size_t>(pitch ? offset / pitch : 0);
    origin[2] = 0;
  }

  static void write_rect(cl_command_queue q, cl_mem mem, uint64_t offset, uint64_t pitch,
                         const void* host, uint64_t host_pitch, uint64_t width, uint64_t rows,
                         cl_event* ev) {
    if (rows == 1) {
      HCR_CL_CHECK(clEnqueueWriteBuffer(q, mem, CL_FALSE, offset, width, host, 0, nullptr, ev));
      return;
    }
    size_t bo[3], ho[3] = {0, 0, 0};
    origin_of(offset, pitch, bo);
    const size_t region[3] = {static_cast<size_t>(width), static_cast<size_t>(rows), 1};
    HCR_CL_CHECK(clEnqueueWriteBufferRect(q, mem, CL_FALSE, bo, ho, region, pitch, 0, host_pitch,
                                          0, host, 0, nullptr, ev));
  }

  static void read_rect(cl_command_queue q, cl_mem mem, uint64_t offset, uint64_t pitch,
                        void* host, uint64_t host_pitch, uint64_t width, uint64_t rows,
                        cl_event* ev) {
    if (rows == 1) {
      HCR_CL_CHECK(clEnqueueReadBuffer(q, mem, CL_FALSE, offset, width, host, 0, nullptr, ev));
      return;
    }
    size_t bo[3], ho[3] = {0, 0, 0};
    origin_of(offset, pitch, bo);
    const size_t region[3] = {static_cast<size_t>(width), static_cast<size_t>(rows), 1};
    HCR_CL_CHECK(clEnqueueReadBufferRect(q, mem, CL_FALSE, bo, ho, region, pitch, 0, host_pitch,
                                         0, host, 0, nullptr, ev));
  }

  static void copy_rect(cl_command_queue q, cl_mem src, uint64_t src_offset, uint64_t src_pitch,
                        cl_mem dst, uint64_t dst_offset, uint64_t dst_pitch, uint64_t width,
                        uint64_t rows, cl_event* ev) {
    if (rows == 1) {
      HCR_CL_CHECK(clEnqueueCopyBuffer(q, src, dst, src_offset, dst_offset, width, 0, nullptr, ev));
      return;
    }
    size_t so[3], dox[3];
    origin_of(src_offset, src_pitch, so);
    origin_of(dst_offset, dst_pitch, dox);
    const size_t region[3] = {static_cast<size_t>(width), static_cast<size_t>(rows), 1};
    HCR_CL_CHECK(clEnqueueCopyBufferRect(q, src, dst, so, dox, region, src_pitch, 0, dst_pitch, 0,
                                         0, nullptr, ev));
  }

  // ---- programs -----------------------------------------------------------------------------

  // Builds `program` for `d`; on failure throws HCR_ERROR_BACKEND with the compiler's log.
  static void build(Device& d, cl_program program, const std::string& options,
                    const std::string& what) {
    cl_int err = clBuildProgram(program, 1, &d.id, options.c_str(), nullptr, nullptr);
    if (err == CL_SUCCESS) return;
    std::string log = build_log(program, d.id);
    throw Error(HCR_ERROR_BACKEND, "building " + what + " for OpenCL device '" + d.name +
                                       "' failed: " + cl_error_text("clBuildProgram", err) +
                                       (log.empty() ? std::string(" (no build log)")
                                                    : "; build log:\n" + log));
  }

  Program create_from_binary(Device& d, const std::vector<unsigned char>& bin) {
    const unsigned char* ptr = bin.data();
    const size_t size = bin.size();
    cl_int status = CL_SUCCESS;
    Program p(cl_create("clCreateProgramWithBinary", [&](cl_int* e) {
      return clCreateProgramWithBinary(d.context, 1, &d.id, &size, &ptr, &status, e);
    }));
    if (status != CL_SUCCESS) throw_cl(status, "clCreateProgramWithBinary (binary status)");
    return p;
  }

  // The cache key: everything that changes the compiled binary.
  std::string cache_key(const Device& d, const std::string& source, const std::string& options) {
    const Platform& p = *platforms_[d.platform];
    return Sha256()
        .field("hcr-opencl-program-1")
        .field(source)
        .field(options)
        .field(d.name)
        .field(d.vendor)
        .field(d.version)
        .field(d.driver)
        .field(p.name)
        .field(p.version)
        .hex();
  }

  Program program_from_source(Device& d, const std::string& source, const std::string& options,
                              const std::string& what) {
    const std::string key = cache_key(d, source, options);
    std::lock_guard<std::mutex> lock(d.build_mutex);
    if (auto it = d.programs.find(key); it != d.programs.end()) return it->second;

    auto entry = cache_.load(key);
    if (entry.status == ProgramCache::Status::corrupt) {
      host().warn("opencl: corrupt program cache entry '" + cache_.file(key).string() + "' (" +
                  entry.why + "): rebuilding " + what + " from source");
    } else if (entry.status == ProgramCache::Status::refused) {
      host().warn("opencl: program cache entry not used (" + entry.why + "): rebuilding " + what +
                  " from source");
    } else if (entry.status == ProgramCache::Status::hit) {
      try {
        Program p = create_from_binary(d, entry.binary);
        build(d, p.get(), options, what + " (cached binary)");
        host().debug("opencl: program cache hit: " + what + " on '" + d.name + "' from '" +
                     cache_.file(key).string() + "'");
        ++cache_hits_;
        d.programs.emplace(key, p);
        return p;
      } catch (const Error& e) {
        host().warn("opencl: program cache entry '" + cache_.file(key).string() +
                    "' rejected by the driver (" + e.what() + "): rebuilding " + what +
                    " from source");
      }
    }

    const char* text = source.c_str();
    const size_t length = source.size();
    Program p(cl_create("clCreateProgramWithSource", [&](cl_int* e) {
      return clCreateProgramWithSource(d.context, 1, &text, &length, e);
    }));
    const auto t0 = std::chrono::steady_clock::now();
    build(d, p.get(), options, what);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++cache_misses_;
    std::string stored = "not cached (cache_dir = \"\")";
    if (cache_.enabled()) {
      std::string err;
      try {
        err = cache_.store(key, program_binary(p.get()));
      } catch (const Error& e) {
        err = e.what();
      }
      if (err.empty()) {
        stored = "stored in '" + cache_.file(key).string() + "'";
      } else {
        host().warn("opencl: cannot cache the binary of " + what + ": " + err);
        stored = "not cached";
      }
    }
    host().debug("opencl: program cache miss: built " + what + " on '" + d.name +
                 "' from source in " + std::to_string(secs) + " s; " + stored);
    d.programs.emplace(key, p);
    return p;
  }

  Program program_from_binary(Device& d, const std::filesystem::path& path,
                              const std::string& options, const std::string& what) {
    const std::string key = "binary:" + path.string() + "\n" + options;
    std::lock_guard<std::mutex> lock(d.build_mutex);
    if (auto it = d.programs.find(key); it != d.programs.end()) return it->second;
    const auto bin = read_file(path, what);
    Program p;
    try {
      p = create_from_binary(d, bin);
    } catch (const Error& e) {
      throw Error(HCR_ERROR_BACKEND, what + ": '" + path.string() +
                                         "' is not a program binary for OpenCL device '" +
                                         d.name + "': " + e.what());
    }
    build(d, p.get(), options, what + " ('" + path.string() + "')");
    d.programs.emplace(key, p);
    return p;
  }

  hcr_kernel_t* make_kernel(size_t device, const std::string& name, Program program,
                            const std::string& entry) {
    auto k = std::make_unique<Kernel>();
    k->device = device;
    k->type = KernelType::program;
    k->name = name;
    k->program = std::move(program);
    cl_int err = CL_SUCCESS;
    k->kernel = KernelHandle(clCreateKernel(k->program.get(), entry.c_str(), &err));
    if (err == CL_INVALID_KERNEL_NAME) {
      const std::string names = program_kernel_names(k->program.get());
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "kernel '" + name + "': the program has no kernel function '" + entry +
                      "' (it has: " + (names.empty() ? "none" : names) + ")");
    }
    if (err != CL_SUCCESS) throw_cl(err, "clCreateKernel");
    HCR_CL_CHECK(clGetKernelInfo(k->kernel.get(), CL_KERNEL_NUM_ARGS, sizeof k->num_args,
                                 &k->num_args, nullptr));
    const Device& d = *devices_[device];
    k->arg_specs = read_arg_specs(k->kernel.get(), k->num_args, d.max_parameter, d.address_bytes);
    return track(std::move(k));
  }

  hcr_kernel_t* track(std::unique_ptr<Kernel> k) {
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    kernels_.insert(k.get());
    return reinterpret_cast<hcr_kernel_t*>(k.release());
  }

  // ---- BLAS built-ins -------------------------------------------------------------------------

  // CLBlast compiles a routine's program on first use in a context, for seconds. Do it now, when
  // the host asks for the kernel (on a submitting thread), rather than in the first launch, which
  // may run on a completion thread and would hold up every other completion of the device
  // meanwhile (and inflate the first measured duration). A call of size 0 builds the program and
  // stops at the dimension check. (trsm builds a second, small program, for inverting its diagonal
  // blocks, on its first real call.)
  template <class T>
  hcr_kernel_t* make_blas(size_t device, BlasOp op, const std::string& name) {
    Device& d = *devices_[device];
    const int slot = sizeof(T) == 4 ? 0 : 1;
    std::lock_guard<std::mutex> lock(d.blas_mutex);
    bool& ready = d.blas_ready[static_cast<int>(op)][slot];
    if (!ready) {
      if (!d.scratch)
        d.scratch = Mem(cl_create("clCreateBuffer", [&](cl_int* e) {
          return clCreateBuffer(context_of(device), CL_MEM_READ_WRITE, 64, nullptr, e);
        }));
      cl_command_queue q = d.compute[0].get();
      cl_mem s = d.scratch.get();
      const auto t0 = std::chrono::steady_clock::now();
      const auto row = clblast::Layout::kRowMajor;
      const auto no = clblast::Transpose::kNo;
      clblast::StatusCode status = clblast::StatusCode::kSuccess;
      switch (op) {
        case BlasOp::gemm:
          status = clblast::Gemm<T>(row, no, no, 0, 1, 1, T(1), s, 0, 1, s, 0, 1, T(0), s, 0, 1,
                                    &q, nullptr);
          break;
        case BlasOp::syrk:
          status = clblast::Syrk<T>(row, clblast::Triangle::kLower, no, 0, 1, T(1), s, 0, 1, T(0),
                                    s, 0, 1, &q, nullptr);
          break;
        case BlasOp::trsm:
          status = clblast::Trsm<T>(row, clblast::Side::kLeft, clblast::Triangle::kLower, no,
                                    clblast::Diagonal::kNonUnit, 0, 1, T(1), s, 0, 1, s, 0, 1, &q,
                                    nullptr);
          break;
        case BlasOp::potrf:
        case BlasOp::getrf_nopiv:
          break;  // never made: declined in kernel_get
      }
      if (status != clblast::StatusCode::kInvalidDimension &&
          status != clblast::StatusCode::kSuccess) {
        const std::string call = std::string("clblast::") + (op == BlasOp::gemm   ? "Gemm"
                                                             : op == BlasOp::syrk ? "Syrk"
                                                                                  : "Trsm") +
                                 " (building its kernels)";
        try {
          throw_clblast(status, call.c_str());
        } catch (const Error& e) {
          throw Error(e.code() == HCR_ERROR_UNSUPPORTED ? HCR_ERROR_NOT_FOUND : e.code(),
                      name + " on '" + d.name + "': " + e.what());
        }
      }
      ready = true;
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Seconds here are CLBlast compiling (once per process) without a driver-side cache hit:
      // worth telling a user who wonders why the first call was slow.
      host().log(secs > 1 ? HCR_LOG_INFO : HCR_LOG_DEBUG,
                 "opencl: CLBlast built its " + name + " kernels for '" + d.name + "' in " +
                     std::to_string(secs) +
                     " s (once per process; the driver's program cache, PoCL's kcache for "
                     "one, shortens it in later processes)");
    }
    auto k = std::make_unique<Kernel>();
    k->device = device;
    k->type = KernelType::blas;
    k->op = op;
    k->f64 = sizeof(T) == 8;
    k->name = name;
    return track(std::move(k));
  }

  // Enqueues a fill of zeros over `elems` elements of `mem` from element `off`.
  template <class T>
  static cl_event zero(cl_command_queue q, cl_mem mem, size_t off, size_t elems) {
    const T z = T(0);
    cl_event e = nullptr;
    HCR_CL_CHECK(clEnqueueFillBuffer(q, mem, &z, sizeof z, off * sizeof(T), elems * sizeof(T), 0,
                                     nullptr, &e));
    return e;
  }

  template <class T>
  void launch_blas(const hcr_launch_args_t& a, Kernel& kern) {
    Device& d = *devices_[a.device];
    const std::string& name = kern.name;
    const BlasOp op = kern.op;
    const sdk::BlasOperands operands = sdk::blas_operands(op);
    const char* const* role = operands.names;
    const size_t want = operands.count;
    if (a.num_args != want)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, name + " takes " + std::to_string(want) +
                                                  " buffers (" + operands.list + "), got " +
                                                  std::to_string(a.num_args));
    const hcr_dtype_t dtype = sizeof(T) == 4 ? HCR_DTYPE_F32 : HCR_DTYPE_F64;
    hcr_arg_t x[3];
    Memory* mem[3] = {nullptr, nullptr, nullptr};
    size_t off[3] = {0, 0, 0}, ld[3] = {1, 1, 1};
    for (size_t i = 0; i < want; ++i) {
      x[i] = sdk::read_struct(&sdk::element(a.args, i));
      const std::string which = name + " argument " + std::to_string(i) + " (" + role[i] + ", " +
                                shape(x[i]) + ")";
      if (x[i].dtype != dtype)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + " is not an " + (sizeof(T) == 4 ? "f32" : "f64") + " matrix");
      if (x[i].memory == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is not in device memory");
      mem[i] = live(x[i].memory, name + " argument " + std::to_string(i));
      if (mem[i]->device != a.device && platform_of(mem[i]->device) != platform_of(a.device))
        throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " lives in another OpenCL context");
      if (x[i].offset % sizeof(T) != 0)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + ": byte offset " + std::to_string(x[i].offset) +
                        " is not a multiple of the element size " + std::to_string(sizeof(T)));
      if (x[i].rows > 1 && x[i].ld < x[i].cols)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + ": ld " + std::to_string(x[i].ld) + " is below its columns");
      // BLAS wants ld >= max(1, columns) even where one row makes ld meaningless.
      ld[i] = static_cast<size_t>(std::max<uint64_t>({x[i].ld, x[i].cols, 1}));
      off[i] = static_cast<size_t>(x[i].offset / sizeof(T));
      sdk::check_span(mem[i]->bytes, x[i].offset, x[i].rows, ld[i] * sizeof(T),
                      x[i].cols * sizeof(T), which);
    }
    const sdk::BlasParams p = blas_params(op, name, a);

    // Shapes, in plugin.h's terms. gemm: C m x n = op(A) m x k times op(B) k x n. syrk: C n x n,
    // op(A) n x k. trsm: B m x n, A square of order m (left) or n (right).
    uint64_t m = 0, n = 0, k = 0;
    switch (op) {
      case BlasOp::gemm: {
        const hcr_arg_t &A = x[0], &B = x[1], &C = x[2];
        m = p.trans_a ? A.cols : A.rows;
        k = p.trans_a ? A.rows : A.cols;
        n = p.trans_b ? B.rows : B.cols;
        const uint64_t bk = p.trans_b ? B.cols : B.rows;
        if (bk != k || C.rows != m || C.cols != n) {
          std::string trans;
          if (p.trans_a || p.trans_b)
            trans = std::string(", ") + (p.trans_a ? "A" : "") +
                    (p.trans_a && p.trans_b ? " and " : "") + (p.trans_b ? "B" : "") +
                    " transposed";
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      name + " shapes do not match: A is " + shape(A) + ", B is " + shape(B) +
                          ", C is " + shape(C) + " (need op(A) m x k, op(B) k x n, C m x n" +
                          trans + ")");
        }
        break;
      }
      case BlasOp::syrk: {
        const hcr_arg_t &A = x[0], &C = x[1];
        n = p.trans_a ? A.cols : A.rows;
        k = p.trans_a ? A.rows : A.cols;
        if (C.rows != C.cols || C.rows != n)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      name + " shapes do not match: A is " + shape(A) + ", C is " + shape(C) +
                          " (C must be n x n and A n x k" +
                          (p.trans_a ? ", transposed: k x n" : "") + ")");
        break;
      }
      case BlasOp::trsm: {
        const hcr_arg_t &A = x[0], &B = x[1];
        m = B.rows;
        n = B.cols;
        const uint64_t order = p.right ? n : m;
        if (A.rows != A.cols || A.rows != order)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      name + " shapes do not match: A is " + shape(A) + ", B is " + shape(B) +
                          " (A must be square with B's " + (p.right ? "columns" : "rows") +
                          " as its order: side is " + (p.right ? "right" : "left") + ")");
        break;
      }
      case BlasOp::potrf:
      case BlasOp::getrf_nopiv:
        break;  // never made: declined in kernel_get
    }
    // The matrix the kernel writes: C of gemm and syrk, B of trsm. Rows x cols of it.
    const size_t out = op == BlasOp::trsm ? 1 : want - 1;
    const uint64_t out_rows = op == BlasOp::syrk ? n : m, out_cols = n;
    const bool nothing = out_rows == 0 || out_cols == 0 ||
                         (op != BlasOp::trsm && k == 0 && p.beta == 1);
    if (nothing) {  // the output is empty or unchanged
      sdk::complete(a.done, a.done_user_data, nullptr, 0);
      return;
    }

    auto opn = std::make_unique<Op>();
    opn->done = a.done;
    opn->done_user_data = a.done_user_data;
    opn->measure = (a.flags & HCR_LAUNCH_MEASURE) != 0;
    // "gemm_f32 (m x k x n)", "syrk_f32 (n x k)", "trsm_f32 (m x n)": the sizes that set its cost.
    const std::string dims = op == BlasOp::gemm   ? std::to_string(m) + "x" + std::to_string(k) +
                                                        "x" + std::to_string(n)
                             : op == BlasOp::syrk ? std::to_string(n) + "x" + std::to_string(k)
                                                  : std::to_string(m) + "x" + std::to_string(n);
    opn->what = name + " (" + dims + ") on '" + d.name + "'";
    Ticket ticket(*d.completer);
    cl_command_queue q = d.pick_compute(opn->load);
    cl_mem c_mem = mem[out]->mem.get();
    const size_t c_off = off[out], c_ld = ld[out];
    Event first, last;
    auto keep = [&](cl_event e) {
      last = Event(e);
      if (!first) first = last;
    };
    // The part of row r of the output that the kernel writes: all of it, or syrk's triangle.
    auto row_span = [&](uint64_t r) -> std::pair<size_t, size_t> {
      if (op != BlasOp::syrk) return {0, static_cast<size_t>(n)};
      return p.upper ? std::pair<size_t, size_t>{r, n - r} : std::pair<size_t, size_t>{0, r + 1};
    };
    const bool whole = op != BlasOp::syrk && (out_rows == 1 || c_ld == out_cols);
    if (op != BlasOp::trsm && p.beta == 0) {
      // BLAS ignores C's old values when beta is 0, but CLBlast computes beta * C: a fresh
      // allocation (a C the task only writes) may hold NaNs, and 0 * NaN is NaN. Zero what the
      // kernel writes first — for syrk only its triangle, row by row: the other is not ours.
      if (whole) {
        keep(zero<T>(q, c_mem, c_off, static_cast<size_t>(out_rows * out_cols)));
      } else {
        for (uint64_t r = 0; r < out_rows; ++r) {
          auto [c0, len] = row_span(r);
          keep(zero<T>(q, c_mem, c_off + static_cast<size_t>(r) * c_ld + c0, len));
        }
      }
    } else if (opn->measure) {
      cl_event e = nullptr;  // marks the start for the profiled duration
      HCR_CL_CHECK(clEnqueueMarkerWithWaitList(q, 0, nullptr, &e));
      keep(e);
    }
    const auto row = clblast::Layout::kRowMajor;
    const size_t M = static_cast<size_t>(m), N = static_cast<size_t>(n);
    const size_t K = static_cast<size_t>(k);
    if (op == BlasOp::trsm) {
      cl_event e = nullptr;
      HCR_CLBLAST_CHECK(clblast::Trsm<T>(
          row, p.right ? clblast::Side::kRight : clblast::Side::kLeft, triangle(p.upper),
          transpose(p.trans_a), p.unit ? clblast::Diagonal::kUnit : clblast::Diagonal::kNonUnit, M,
          N, static_cast<T>(p.alpha), mem[0]->mem.get(), off[0], ld[0], c_mem, c_off, c_ld, &q,
          &e));
      keep(e);
    } else if (k > 0) {
      cl_event e = nullptr;
      if (op == BlasOp::gemm)
        HCR_CLBLAST_CHECK(clblast::Gemm<T>(
            row, transpose(p.trans_a), transpose(p.trans_b), M, N, K, static_cast<T>(p.alpha),
            mem[0]->mem.get(), off[0], ld[0], mem[1]->mem.get(), off[1], ld[1],
            static_cast<T>(p.beta), c_mem, c_off, c_ld, &q, &e));
      else
        HCR_CLBLAST_CHECK(clblast::Syrk<T>(row, triangle(p.upper), transpose(p.trans_a), N, K,
                                           static_cast<T>(p.alpha), mem[0]->mem.get(), off[0],
                                           ld[0], static_cast<T>(p.beta), c_mem, c_off, c_ld, &q,
                                           &e));
      keep(e);
    } else if (p.beta != 0) {
      // k == 0: C = beta * C (on syrk's triangle), row by row unless contiguous.
      for (uint64_t r = 0; r < (whole ? 1 : out_rows); ++r) {
        auto [c0, len] = row_span(r);
        cl_event e = nullptr;
        HCR_CLBLAST_CHECK(clblast::Scal<T>(
            whole ? static_cast<size_t>(out_rows * out_cols) : len, static_cast<T>(p.beta), c_mem,
            c_off + static_cast<size_t>(r) * c_ld + c0, 1, &q, &e));
        keep(e);
      }
    }
    if (opn->measure) opn->start = first;
    if (!last) throw Error(HCR_ERROR_INTERNAL, opn->what + ": no command to wait for");
    opn->event = std::move(last);
    HCR_CL_CHECK(clFlush(q));
    opn->load->fetch_add(1, std::memory_order_relaxed);  // the completer takes it off again
    ticket.watch(std::move(opn));
  }

  // ---- user kernels -------------------------------------------------------------------------

  void launch_program(const hcr_launch_args_t& a, Kernel& k) {
    Device& d = *devices_[a.device];
    const size_t expected = a.num_args + a.num_params;
    if (expected != k.num_args)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "kernel '" + k.name + "' takes " + std::to_string(k.num_args) +
                      " arguments; the task gives " + std::to_string(a.num_args) +
                      " buffer(s) and " + std::to_string(a.num_params) + " parameter(s)");
    // Buffers on pointers, parameters on values of their size (read when the kernel was made).
    check_launch(k.name, k.arg_specs, a);

    // Work geometry: the task's grid, or one work item per element of the first written buffer.
    size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
    std::vector<hcr_arg_t> args(a.num_args);
    for (size_t i = 0; i < a.num_args; ++i)  // the host's stride, which is its struct_size
      args[i] = sdk::read_struct(&sdk::element(a.args, i));
    if (a.global_size[0] == 0) {
      const hcr_arg_t* first = nullptr;
      for (auto& x : args)
        if (x.access & HCR_ACCESS_WRITE) {
          first = &x;
          break;
        }
      if (first == nullptr && !args.empty()) first = &args[0];
      global[0] = first ? static_cast<size_t>(first->rows * first->cols) : 1;
    } else {
      for (int i = 0; i < 3; ++i)
        global[i] = static_cast<size_t>(std::max<uint64_t>(1, a.global_size[i]));
    }
    const bool has_local = a.local_size[0] != 0;
    if (has_local)
      for (int i = 0; i < 3; ++i) local[i] = std::max<uint32_t>(1, a.local_size[i]);
    cl_uint dims = 1;
    for (cl_uint i = 1; i < 3; ++i)
      if (global[i] > 1 || local[i] > 1) dims = i + 1;
    if (global[0] * global[1] * global[2] == 0) {  // an empty buffer: no work
      sdk::complete(a.done, a.done_user_data, nullptr, 0);
      return;
    }
    if (has_local)
      for (cl_uint i = 0; i < dims; ++i)
        if (global[i] % local[i] != 0)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      "kernel '" + k.name + "': grid " + std::to_string(global[i]) +
                          " is not a multiple of block " + std::to_string(local[i]) +
                          " in dimension " + std::to_string(i) +
                          " (OpenCL 1.2 runs whole work-groups)");

    auto op = std::make_unique<Op>();
    op->done = a.done;
    op->done_user_data = a.done_user_data;
    op->measure = (a.flags & HCR_LAUNCH_MEASURE) != 0;
    op->what = "kernel '" + k.name + "' on '" + d.name + "'";
    std::vector<cl_mem> mems(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      const hcr_arg_t& x = args[i];
      const std::string which = "kernel '" + k.name + "' argument " + std::to_string(i);
      if (x.memory == nullptr)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is not in device memory");
      Memory* m = live(x.memory, which);
      if (platform_of(m->device) != platform_of(a.device))
        throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " lives in another OpenCL context");
      if (x.offset == 0) {
        mems[i] = m->mem.get();
        continue;
      }
      // A kernel sees a buffer from its start: an offset needs a sub-buffer, whose origin OpenCL
      // requires to be aligned.
      if (x.offset % d.base_align != 0 || x.offset >= m->bytes)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    which + ": byte offset " + std::to_string(x.offset) +
                        (x.offset >= m->bytes ? " is past the allocation of " +
                                                    std::to_string(m->bytes) + " bytes"
                                              : " is not a multiple of the device's base address "
                                                "alignment (" +
                                                    std::to_string(d.base_align) + " bytes)"));
      cl_buffer_region region{static_cast<size_t>(x.offset),
                              static_cast<size_t>(m->bytes - x.offset)};
      Mem sub(cl_create("clCreateSubBuffer", [&](cl_int* e) {
        return clCreateSubBuffer(m->mem.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                                 &region, e);
      }));
      mems[i] = sub.get();
      op->holds.push_back(std::move(sub));
    }

    Ticket ticket(*d.completer);
    cl_command_queue q = d.pick_compute(op->load);
    cl_event ev = nullptr;
    {
      std::lock_guard<std::mutex> lock(k.mutex);
      cl_uint index = 0;
      for (cl_mem& m : mems) {
        cl_int err = clSetKernelArg(k.kernel.get(), index, sizeof(cl_mem), &m);
        if (err != CL_SUCCESS)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      "kernel '" + k.name + "': buffer " + std::to_string(index) +
                          " does not fit " + describe_arg(index, k.arg_specs[index]) +
                          " (buffers come first, then the parameters): " +
                          cl_error_text("clSetKernelArg", err));
        ++index;
      }
      // Each parameter at its argument's size where known (its span may end in padding, which
      // check_launch found to be that), else the whole span, for the driver to judge.
      const auto* params = static_cast<const unsigned char*>(a.params);
      for (size_t j = 0; j < a.num_params; ++j, ++index) {
        const size_t begin = a.param_offsets[j];
        const size_t end = j + 1 < a.num_params ? a.param_offsets[j + 1] : a.params_size;
        const ArgSpec& spec = k.arg_specs[index];
        const size_t size = spec.size != 0 ? spec.size : end - begin;
        cl_int err = clSetKernelArg(k.kernel.get(), index, size, params + begin);
        if (err != CL_SUCCESS)
          throw Error(HCR_ERROR_INVALID_ARGUMENT,
                      "kernel '" + k.name + "': parameter " + std::to_string(j) + " (" +
                          describe_bytes(params + begin, end - begin) + ") does not fit " +
                          describe_arg(index, spec) + ": " + cl_error_text("clSetKernelArg", err));
      }
      cl_int err = clEnqueueNDRangeKernel(q, k.kernel.get(), dims, nullptr, global,
                                          has_local ? local : nullptr, 0, nullptr, &ev);
      if (err != CL_SUCCESS) {
        std::string geometry = dims_text(global, dims);
        if (has_local) geometry.append(" in work-groups of ").append(dims_text(local, dims));
        throw Error(hcr_code_of(err) == HCR_ERROR_BACKEND ? HCR_ERROR_INVALID_ARGUMENT
                                                          : hcr_code_of(err),
                    "kernel '" + k.name + "' on '" + d.name + "' with " + geometry +
                        " work items: " + cl_error_text("clEnqueueNDRangeKernel", err));
      }
    }
    op->event = Event(ev);
    HCR_CL_CHECK(clFlush(q));
    op->load->fetch_add(1, std::memory_order_relaxed);  // the completer takes it off again
    ticket.watch(std::move(op));
  }

  PluginOptions options_;
  ProgramCache cache_;
  std::vector<std::unique_ptr<Platform>> platforms_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::mutex memory_mutex_;
  std::unordered_set<Memory*> live_;
  std::mutex kernels_mutex_;
  std::unordered_set<Kernel*> kernels_;
  std::atomic<uint64_t> cache_hits_{0}, cache_misses_{0};
};

}  // namespace
}  // namespace hcr::opencl

HCR_SDK_PLUGIN(hcr::opencl::OpenClBackend, "opencl", "0.1.0")
