// Submit-time checks of tasks of the built-in kernels that <hcr/builtin_params.h> names (gemm,
// syrk, trsm, potrf, getrf_nopiv): a wrong shape, element type, parameter block or access mode
// throws at Runtime::submit, naming it, instead of failing later on whichever device the task
// reached.
#pragma once

#include <string_view>

namespace hcr::detail {

struct BuiltinSpec;
struct TaskNode;

/// The built-in kernel called `name` ("gemm_f32", "potrf_f64", ...), or null for any other name.
/// Looked up once, when the runtime first makes the kernel (KernelState::builtin): tasks of user
/// kernels never reach check_builtin_task.
const BuiltinSpec* find_builtin(std::string_view name) noexcept;

/// Checks task `t` of built-in `spec` against builtin_params.h's contract: the number of buffers,
/// their element types, shapes and access modes (what the kernel reads must be readable, what it
/// overwrites in part or reads back must be read_write), outputs that alias inputs, and the
/// parameter block (one of the kernel's type, with a struct_size its ABI knows, enumerations in
/// range). Throws Error(invalid_argument) naming the argument, shape or value at fault.
void check_builtin_task(const BuiltinSpec& spec, const TaskNode& t);

}  // namespace hcr::detail
