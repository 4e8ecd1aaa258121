// The kernels of the OpenCL plugin: what an hcr_kernel_t is (a built-in on CLBlast, or a function
// of a program made with opencl_programs.hpp), the set the host holds, and the launch of a user
// kernel: its arguments checked and set, its NDRange enqueued on the least loaded compute queue.
#pragma once

#include "cl_api.hpp"
#include "cl_handle.hpp"
#include "kernel_args.hpp"
#include "opencl_device.hpp"
#include "opencl_memory.hpp"

#include <hcr/plugin.h>
#include <hcr/sdk/blas.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace hcr::opencl {

enum class KernelType { blas, program };

/// A kernel on one device. Launches share its cl_kernel: clSetKernelArg and the enqueue that
/// captures the arguments happen under `mutex` (argument setting is not thread-safe per kernel).
struct Kernel {
  size_t device = 0;
  KernelType type = KernelType::program;
  sdk::BlasOp op = sdk::BlasOp::gemm;  // blas
  bool f64 = false;                    // blas
  std::string name;
  Program program;
  KernelHandle kernel;
  cl_uint num_args = 0;
  std::mutex mutex;
  std::vector<ArgSpec> arg_specs;  // program kernels: what each argument takes, read once
};

/// The kernels the host holds; tells them from stray pointers. Thread-safe.
class Kernels {
 public:
  Kernels() = default;
  ~Kernels() { clear(); }
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  /// Takes `k` over and hands it to the host.
  hcr_kernel_t* track(std::unique_ptr<Kernel> k);
  /// Frees a kernel; false (and nothing freed) when `kernel` is not a live one.
  bool release(hcr_kernel_t* kernel) noexcept;
  /// Frees every kernel the host did not release (at plugin destruction).
  void clear() noexcept;

 private:
  std::mutex mutex_;
  std::unordered_set<Kernel*> live_;
};

/// Kernel `name` of device `d` (index `device`): function `entry` of `program`, with what each of
/// its arguments takes (read once, here). Throws INVALID_ARGUMENT listing the program's kernels
/// when it has no `entry`.
std::unique_ptr<Kernel> make_program_kernel(const Device& d, size_t device, const std::string& name,
                                            Program program, const std::string& entry);

/// Launches program kernel `k`: the task's buffers (a sub-buffer where an argument has an offset)
/// then its parameters as the kernel's arguments, checked against them, over the task's grid or
/// one work item per element of the first buffer it writes. Completes through `done`, from the
/// device's completion thread. Throws sdk::Error when it cannot start.
void launch_program(Devices& devices, Allocations& memory, const hcr_launch_args_t& a, Kernel& k);

}  // namespace hcr::opencl
