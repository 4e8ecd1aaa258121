/// \file device.hpp
/// A device as the runtime sees it: a value snapshot taken when its plugin was loaded.
#pragma once

#include <hcr/types.hpp>

#include <cstdint>
#include <string>

namespace hcr {

/// Devices one runtime holds over its life, hot-plugged and removed ones included.
inline constexpr uint32_t kMaxDevices = 128;

struct Device {
  uint32_t id = 0;      ///< index in Runtime::devices()
  std::string name;     ///< e.g. "AMD EPYC (2 threads)"
  std::string arch;     ///< architecture key: identical devices share a cost model
  std::string backend;  ///< name of the plugin that exposes it
  DeviceKind kind = DeviceKind::cpu;
  uint64_t memory_bytes = 0;
  uint32_t compute_units = 0;
  uint32_t concurrency = 1;   ///< tasks it runs at once
  uint32_t memory_node = 0;   ///< 0 is host memory; devices with their own memory have their own
  double peak_gflops = 0;     ///< plugin's estimate, 0 when unknown
  double link_bandwidth = 0;  ///< bytes/s to host memory, 0 when unknown
  double link_latency = 0;    ///< seconds, 0 when unknown
};

}  // namespace hcr
