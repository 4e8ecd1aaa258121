// User kernels on OpenCL devices: a program's function made into a cl_kernel with what its
// arguments take, and its launch — buffers as cl_mem (sub-buffers for offsets), then each scalar
// parameter as its own argument, over the task's NDRange, on the least loaded compute queue.
#include "opencl_kernels.hpp"

#include "cl_error.hpp"
#include "cl_info.hpp"
#include "completion.hpp"

#include <algorithm>

namespace hcr::opencl {
namespace {

using sdk::Error;

// "64x8": the first `dims` sizes.
std::string dims_text(const size_t* v, cl_uint dims) {
  std::string s = std::to_string(v[0]);
  for (cl_uint i = 1; i < dims; ++i) s.append("x").append(std::to_string(v[i]));
  return s;
}

}  // namespace

hcr_kernel_t* Kernels::track(std::unique_ptr<Kernel> k) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.insert(k.get());
  return reinterpret_cast<hcr_kernel_t*>(k.release());
}

bool Kernels::release(hcr_kernel_t* kernel) noexcept {
  auto* k = reinterpret_cast<Kernel*>(kernel);
  std::lock_guard<std::mutex> lock(mutex_);
  if (live_.erase(k) == 0) return false;
  delete k;
  return true;
}

void Kernels::clear() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Kernel* k : live_) delete k;
  live_.clear();
}

std::unique_ptr<Kernel> make_program_kernel(const Device& d, size_t device, const std::string& name,
                                            Program program, const std::string& entry) {
  auto k = std::make_unique<Kernel>();
  k->device = device;
  k->type = KernelType::program;
  k->name = name;
  k->program = std::move(program);
  cl_int err = CL_SUCCESS;
  k->kernel = KernelHandle(clCreateKernel(k->program.get(), entry.c_str(), &err));
  if (err == CL_INVALID_KERNEL_NAME) {
    const std::string names = program_kernel_names(k->program.get());
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                "kernel '" + name + "': the program has no kernel function '" + entry +
                    "' (it has: " + (names.empty() ? "none" : names) + ")");
  }
  if (err != CL_SUCCESS) throw_cl(err, "clCreateKernel");
  HCR_CL_CHECK(clGetKernelInfo(k->kernel.get(), CL_KERNEL_NUM_ARGS, sizeof k->num_args,
                               &k->num_args, nullptr));
  k->arg_specs = read_arg_specs(k->kernel.get(), k->num_args, d.max_parameter, d.address_bytes);
  return k;
}

