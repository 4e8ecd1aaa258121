// The OpenCL backend plugin: the devices of every OpenCL platform the ICD loader knows (GPUs, FPGAs
// and other accelerators; CPU devices only when asked for), each with its own memory, one copy
// queue per direction and `queues` compute queues. Built-in gemm, syrk and trsm through CLBlast;
// user kernels as OpenCL C (compiled once per device and cached on disk) or as prebuilt binaries
// (FPGA bitstreams, offline builds named in TOML). Operations complete through OpenCL events and a
// completion thread per device (completion.hpp).
//
// This file is the plugin class: it turns ABI calls into the parts that do the work, each in a
// file of its own: opencl_options (the keys), opencl_device (devices, queues), opencl_memory
// (memory and copies), opencl_programs (programs and their cache), opencl_kernels (user kernels
// and their launch), opencl_blas (the built-ins on CLBlast).
#include "cl_info.hpp"
#include "opencl_blas.hpp"
#include "opencl_device.hpp"
#include "opencl_kernels.hpp"
#include "opencl_memory.hpp"
#include "opencl_options.hpp"
#include "opencl_programs.hpp"

#include <hcr/sdk/backend.hpp>

#include <memory>
#include <string>

namespace hcr::opencl {
namespace {

using sdk::Error;

class OpenClBackend final : public sdk::Backend {
 public:
  explicit OpenClBackend(const sdk::CreateContext& ctx)
      : Backend(ctx),
        options_(parse_options(ctx.options)),
        programs_(options_.cache_dir, host()),
        devices_(options_, host()) {}

  // Everything issued is waited for, then the completion threads stop, then OpenCL objects go
  // (kernels and memory the host did not free included).
  ~OpenClBackend() noexcept override {
    devices_.stop();
    kernels_.clear();
    memory_.clear();
    devices_.clear();
  }

  // ---- devices ------------------------------------------------------------------------------

  size_t device_count() override { return devices_.size(); }

  void device_info(size_t device, sdk::DeviceInfo& info) override {
    const Device& d = devices_[device];
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
    return memory_.allocate(devices_[device], device, bytes);
  }

  void mem_free(size_t, hcr_memory_t* memory) noexcept override {
    if (!memory_.release(memory))
      host().warn("opencl: mem_free of memory that is not a live allocation of this plugin");
  }

  void copy(const hcr_copy_args_t& a) override { enqueue_copy(devices_, memory_, a); }

  // ---- kernels ------------------------------------------------------------------------------

  hcr_kernel_t* kernel_get(size_t device, const hcr_kernel_desc_t& desc) override {
    Device& d = devices_[device];
    const std::string name = desc.name;
    // An offline binary named in the configuration is this device's own implementation of the
    // kernel: it answers the host's first question (the built-in of that name), before any
    // implementation the application offers. If it cannot be loaded, the host hears why and
    // tries those implementations next.
    if (desc.kind == HCR_IMPL_BUILTIN)
      for (const BinarySpec& b : options_.binaries) {
        if (b.kernel != name || !contains_icase(d.name, b.device)) continue;
        const std::string what = "kernel '" + name + "' from " + b.key + ".path";
        Program p = programs_.from_binary(d, b.path, b.build_options, what);
        host().debug("opencl: " + what + " ('" + b.path.string() + "') loaded on '" + d.name + "'");
        return program_kernel(d, device, name, std::move(p), b.entry.empty() ? name : b.entry);
      }
    const std::string api = desc.api ? desc.api : "";
    switch (desc.kind) {
      case HCR_IMPL_BUILTIN: return kernels_.track(make_blas_kernel(d, device, name, host()));
      case HCR_IMPL_SOURCE: {
        if (api != "opencl")
          throw Error(HCR_ERROR_UNSUPPORTED,
                      "OpenCL devices compile OpenCL C, not " + api + " source");
        if (desc.source == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "kernel '" + name + "': source is NULL");
        const std::string source(desc.source, desc.source_size);
        const std::string opts = with_arg_info(desc.build_options ? desc.build_options : "");
        Program p =
            programs_.from_source(d, devices_.platform(d), source, opts, "kernel '" + name + "'");
        return program_kernel(d, device, name, std::move(p), desc.entry ? desc.entry : name);
      }
      case HCR_IMPL_BINARY: {
        if (api != "opencl")
          throw Error(HCR_ERROR_UNSUPPORTED,
                      "OpenCL devices load OpenCL program binaries, not " + api + " ones");
        if (desc.binary_path == nullptr)
          throw Error(HCR_ERROR_INVALID_ARGUMENT, "kernel '" + name + "': binary_path is NULL");
        const std::string opts = desc.build_options ? desc.build_options : "";
        Program p = programs_.from_binary(d, desc.binary_path, opts, "kernel '" + name + "'");
        return program_kernel(d, device, name, std::move(p), desc.entry ? desc.entry : name);
      }
      default:
        throw Error(HCR_ERROR_UNSUPPORTED,
                    "OpenCL devices run OpenCL C sources, program binaries and their built-ins, "
                    "not host or native functions");
    }
  }

  void kernel_release(hcr_kernel_t* kernel) noexcept override {
    if (!kernels_.release(kernel))
      host().warn("opencl: kernel_release of a kernel that is not live in this plugin");
  }

  void launch(const hcr_launch_args_t& a) override {
    check_device(a.device);
    Kernel& k = sdk::launch_kernel<Kernel>(a);
    switch (k.type) {
      case KernelType::blas: launch_blas(devices_, memory_, a, k); break;
      case KernelType::program: launch_program(devices_, memory_, a, k); break;
    }
  }

  void synchronize(size_t device) override { devices_[device].completer->drain(); }

 private:
  hcr_kernel_t* program_kernel(const Device& d, size_t device, const std::string& name,
                               Program program, const std::string& entry) {
    return kernels_.track(make_program_kernel(d, device, name, std::move(program), entry));
  }

  // Declared in the order they are made: the options first, the cache (whose warning precedes
  // the devices' messages), the devices; destroyed in reverse, after the destructor's body.
  PluginOptions options_;
  Programs programs_;
  Devices devices_;
  Allocations memory_;
  Kernels kernels_;
};

}  // namespace
}  // namespace hcr::opencl

HCR_SDK_PLUGIN(hcr::opencl::OpenClBackend, "opencl", "0.1.0")
