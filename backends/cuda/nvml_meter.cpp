// Reads the GPUs' energy through NVML opened with dlopen: the counter less its value at the start,
// or power samples integrated where a GPU has no counter.
#include "nvml_meter.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

namespace hcr::cuda {
namespace {

// NVML's total-energy counter updates every 20-100 ms depending on the board: the host attributes a
// reading over intervals at least this long.
constexpr double kCounterResolution = 0.1;
// Integrated power is no finer than the samples: nvmlDeviceGetPowerUsage averages over about a
// second on recent boards (and older ones update it at a few hertz).
constexpr double kPowerResolution = 1.0;

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

template <class F>
void resolve(void* handle, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  if (fn == nullptr && missing.empty()) missing = name;
}

}  // namespace

NvmlMeter::NvmlMeter(const std::string& library, const std::vector<int>& ordinals,
                     const sdk::Host& host)
    : gpus_(ordinals.size()) {
  dlerror();
  lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    const char* e = dlerror();
    host.info("no energy meter: cannot open " + library + " (" + (e ? e : "unknown dlopen error") +
              ")");
    return;
  }
  std::string missing;
  resolve(lib_, "nvmlInit_v2", init_, missing);
  resolve(lib_, "nvmlShutdown", shutdown_, missing);
  resolve(lib_, "nvmlErrorString", error_string_, missing);
  resolve(lib_, "nvmlDeviceGetHandleByPciBusId_v2", by_bus_id_, missing);
  resolve(lib_, "nvmlDeviceGetTotalEnergyConsumption", total_energy_, missing);
  resolve(lib_, "nvmlDeviceGetPowerUsage", power_usage_, missing);
  if (!missing.empty()) {
    host.info("no energy meter: " + library + " lacks " + missing);
    close();
    return;
  }
  if (nvml::Return r = init_(); r != nvml::kSuccess) {
    host.info("no energy meter: nvmlInit failed: " + error_text(r));
    close();
    return;
  }
  initialized_ = true;

  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ordinals.size(); ++i) {
    const std::string which =
        "device " + std::to_string(i) + " (CUDA " + std::to_string(ordinals[i]) + ")";
    char bus[32] = {};
    if (cudaError_t e = cudaDeviceGetPCIBusId(bus, sizeof bus, ordinals[i]); e != cudaSuccess) {
      (void)cudaGetLastError();
      host.debug(which + ": no energy meter: no PCI bus id (" + std::string(cudaGetErrorString(e)) +
                 ")");
      continue;
    }
    nvml::Device h = nullptr;
    if (nvml::Return r = by_bus_id_(bus, &h); r != nvml::kSuccess || h == nullptr) {
      host.debug(which + ": no energy meter: NVML has no device at " + bus + " (" + error_text(r) +
                 ")");
      continue;
    }
    // Two CUDA devices on one board (MIG instances) read the same whole-board figures: metering
    // both would count the board twice in the runtime's totals.
    bool shared = false;
    for (size_t j = 0; j < i; ++j) shared = shared || gpus_[j].handle == h;
    if (shared) {
      host.debug(which + ": no energy meter: its board (" + std::string(bus) +
                 ") is metered through an earlier device");
      continue;
    }
    Gpu& g = gpus_[i];
    unsigned long long mj = 0;
    unsigned int mw = 0;
    if (total_energy_(h, &mj) == nvml::kSuccess) {
      g.counter = true;
      g.last_mj = mj;
      ++with_counter_;
    } else if (nvml::Return r = power_usage_(h, &mw); r == nvml::kSuccess) {
      g.watts = mw * 1e-3;  // the first sample of the integral
    } else {
      host.debug(which + ": no energy meter: NVML reads neither energy nor power at " + bus + " (" +
                 error_text(r) + ")");
      continue;
    }
    g.handle = h;
    g.last_time = g.change_time = now;
    ++active_;
  }
  if (active_ == 0) {
    host.info("no energy meter: NVML meters none of the " + std::to_string(ordinals.size()) +
              " device(s)");
    close();
    return;
  }
  host.info("energy from NVML for " + std::to_string(active_) + " of " +
            std::to_string(ordinals.size()) + " device(s)" +
            (with_counter_ < active_
                 ? " (" + std::to_string(active_ - with_counter_) + " from power samples)"
                 : ""));
}

NvmlMeter::~NvmlMeter() { close(); }

void NvmlMeter::close() noexcept {
  if (initialized_) (void)shutdown_();
  initialized_ = false;
  // Closed, not left open as cuBLAS is: NVML keeps no state past nvmlShutdown, and each plugin
  // instance pairs its own dlopen and init with these.
  if (lib_ != nullptr) dlclose(lib_);
  lib_ = nullptr;
  for (Gpu& g : gpus_) g.handle = nullptr;
  active_ = with_counter_ = 0;
}

std::string NvmlMeter::error_text(nvml::Return r) const {
  const char* s = error_string_ != nullptr ? error_string_(r) : nullptr;
  return (s != nullptr ? std::string(s) : std::string("NVML error")) + " (" + std::to_string(r) +
         ")";
}

bool NvmlMeter::read(size_t device, Reading& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device >= gpus_.size() || gpus_[device].handle == nullptr) return false;
  Gpu& g = gpus_[device];
  const auto now = std::chrono::steady_clock::now();
  unsigned int mw = 0;
  const bool sampled = power_usage_(g.handle, &mw) == nvml::kSuccess;
  const double w = mw * 1e-3;
  if (g.counter) {
    unsigned long long mj = 0;
    // A counter that cannot be read this time adds nothing; one lower than before (the driver was
    // reloaded, which NVML handles should not survive) restarts from its new value.
    if (total_energy_(g.handle, &mj) == nvml::kSuccess) {
      if (mj > g.last_mj) {
        // Summed in millijoules, converted once: thousands of small increments added as doubles
        // drift from the counter's own figure.
        const double added = static_cast<double>(mj - g.last_mj) * 1e-3;
        g.counted_mj += mj - g.last_mj;
        g.joules = static_cast<double>(g.counted_mj) / 1000.0;
        // No power sample: the draw over the interval since the counter last moved, as RAPL's.
        if (!sampled) {
          const double dt = seconds(now - g.change_time);
          if (dt > 0) g.watts = added / dt;
        }
        g.change_time = now;
      }
      g.last_mj = mj;
    }
    if (sampled) g.watts = w;
    out.resolution = kCounterResolution;
  } else {
    // Trapezoids between samples; a sample that cannot be read this time holds the previous draw.
    const double dt = seconds(now - g.last_time);
    const double draw = sampled ? w : g.watts;
    if (dt > 0 && g.watts >= 0 && draw >= 0) g.joules += (g.watts + draw) / 2 * dt;
    g.watts = draw;
    out.resolution = kPowerResolution;
  }
  g.last_time = now;
  out.joules = g.joules;
  out.watts = g.watts;
  return true;
}

}  // namespace hcr::cuda
