// The [[backend]] keys of the OpenCL plugin, parsed and checked. Every bad value is an error that
// names the key (and the value); unknown keys are errors too (see backends/opencl/README.md).
#pragma once

#include "cl_api.hpp"

#include <hcr/sdk/backend.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hcr::opencl {

/// A prebuilt program for one kernel, from a [[backend.binary]] table.
struct BinarySpec {
  std::string key;             // "binary.0", for messages
  std::string kernel;          // the kernel name it serves
  std::string device;          // substring of the device name; empty: every device
  std::filesystem::path path;  // absolute
  std::string build_options;
  std::string entry;  // function in the program; empty: `kernel`
};

struct PluginOptions {
  cl_device_type device_types = CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR;
  std::string device_types_text = "gpu,accelerator";
  std::string platform;             // substring of the platform name; empty: any
  std::string device;               // substring of the device name; empty: any
  uint32_t queues = 2;              // compute queues per device
  std::filesystem::path cache_dir;  // empty: no program cache
  std::vector<BinarySpec> binaries;
};

/// Reads every key (then checks that none is left unknown). Throws sdk::Error naming the key.
PluginOptions parse_options(const sdk::Options& options);

}  // namespace hcr::opencl
