// The simulated machine as the [[backend]] table describes it: backend-wide settings, kernel cost
// tables and one DeviceConfig per [[backend.device]] table. Parsed once at plugin_create; plain
// data afterwards.
#pragma once

#include <hcr/plugin.h>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hcr::sdk {
class Options;
}

namespace hcr::sim {

inline constexpr double kNever = std::numeric_limits<double>::infinity();

/// Modelled cost of a kernel other than the built-ins: flops + flops_per_byte * argument bytes.
struct KernelCost {
  double flops = 0;
  double flops_per_byte = 1;
};

struct DeviceConfig {
  std::string name;
  std::string arch;
  hcr_device_kind_t kind = HCR_DEVICE_GPU;
  double gflops = 100;
  std::optional<std::vector<std::string>> kernels;     // absent: every kernel
  std::map<std::string, double, std::less<>> factors;  // kernel -> speed factor
  uint64_t memory = 8ull << 30;
  uint32_t concurrency = 1;
  uint32_t compute_units = 0;  // 0: same as concurrency
  double bandwidth = 16e9;     // bytes per modelled second over the host link
  double latency = 10e-6;      // modelled seconds per transfer
  bool host_memory = false;
  double launch_overhead = 0;  // modelled seconds added to every launch
  double noise = 0;            // relative standard deviation of durations
  double slowdown_at = 0;      // modelled time from which durations are multiplied ...
  double slowdown_factor = 1;  // ... by this
  double fail_probability = 0;
  double copy_fail_probability = 0;
  uint64_t fail_after = std::numeric_limits<uint64_t>::max();
  double lost_at = kNever;
  double hang_probability = 0;
  double hang_timeout = kNever;
  /// Power (modelled energy): the draw doing nothing and while a slot computes at factor 1 (each
  /// busy slot adds (busy - idle) x the kernel's power factor). idle < 0: no power model.
  double idle_watts = -1;
  double busy_watts = -1;
  std::map<std::string, double, std::less<>> power;  // kernel -> power factor
  /// Keys that were given but have no effect on this device (a host-memory device's link).
  std::vector<std::string> ignored;

  /// Whether this device offers kernel `name` at all (the `kernels` list).
  bool offers(const std::string& name) const;
  /// The speed factor for `kernel` (1 when none is set).
  double factor(const std::string& kernel) const;
  /// Watts above idle while one slot runs `kernel` (0 without a power model).
  double dynamic_watts(const std::string& kernel) const;
};

struct MachineConfig {
  uint64_t seed = 1;
  double time_scale = 1;
  bool compute = true;
  bool estimates = false;
  uint32_t workers = 0;  // 0: as many as the devices have slots, at most the host's cores
  double flops_per_byte = 1;
  std::map<std::string, KernelCost, std::less<>> kernels;
  std::vector<DeviceConfig> devices;

  /// The cost of a kernel other than the built-ins: its [backend.kernel.<name>] table or the
  /// default.
  KernelCost cost(const std::string& kernel) const;
};

/// Reads and checks every option; throws sdk::Error naming the key (unknown keys included).
MachineConfig parse_machine(const sdk::Options& options);

/// The fixed cost of a built-in kernel as a formula ("2*m*n*k"), or NULL for any other kernel.
const char* builtin_cost(const std::string& kernel);

}  // namespace hcr::sim