void launch_program(Devices& devices, Allocations& memory, const hcr_launch_args_t& a, Kernel& k) {
  Device& d = devices[a.device];
  const size_t expected = a.num_args + a.num_params;
  if (expected != k.num_args)
    throw Error(HCR_ERROR_INVALID_ARGUMENT,
                "kernel '" + k.name + "' takes " + std::to_string(k.num_args) +
                    " arguments; the task gives " + std::to_string(a.num_args) + " buffer(s) and " +
                    std::to_string(a.num_params) + " parameter(s)");
  // Buffers on pointers, parameters on values of their size (read when the kernel was made).
  check_launch(k.name, k.arg_specs, a);

  // Work geometry: the task's grid, or one work item per element of the first written buffer.
  size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
  std::vector<hcr_arg_t> args(a.num_args);
  for (size_t i = 0; i < a.num_args; ++i)  // the host's stride, which is its struct_size
    args[i] = sdk::read_struct(&sdk::element(a.args, i));
  if (a.global_size[0] == 0) {
    const hcr_arg_t* first = nullptr;
    for (auto& x : args)
      if (x.access & HCR_ACCESS_WRITE) {
        first = &x;
        break;
      }
    if (first == nullptr && !args.empty()) first = &args[0];
    global[0] = first ? static_cast<size_t>(first->rows * first->cols) : 1;
  } else {
    for (int i = 0; i < 3; ++i)
      global[i] = static_cast<size_t>(std::max<uint64_t>(1, a.global_size[i]));
  }
  const bool has_local = a.local_size[0] != 0;
  if (has_local)
    for (int i = 0; i < 3; ++i) local[i] = std::max<uint32_t>(1, a.local_size[i]);
  cl_uint dims = 1;
  for (cl_uint i = 1; i < 3; ++i)
    if (global[i] > 1 || local[i] > 1) dims = i + 1;
  if (global[0] * global[1] * global[2] == 0) {  // an empty buffer: no work
    sdk::complete(a.done, a.done_user_data, nullptr, 0);
    return;
  }
  if (has_local)
    for (cl_uint i = 0; i < dims; ++i)
      if (global[i] % local[i] != 0)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "kernel '" + k.name + "': grid " + std::to_string(global[i]) +
                        " is not a multiple of block " + std::to_string(local[i]) +
                        " in dimension " + std::to_string(i) +
                        " (OpenCL 1.2 runs whole work-groups)");

  auto op = std::make_unique<Op>();
  op->done = a.done;
  op->done_user_data = a.done_user_data;
  op->measure = (a.flags & HCR_LAUNCH_MEASURE) != 0;
  op->what = "kernel '" + k.name + "' on '" + d.name + "'";
  std::vector<cl_mem> mems(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const hcr_arg_t& x = args[i];
    const std::string which = "kernel '" + k.name + "' argument " + std::to_string(i);
    if (x.memory == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is not in device memory");
    Memory* m = memory.live(x.memory, which);
    if (devices.platform_of(m->device) != devices.platform_of(a.device))
      throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " lives in another OpenCL context");
    if (x.offset == 0) {
      mems[i] = m->mem.get();
      continue;
    }
    // A kernel sees a buffer from its start: an offset needs a sub-buffer, whose origin OpenCL
    // requires to be aligned.
    if (x.offset % d.base_align != 0 || x.offset >= m->bytes)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  which + ": byte offset " + std::to_string(x.offset) +
                      (x.offset >= m->bytes
                           ? " is past the allocation of " + std::to_string(m->bytes) + " bytes"
                           : " is not a multiple of the device's base address "
                             "alignment (" +
                                 std::to_string(d.base_align) + " bytes)"));
    cl_buffer_region region{static_cast<size_t>(x.offset),
                            static_cast<size_t>(m->bytes - x.offset)};
    Mem sub(cl_create("clCreateSubBuffer", [&](cl_int* e) {
      return clCreateSubBuffer(m->mem.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                               &region, e);
    }));
    mems[i] = sub.get();
    op->holds.push_back(std::move(sub));
  }

  Ticket ticket(*d.completer);
  cl_command_queue q = d.pick_compute(op->load);
  cl_event ev = nullptr;
  {
    std::lock_guard<std::mutex> lock(k.mutex);
    cl_uint index = 0;
    for (cl_mem& m : mems) {
      cl_int err = clSetKernelArg(k.kernel.get(), index, sizeof(cl_mem), &m);
      if (err != CL_SUCCESS)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, "kernel '" + k.name + "': buffer " +
                                                    std::to_string(index) + " does not fit " +
                                                    describe_arg(index, k.arg_specs[index]) +
                                                    " (buffers come first, then the parameters): " +
                                                    cl_error_text("clSetKernelArg", err));
      ++index;
    }
    // Each parameter at its argument's size where known (its span may end in padding, which
    // check_launch found to be that), else the whole span, for the driver to judge.
    const auto* params = static_cast<const unsigned char*>(a.params);
    for (size_t j = 0; j < a.num_params; ++j, ++index) {
      const size_t begin = a.param_offsets[j];
      const size_t end = j + 1 < a.num_params ? a.param_offsets[j + 1] : a.params_size;
      const ArgSpec& spec = k.arg_specs[index];
      const size_t size = spec.size != 0 ? spec.size : end - begin;
      cl_int err = clSetKernelArg(k.kernel.get(), index, size, params + begin);
      if (err != CL_SUCCESS)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    "kernel '" + k.name + "': parameter " + std::to_string(j) + " (" +
                        describe_bytes(params + begin, end - begin) + ") does not fit " +
                        describe_arg(index, spec) + ": " + cl_error_text("clSetKernelArg", err));
    }
    cl_int err = clEnqueueNDRangeKernel(q, k.kernel.get(), dims, nullptr, global,
                                        has_local ? local : nullptr, 0, nullptr, &ev);
    if (err != CL_SUCCESS) {
      std::string geometry = dims_text(global, dims);
      if (has_local) geometry.append(" in work-groups of ").append(dims_text(local, dims));
      throw Error(
          hcr_code_of(err) == HCR_ERROR_BACKEND ? HCR_ERROR_INVALID_ARGUMENT : hcr_code_of(err),
          "kernel '" + k.name + "' on '" + d.name + "' with " + geometry +
              " work items: " + cl_error_text("clEnqueueNDRangeKernel", err));
    }
  }
  op->event = Event(ev);
  HCR_CL_CHECK(clFlush(q));
  op->load->fetch_add(1, std::memory_order_relaxed);  // the completer takes it off again
  ticket.watch(std::move(op));
}

}  // namespace hcr::opencl
