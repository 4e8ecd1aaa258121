// Finding the OpenCL devices: the platforms the ICD loader lists, filtered by the options, each
// selected device described (kind, memory, compute units, peak) and given its queues and completion
// thread. Why a device found is not used goes to the host's log, never to a failure.
#include "opencl_device.hpp"

#include "cl_error.hpp"
#include "cl_info.hpp"

#include <algorithm>
#include <string>

namespace hcr::opencl {
namespace {

using sdk::Error;

const char* kind_name(hcr_device_kind_t k) {
  switch (k) {
    case HCR_DEVICE_CPU: return "cpu";
    case HCR_DEVICE_GPU: return "gpu";
    case HCR_DEVICE_ACCELERATOR: return "accelerator";
    default: return "other";
  }
}

// A device property that only refines an estimate: 0 when the driver does not answer.
template <class T>
T optional_value(cl_device_id id, cl_device_info what) {
  T v{};
  if (clGetDeviceInfo(id, what, sizeof v, &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

}  // namespace

Devices::Devices(const PluginOptions& options, const sdk::Host& host) : host_(host) {
  discover(options);
}

Devices::~Devices() {
  stop();
  clear();
}

// Everything issued is waited for, on every device before any queue is finished (the second stage
// of a copy between contexts is enqueued on the other device's queue), then the queues finish and
// the completion threads stop.
void Devices::stop() noexcept {
  for (auto& d : devices_)
    if (d->completer) d->completer->drain();
  for (auto& d : devices_) {
    for (auto& q : d->compute) clFinish(q.get());
    if (d->copy_in) clFinish(d->copy_in.get());
    if (d->copy_out) clFinish(d->copy_out.get());
    d->completer.reset();
  }
}

void Devices::clear() noexcept {
  devices_.clear();
  platforms_.clear();
}

void Devices::discover(const PluginOptions& options) {
  std::vector<std::string> skipped;  // why each device found is not used
  std::vector<cl_platform_id> ids;
  try {
    ids = list_platforms();
  } catch (const Error& e) {
    host_.info(std::string("opencl: no devices: ") + e.what());
    return;
  }
  if (ids.empty()) {
    host_.info("opencl: no devices: the OpenCL ICD loader found no platform (no vendor "
               "driver registered in /etc/OpenCL/vendors or $OCL_ICD_VENDORS)");
    return;
  }
  for (cl_platform_id pid : ids) {
    try {
      add_platform(options, pid, skipped);
    } catch (const Error& e) {
      host_.warn(std::string("opencl: skipping a platform: ") + e.what());
    }
  }
  if (devices_.empty()) {
    std::string why;
    for (auto& s : skipped) why += (why.empty() ? "" : "; ") + s;
    host_.info("opencl: no devices selected (device_types = " + options.device_types_text +
               (options.platform.empty() ? "" : ", platform = '" + options.platform + "'") +
               (options.device.empty() ? "" : ", device = '" + options.device + "'") +
               "): " + (why.empty() ? "the platforms have no devices" : why));
  }
}

void Devices::add_platform(const PluginOptions& options, cl_platform_id pid,
                           std::vector<std::string>& skipped) {
  auto p = std::make_unique<Platform>();
  p->id = pid;
  p->name = platform_string(pid, CL_PLATFORM_NAME);
  p->version = platform_string(pid, CL_PLATFORM_VERSION);
  if (!contains_icase(p->name, options.platform)) {
    skipped.push_back("platform '" + p->name + "' does not match platform = '" + options.platform +
                      "'");
    return;
  }
  // Only the wanted types are asked for, and only a platform with a wanted device gets a
  // context, queues and builds. (Asking at all initialises the platform's drivers: PoCL
  // initialises all of them whatever the type asked for; OpenCL has no cheaper way to learn
  // what a platform offers. A platform that `platform` rules out is never asked.)
  const std::vector<cl_device_id> wanted = list_devices(pid, options.device_types);
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
    if (!contains_icase(name, options.device)) {
      skipped.push_back("'" + name + "' does not match device = '" + options.device + "'");
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
      add_device(index, id, options.queues);
    } catch (const Error& e) {
      host_.warn("opencl: skipping device '" + device_string(id, CL_DEVICE_NAME) +
                 "': " + e.what());
    }
  }
}

void Devices::add_device(size_t platform, cl_device_id id, uint32_t queues) {
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
  d->compute_units = std::max<cl_uint>(1, device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS));
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
  for (uint32_t i = 0; i < queues; ++i)
    d->compute.emplace_back(cl_create("clCreateCommandQueue", [&](cl_int* e) {
      return clCreateCommandQueue(ctx, id, CL_QUEUE_PROFILING_ENABLE, e);
    }));
  d->load = std::make_unique<std::atomic<uint32_t>[]>(d->compute.size());
  for (Queue* q : {&d->copy_in, &d->copy_out})
    *q = Queue(cl_create("clCreateCommandQueue",
                         [&](cl_int* e) { return clCreateCommandQueue(ctx, id, 0, e); }));
  d->completer = std::make_unique<Completer>(d->name, host_);
  host_.info("opencl: device " + std::to_string(devices_.size()) + ": '" + d->name + "' (" +
             kind_name(d->kind) + ", " + std::to_string(d->memory_bytes >> 20) + " MiB, " +
             std::to_string(d->compute_units) + " compute units, " +
             std::to_string(d->compute.size()) + " queues) on '" + platforms_[platform]->name +
             "'");
  devices_.push_back(std::move(d));
}

}  // namespace hcr::opencl
