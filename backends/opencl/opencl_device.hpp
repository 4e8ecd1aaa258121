// The devices the OpenCL plugin drives: the platforms it selected (one context each) and, per
// device, what OpenCL says of it, its queues (compute queues and their load, a copy queue per
// direction), its completion thread, the programs built for it and its CLBlast state. Devices
// finds them from the options at plugin creation; the set is fixed from then on.
#pragma once

#include "cl_api.hpp"
#include "cl_handle.hpp"
#include "completion.hpp"
#include "opencl_options.hpp"

#include <hcr/sdk/backend.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::opencl {

/// The built-in BLAS operations CLBlast offers: gemm, syrk and trsm, the first three of
/// sdk::BlasOp (opencl_blas.hpp).
constexpr int kBlasOps = 3;

/// A platform with at least one selected device.
struct Platform {
  cl_platform_id id = nullptr;
  std::string name;
  std::string version;
  Context context;  // holds all its selected devices, so copies between them stay on the devices
};

/// One selected device. The fields OpenCL reports are set once, at discovery; the mutexes guard
/// what is built on first use.
struct Device {
  size_t platform = 0;
  cl_context context = nullptr;  // the platform's, owned by Platform
  cl_device_id id = nullptr;
  std::string name, vendor, driver, version;
  hcr_device_kind_t kind = HCR_DEVICE_GPU;
  uint64_t memory_bytes = 0;
  uint64_t max_alloc = 0;
  uint32_t compute_units = 1;
  uint64_t base_align = 1;      // bytes; sub-buffer origins must be multiples of it
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

  std::mutex build_mutex;                   // one program build at a time on this device
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

/// The platforms and devices `options` select, in the order the ICD loader lists them. Thread-safe
/// to read once constructed (the set never changes); each Device guards its own state.
class Devices {
 public:
  /// Asks every platform for the devices `options` select, creating a context per platform with
  /// one, and queues and a completion thread per device. Never throws for want of a device: with
  /// none, or a platform or device that fails, it says why through `host` (info: nothing matched;
  /// warning: a failure) and carries on.
  Devices(const PluginOptions& options, const sdk::Host& host);
  /// Stops first (see stop()).
  ~Devices();
  Devices(const Devices&) = delete;
  Devices& operator=(const Devices&) = delete;

  size_t size() const noexcept { return devices_.size(); }
  Device& operator[](size_t device) { return *devices_[device]; }
  const Device& operator[](size_t device) const { return *devices_[device]; }
  const Platform& platform(const Device& d) const { return *platforms_[d.platform]; }
  /// The platform (and so the context) device `device` belongs to.
  size_t platform_of(size_t device) const { return devices_[device]->platform; }

  /// Waits for every operation started on any device to return from its `done`, finishes the
  /// queues and stops the completion threads. After it, no device takes work.
  void stop() noexcept;
  /// Releases the devices, then the platforms' contexts (call after stop(), once nothing made on
  /// them is left).
  void clear() noexcept;

 private:
  void discover(const PluginOptions& options);
  void add_platform(const PluginOptions& options, cl_platform_id pid,
                    std::vector<std::string>& skipped);
  void add_device(size_t platform, cl_device_id id, uint32_t queues);

  sdk::Host host_;
  std::vector<std::unique_ptr<Platform>> platforms_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace hcr::opencl
