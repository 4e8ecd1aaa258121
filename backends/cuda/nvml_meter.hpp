// The GPUs' energy meter: NVML (libnvidia-ml.so.1, part of the driver), opened with dlopen when the
// plugin starts with devices, like the libraries of cuda_libs.hpp, so that a machine without it
// only loses the energy figures. Each CUDA device is matched to its NVML device by PCI bus id,
// never by index: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER renumber CUDA's devices, NVML's never
// are.
//
// A reading is measured: NVML's total-energy counter (millijoules since the driver loaded, Volta
// and later) less its value when the meter started; where a device has no such counter, its power
// samples (milliwatts) integrated over the time between readings. What it measures is the whole
// board, whoever runs on it (a MIG instance reads its whole GPU: NVML has no per-instance figure).
#pragma once

#include <hcr/sdk/backend.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace hcr::cuda {

/// The NVML entries the meter uses, declared here because the toolkit ships no nvml.h (it comes
/// with the driver's development files). From the NVML API reference:
///   nvmlReturn_t nvmlInit_v2(void);
///   nvmlReturn_t nvmlShutdown(void);
///   const char*  nvmlErrorString(nvmlReturn_t result);
///   nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device);
///   nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
///                                                    unsigned long long* energy);  // mJ
///   nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power);  // mW
/// nvmlReturn_t is a C enum (int-sized); nvmlDevice_t an opaque pointer.
namespace nvml {
using Return = int;
constexpr Return kSuccess = 0;  // NVML_SUCCESS
using Device = struct nvmlDevice_st*;
}  // namespace nvml

class NvmlMeter {
 public:
  /// The library to open by default: a name the loader searches (the driver installs it there).
  static constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

  /// Opens `library` (a file name the loader searches, or an absolute path), initializes NVML and
  /// finds the NVML device of each CUDA ordinal in `ordinals` (the plugin's device i is
  /// ordinals[i]). Never throws for a missing or failing NVML: it logs why (info) and has no meter.
  NvmlMeter(const std::string& library, const std::vector<int>& ordinals, const sdk::Host& host);
  /// nvmlShutdown (NVML counts its inits), then closes the library.
  ~NvmlMeter();
  NvmlMeter(const NvmlMeter&) = delete;
  NvmlMeter& operator=(const NvmlMeter&) = delete;

  /// Whether any device has a meter.
  bool active() const noexcept { return active_ > 0; }
  /// How many devices have a meter, and how many of those read the energy counter itself.
  size_t devices_metered() const noexcept { return active_; }
  size_t devices_with_counter() const noexcept { return with_counter_; }

  struct Reading {
    double joules = 0;      ///< since the meter started; never decreases
    double watts = -1;      ///< the draw now (< 0 unknown)
    double resolution = 0;  ///< seconds between updates of `joules`
  };
  /// Reads device `device`'s meter now. False when that device has none. Thread safe.
  bool read(size_t device, Reading& out);

 private:
  struct Gpu {
    nvml::Device handle = nullptr;  ///< null: no meter for this device
    bool counter = false;           ///< the total-energy counter works (else power is integrated)
    uint64_t last_mj = 0;           ///< the counter at the previous reading
    uint64_t counted_mj = 0;        ///< the counter's increments since the start, summed exactly
    double joules = 0;              ///< since the start
    double watts = -1;              ///< the last power sample (W)
    std::chrono::steady_clock::time_point last_time;    ///< of the previous reading
    std::chrono::steady_clock::time_point change_time;  ///< when the counter last moved
  };
  std::string error_text(nvml::Return r) const;
  void close() noexcept;

  void* lib_ = nullptr;
  bool initialized_ = false;
  nvml::Return (*init_)() = nullptr;
  nvml::Return (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvml::Return) = nullptr;
  nvml::Return (*by_bus_id_)(const char*, nvml::Device*) = nullptr;
  nvml::Return (*total_energy_)(nvml::Device, unsigned long long*) = nullptr;
  nvml::Return (*power_usage_)(nvml::Device, unsigned int*) = nullptr;

  std::mutex mutex_;  // the runtime reads meters from several threads
  std::vector<Gpu> gpus_;
  size_t active_ = 0;
  size_t with_counter_ = 0;
};

}  // namespace hcr::cuda
