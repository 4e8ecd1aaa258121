// The one place the OpenCL headers are included from. The build defines CL_TARGET_OPENCL_VERSION
// as 120: hcr uses the OpenCL 1.2 API only, which every ICD, PoCL and FPGA runtime offers.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#error "CL_TARGET_OPENCL_VERSION must be set by the build (120)"
#endif

#include <CL/cl.h>
