// Reads the [[backend]] table of the simulated backend. Keys of [[backend.device]] tables and
// [backend.kernel.<name>] tables arrive flattened ("device.0.gflops", "kernel.scale.flops"); the
// SDK's check_all_used() cannot see inside them, so unknown sub-keys are rejected here.
#include "sim_config.hpp"

#include "host_blas.hpp"
#include "sim_units.hpp"

#include <hcr/sdk/backend.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

namespace hcr::sim {

namespace {

using sdk::Error;

constexpr const char* kDeviceKeys =
    "name, kind, arch, gflops, kernels, factors.<kernel>, memory, concurrency, compute_units, "
    "bandwidth, latency, host_memory, launch_overhead, noise, slowdown_at, slowdown_factor, "
    "fail_probability, copy_fail_probability, fail_after, lost_at, hang_probability, hang_timeout, "
    "idle_watts, busy_watts, power.<kernel>";

[[noreturn]] void invalid(const std::string& message) {
  throw Error(HCR_ERROR_INVALID_ARGUMENT, message);
}

double positive(std::string_view key, std::string_view value) {
  double v = parse_number(key, value);
  if (!(v > 0)) bad_value(key, value, "a number greater than 0");
  return v;
}

double non_negative(std::string_view key, std::string_view value) {
  double v = parse_number(key, value);
  if (v < 0) bad_value(key, value, "a number of at least 0");
  return v;
}

// A duration, or "never".
double time_or_never(std::string_view key, std::string_view value) {
  if (value == "never") return kNever;
  return parse_duration(key, value);
}

hcr_device_kind_t parse_kind(std::string_view key, std::string_view value) {
  if (value == "gpu") return HCR_DEVICE_GPU;
  if (value == "accelerator") return HCR_DEVICE_ACCELERATOR;
  if (value == "cpu") return HCR_DEVICE_CPU;
  if (value == "sim") return HCR_DEVICE_SIM;
  bad_value(key, value, "a device kind: gpu, accelerator, cpu or sim");
}

const char* kind_text(hcr_device_kind_t k) {
  switch (k) {
    case HCR_DEVICE_CPU: return "cpu";
    case HCR_DEVICE_ACCELERATOR: return "accelerator";
    case HCR_DEVICE_SIM: return "sim";
    default: return "gpu";
  }
}

uint32_t slots(std::string_view key, std::string_view value) {
  uint64_t n = parse_count(key, value);
  if (n < 1 || n > 4096) bad_value(key, value, "an integer from 1 to 4096");
  return static_cast<uint32_t>(n);
}

// One [[backend.device]] table; `keys` are relative to "device.<index>.".
DeviceConfig parse_device(size_t index,
                          const std::vector<std::pair<std::string, std::string>>& keys) {
  DeviceConfig d;
  const std::string prefix = "device." + std::to_string(index) + ".";
  bool has_slowdown_at = false, has_slowdown_factor = false, has_arch = false, has_name = false;
  for (const auto& [rel, value] : keys) {
    const std::string key = prefix + rel;
    if (rel == "name") {
      if (value.empty()) bad_value(key, value, "a device name");
      d.name = value;
      has_name = true;
    } else if (rel == "kind") {
      d.kind = parse_kind(key, value);
    } else if (rel == "arch") {
      if (value.empty()) bad_value(key, value, "an architecture key");
      d.arch = value;
      has_arch = true;
    } else if (rel == "gflops") {
      d.gflops = positive(key, value);
    } else if (rel == "kernels") {
      d.kernels = value.empty() ? std::vector<std::string>{} : parse_list(key, value);
    } else if (rel.rfind("factors.", 0) == 0) {
      std::string kernel = rel.substr(8);
      if (kernel.empty()) invalid("option '" + key + "': a speed factor needs a kernel name");
      d.factors[kernel] = positive(key, value);
    } else if (rel == "memory") {
      d.memory = parse_bytes(key, value);
      if (d.memory == 0) bad_value(key, value, "a size greater than 0");
    } else if (rel == "concurrency") {
      d.concurrency = slots(key, value);
    } else if (rel == "compute_units") {
      d.compute_units = slots(key, value);
    } else if (rel == "bandwidth") {
      d.bandwidth = parse_rate(key, value);
      if (!(d.bandwidth > 0)) bad_value(key, value, "a rate greater than 0");
    } else if (rel == "latency") {
      d.latency = parse_duration(key, value);
    } else if (rel == "host_memory") {
      d.host_memory = parse_bool(key, value);
    } else if (rel == "launch_overhead") {
      d.launch_overhead = parse_duration(key, value);
    } else if (rel == "noise") {
      d.noise = non_negative(key, value);
      if (d.noise > 10) bad_value(key, value, "a relative standard deviation from 0 to 10");
    } else if (rel == "slowdown_at") {
      d.slowdown_at = parse_duration(key, value);
      has_slowdown_at = true;
    } else if (rel == "slowdown_factor") {
      d.slowdown_factor = positive(key, value);
      has_slowdown_factor = true;
    } else if (rel == "fail_probability") {
      d.fail_probability = parse_probability(key, value);
    } else if (rel == "copy_fail_probability") {
      d.copy_fail_probability = parse_probability(key, value);
    } else if (rel == "fail_after") {
      d.fail_after = parse_count(key, value);
    } else if (rel == "lost_at") {
      d.lost_at = time_or_never(key, value);
    } else if (rel == "hang_probability") {
      d.hang_probability = parse_probability(key, value);
    } else if (rel == "idle_watts") {
      d.idle_watts = non_negative(key, value);
    } else if (rel == "busy_watts") {
      d.busy_watts = non_negative(key, value);
    } else if (rel.rfind("power.", 0) == 0) {
      std::string kernel = rel.substr(6);
      if (kernel.empty()) invalid("option '" + key + "': a power factor needs a kernel name");
      d.power[kernel] = positive(key, value);
    } else if (rel == "hang_timeout") {
      d.hang_timeout = time_or_never(key, value);
      if (d.hang_timeout == 0) bad_value(key, value, "a duration greater than 0, or \"never\"");
    } else {
      invalid("unknown option '" + key + "' (a [[backend.device]] table takes: " + kDeviceKeys +
              ")");
    }
  }
  // Power: either draw alone means the other is the same (idle 0 under a busy draw alone).
  if (d.busy_watts >= 0 && d.idle_watts < 0) d.idle_watts = 0;
  if (d.idle_watts >= 0 && d.busy_watts < 0) d.busy_watts = d.idle_watts;
  if (d.busy_watts < d.idle_watts)
    invalid("option '" + prefix + "busy_watts' = " + std::to_string(d.busy_watts) + ": below " +
            prefix + "idle_watts (" + std::to_string(d.idle_watts) + ")");
  if (!d.power.empty() && d.idle_watts < 0)
    invalid("option '" + prefix + "power.<kernel>': a power factor needs " + prefix +
            "idle_watts or " + prefix + "busy_watts");
  if (has_slowdown_at && !has_slowdown_factor)
    invalid("option '" + prefix + "slowdown_at' needs '" + prefix + "slowdown_factor' as well");
  if (d.host_memory)
    for (const auto& [rel, value] : keys)
      if (rel == "bandwidth" || rel == "latency") d.ignored.push_back(prefix + rel);
  if (!has_name) d.name = std::string("sim-") + kind_text(d.kind) + std::to_string(index);
  // Devices share a cost model through their arch key: by default each name is its own.
  if (!has_arch) d.arch = "sim:" + d.name;
  if (d.compute_units == 0) d.compute_units = d.concurrency;
  return d;
}

// Splits "<head>.<rest>" after `prefix`; false when there is no dot.
bool split_index(const std::string& key, size_t prefix_len, std::string& head, std::string& rest) {
  size_t dot = key.find('.', prefix_len);
  if (dot == std::string::npos) return false;
  head = key.substr(prefix_len, dot - prefix_len);
  rest = key.substr(dot + 1);
  return !head.empty() && !rest.empty();
}

}  // namespace

const char* builtin_cost(const std::string& kernel) {
  auto b = host_blas::find(kernel);
  if (!b) return nullptr;
  switch (b->op) {
    case host_blas::Op::gemm: return "2*m*n*k";
    case host_blas::Op::syrk: return "n*n*k";
    case host_blas::Op::trsm: return "m*m*n (side left) or m*n*n (side right)";
    case host_blas::Op::potrf: return "n*n*n/3";
    case host_blas::Op::getrf_nopiv: return "2*n*n*n/3";
  }
  return nullptr;
}

bool DeviceConfig::offers(const std::string& kernel) const {
  return !kernels || std::find(kernels->begin(), kernels->end(), kernel) != kernels->end();
}

double DeviceConfig::factor(const std::string& kernel) const {
  auto it = factors.find(kernel);
  return it == factors.end() ? 1.0 : it->second;
}

double DeviceConfig::dynamic_watts(const std::string& kernel) const {
  if (idle_watts < 0) return 0;
  auto it = power.find(kernel);
  return (busy_watts - idle_watts) * (it == power.end() ? 1.0 : it->second);
}

KernelCost MachineConfig::cost(const std::string& kernel) const {
  auto it = kernels.find(kernel);
  if (it != kernels.end()) return it->second;
  return KernelCost{0, flops_per_byte};
}

MachineConfig parse_machine(const sdk::Options& options) {
  MachineConfig m;
  if (auto v = options.get("seed")) m.seed = static_cast<uint64_t>(parse_integer("seed", *v));
  if (auto v = options.get("time_scale")) m.time_scale = positive("time_scale", *v);
  if (auto v = options.get("compute")) m.compute = parse_bool("compute", *v);
  if (auto v = options.get("estimates")) m.estimates = parse_bool("estimates", *v);
  if (auto v = options.get("workers")) {
    uint64_t n = parse_count("workers", *v);
    if (n > 256) bad_value("workers", *v, "0 (automatic) or an integer from 1 to 256");
    m.workers = static_cast<uint32_t>(n);
  }
  if (auto v = options.get("flops_per_byte")) m.flops_per_byte = non_negative("flops_per_byte", *v);

  // [backend.kernel.<name>]: the name may itself contain dots, the field never does.
  std::map<std::string, KernelCost, std::less<>> kernels;
  std::map<std::string, bool> has_per_byte;
  for (const auto& [key, value] : options.with_prefix("kernel.")) {
    size_t dot = key.rfind('.');
    std::string name = dot > 7 ? key.substr(7, dot - 7) : std::string();
    std::string field = key.substr(dot + 1);
    if (name.empty())
      invalid("option '" + key + "': kernel costs are [backend.kernel.<name>] tables");
    if (const char* formula = builtin_cost(name))
      invalid("option '" + key + "': the cost of " + name + " is fixed at " + formula +
              " flops; change a device's speed with factors." + name);
    KernelCost& c = kernels[name];
    if (field == "flops") {
      c.flops = non_negative(key, value);
    } else if (field == "flops_per_byte") {
      c.flops_per_byte = non_negative(key, value);
      has_per_byte[name] = true;
    } else {
      invalid("unknown option '" + key + "' (a [backend.kernel.<name>] table takes: flops, " +
              "flops_per_byte)");
    }
  }
  for (auto& [name, c] : kernels)
    if (!has_per_byte[name]) c.flops_per_byte = m.flops_per_byte;
  m.kernels = std::move(kernels);

  // [[backend.device]] tables, in index order.
  std::map<size_t, std::vector<std::pair<std::string, std::string>>> devices;
  for (const auto& [key, value] : options.with_prefix("device.")) {
    std::string head, rest;
    bool ok = split_index(key, 7, head, rest) &&
              std::all_of(head.begin(), head.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
              head.size() <= 4;
    if (!ok)
      invalid("option '" + key + "': devices are [[backend.device]] tables (device.0.name, " +
              "device.1.name, ...)");
    devices[std::stoul(head)].emplace_back(rest, value);
  }
  for (const auto& [index, keys] : devices) m.devices.push_back(parse_device(index, keys));

  // No machine described: no devices. A simulated device must be asked for; a runtime that
  // loads every plugin it finds must not quietly give real work to a pretend GPU.
  if (m.workers == 0) {
    uint64_t total = 0;
    for (auto& d : m.devices) total += d.concurrency;
    uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
    m.workers =
        static_cast<uint32_t>(std::clamp<uint64_t>(total, 1, std::min<uint64_t>(cores, 256)));
  }
  options.check_all_used();
  return m;
}

}  // namespace hcr::sim
