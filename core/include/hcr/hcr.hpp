/// \file hcr.hpp
/// The umbrella header of hcr, the heterogeneous compute runtime.
#pragma once

#include <hcr/blas.hpp>
#include <hcr/buffer.hpp>
#include <hcr/config.hpp>
#include <hcr/context.hpp>
#include <hcr/data.hpp>
#include <hcr/device.hpp>
#include <hcr/error.hpp>
#include <hcr/event.hpp>
#include <hcr/graph.hpp>
#include <hcr/kernel.hpp>
#include <hcr/log.hpp>
#include <hcr/runtime.hpp>
#include <hcr/sched.hpp>
#include <hcr/task.hpp>
#include <hcr/trace.hpp>
#include <hcr/types.hpp>
