// Parsing of the OpenCL plugin's [[backend]] keys.
#include "opencl_options.hpp"

#include "cl_info.hpp"
#include "program_cache.hpp"

#include <cstdlib>
#include <map>

namespace hcr::opencl {

namespace {

using sdk::Error;

[[noreturn]] void bad(const std::string& key, const std::string& value, const std::string& why) {
  throw Error(HCR_ERROR_INVALID_ARGUMENT, "option '" + key + "' = '" + value + "': " + why);
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

cl_device_type parse_types(const std::string& text) {
  cl_device_type types = 0;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string item = lower(trim(text.substr(start, comma - start)));
    if (item == "cpu") types |= CL_DEVICE_TYPE_CPU;
    else if (item == "gpu") types |= CL_DEVICE_TYPE_GPU;
    else if (item == "accelerator") types |= CL_DEVICE_TYPE_ACCELERATOR;
    else if (item == "custom") types |= CL_DEVICE_TYPE_CUSTOM;
    else if (item == "all") types |= CL_DEVICE_TYPE_ALL;
    else
      bad("device_types", text,
          (item.empty() ? std::string("an empty entry") : "'" + item + "'") +
              " is not one of cpu, gpu, accelerator, custom, all");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return types;
}

std::filesystem::path parse_dir(const std::string& key, const std::string& value) {
  if (value.empty()) return {};
  std::string v = value;
  if (v == "~" || v.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || home[0] == '\0') bad(key, value, "~ needs HOME to be set");
    v = std::string(home) + v.substr(1);
  }
  std::filesystem::path p(v);
  if (!p.is_absolute()) bad(key, value, "must be an absolute path (or \"\" to disable)");
  return p.lexically_normal();
}

std::vector<BinarySpec> parse_binaries(const sdk::Options& options) {
  std::map<long, BinarySpec> by_index;
  for (auto& [key, value] : options.with_prefix("binary.")) {
    // binary.<i>.<field>
    const std::string rest = key.substr(7);
    const size_t dot = rest.find('.');
    char* end = nullptr;
    const long index = std::strtol(rest.c_str(), &end, 10);
    if (dot == std::string::npos || end != rest.c_str() + dot || dot == 0 || index < 0)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "unknown option '" + key + "' (binaries are [[backend.binary]] tables)");
    BinarySpec& b = by_index[index];
    b.key = "binary." + std::to_string(index);
    const std::string field = rest.substr(dot + 1);
    if (field == "kernel") b.kernel = value;
    else if (field == "device") b.device = value;
    else if (field == "path") b.path = value;
    else if (field == "build_options") b.build_options = value;
    else if (field == "entry") b.entry = value;
    else
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  "unknown option '" + key +
                      "' (a [[backend.binary]] table has kernel, device, path, build_options, "
                      "entry)");
  }
  std::vector<BinarySpec> out;
  for (auto& [index, b] : by_index) {
    if (b.kernel.empty())
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "option '" + b.key + ".kernel' is missing or empty");
    if (b.path.empty())
      throw Error(HCR_ERROR_INVALID_ARGUMENT, "option '" + b.key + ".path' is missing or empty");
    if (!b.path.is_absolute()) bad(b.key + ".path", b.path.string(), "must be an absolute path");
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

PluginOptions parse_options(const sdk::Options& options) {
  PluginOptions o;
  if (auto v = options.get("device_types")) {
    o.device_types = parse_types(*v);
    o.device_types_text = *v;
  }
  o.platform = options.get("platform", "");
  o.device = options.get("device", "");
  const long long queues = options.get_int("queues", 2);
  if (queues < 1 || queues > 64)
    bad("queues", std::to_string(queues), "must be 1 to 64 compute queues per device");
  o.queues = static_cast<uint32_t>(queues);
  if (auto v = options.get("cache_dir")) o.cache_dir = parse_dir("cache_dir", *v);
  else o.cache_dir = default_cache_dir();
  o.binaries = parse_binaries(options);
  options.check_all_used();
  return o;
}

}  // namespace hcr::opencl
