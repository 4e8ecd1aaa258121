// The built-in BLAS kernels of <hcr/builtin_params.h> on OpenCL devices, through CLBlast: gemm,
// syrk and trsm in f32 and f64 (f64 where the device has cl_khr_fp64), row-major on the device's
// compute queues. No LAPACK in CLBlast: potrf and getrf_nopiv are declined, so never placed here.
#pragma once

#include "opencl_device.hpp"
#include "opencl_kernels.hpp"
#include "opencl_memory.hpp"

#include <hcr/plugin.h>
#include <hcr/sdk/backend.hpp>

#include <memory>
#include <string>

namespace hcr::opencl {

/// The built-in kernel `name` ("syrk_f64") for device `d` (index `device`), CLBlast's program for
/// it built first, once per device, operation and type (seconds; logged through `host`). Throws
/// NOT_FOUND for what the device cannot run: another name, a factorization, f64 without
/// cl_khr_fp64, a routine CLBlast cannot build there.
std::unique_ptr<Kernel> make_blas_kernel(Device& d, size_t device, const std::string& name,
                                         const sdk::Host& host);

/// Launches built-in kernel `k`: its buffers, shapes and parameter block checked against the
/// contract (a mistake names the argument, shape or field), then CLBlast's call on the least
/// loaded compute queue (C zeroed first where beta is 0). Completes through `done`, from the
/// device's completion thread. Throws sdk::Error when it cannot start.
void launch_blas(Devices& devices, Allocations& memory, const hcr_launch_args_t& a,
                 const Kernel& k);

}  // namespace hcr::opencl
