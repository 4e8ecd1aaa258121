/// \file task.hpp
/// Tasks and their events.
///
/// \code
/// hcr::Event e = rt.submit(hcr::Task(gemm).read(a).read(b).read_write(c)
///                              .param(gemm_params).priority(1));
/// e.get();   // waits; rethrows the task's error, if any
/// \endcode
///
/// Dependencies are implicit from access order (a read waits for the last writer; a write waits
/// for the last writer and the readers since) and can be added with after(). A task whose input
/// was produced by a failed task fails too, with ErrorCode::dependency. Tasks that commute() on
/// a buffer one after another wait for what came before them, not for each other: they run one
/// at a time, in whichever order they become ready, and the next other access waits for them all.
#pragma once

#include <hcr/buffer.hpp>
#include <hcr/context.hpp>
#include <hcr/detail/handles.hpp>
#include <hcr/detail/task_builder.hpp>
#include <hcr/event.hpp>
#include <hcr/kernel.hpp>
#include <hcr/types.hpp>

#include <cstdint>
#include <exception>
#include <type_traits>

namespace hcr {

namespace detail {
HCR_API TaskNode* task_create(KernelState* kernel);
HCR_API void task_add_arg(TaskNode* t, BufferState* b, Access mode);
HCR_API void task_add_param(TaskNode* t, const void* data, size_t size, size_t align);
HCR_API void task_set_priority(TaskNode* t, int priority) noexcept;
HCR_API void task_add_dependency(TaskNode* t, TaskNode* before);
HCR_API void task_pin(TaskNode* t, uint32_t device);
HCR_API void task_set_context(TaskNode* t, ContextState* context);
HCR_API void task_add_scratch(TaskNode* t, DType dtype, size_t rows, size_t cols);
}  // namespace detail

/// A task under construction; Runtime::submit() consumes it. Move-only.
/// read(), write(), read_write(), commute(), arg(buffer, mode) and param(value) are its builder
/// (detail::TaskBuilder, which hcr::mpi::Task shares); each returns the Task. scratch() adds a
/// workspace argument (hcr::Task only).
class HCR_API Task : public detail::TaskBuilder<Task> {
 public:
  explicit Task(const Kernel& kernel);
  Task(Task&&) noexcept;
  Task& operator=(Task&&) noexcept;
  ~Task();

  using detail::TaskBuilder<Task>::arg;
  /// Appends a parameter given as `size` bytes aligned to `align` (for layers that forward the
  /// parameters of a task they build, such as hcr::mpi); the same as param() of that value.
  Task& param_bytes(const void* data, size_t size, size_t align) {
    detail::task_add_param(node_or_throw("Task::param"), data, size, align);
    return *this;
  }
  /// Appends a workspace of `bytes` bytes for this task alone (StarPU's STARPU_SCRATCH): the
  /// kernel receives it as its next argument, in order with the buffers, a 1 x `bytes` buffer of
  /// DType::bytes (`ctx.arg<std::byte>(i)`), read_write. It lives in the memory of the device the
  /// task runs on, taken from that node's pool of free blocks when the task's inputs are, counted
  /// against the node's memory limit and the context's quota, and given back when the attempt
  /// ends. Its contents are undefined at the start of each attempt; nothing is copied to or from
  /// it; it creates no dependency. Throws Error(invalid_argument) for 0 bytes.
  Task& scratch(size_t bytes) { return scratch(DType::bytes, 1, bytes); }
  /// The same as a rows x cols matrix of `dtype` (contiguous: ld = cols).
  Task& scratch(DType dtype, size_t rows, size_t cols) {
    detail::task_add_scratch(node_or_throw("Task::scratch"), dtype, rows, cols);
    return *this;
  }
  /// The same as a rows x cols matrix of T (`ctx.arg<T>(i)` in the kernel).
  template <class T>
  Task& scratch(size_t rows, size_t cols) {
    return scratch(dtype_of_v<T>, rows, cols);
  }
  /// Higher runs earlier among ready tasks, where the policy honours priorities.
  Task& priority(int p);
  /// Runs only after `e` has finished (and fails if it failed).
  Task& after(const Event& e);
  /// Runs only on device `device` (an id from Runtime::devices()), whatever the policy prefers.
  Task& on(uint32_t device);
  /// Runs in scheduling context `ctx` (Runtime::context): only on its devices (those of Task::on
  /// among them), sharing device time as the context does. Throws Error(invalid_argument) for an
  /// empty handle or a context of another runtime. Without it: the default context.
  Task& in(const Context& ctx);
  /// Work items per dimension for source and binary kernels (OpenCL NDRange, CUDA threads).
  /// Default: one per element of the first buffer the task writes.
  Task& grid(uint64_t x, uint64_t y = 1, uint64_t z = 1);
  /// Work-group (OpenCL) or block (CUDA) size; default: the backend chooses.
  Task& block(uint32_t x, uint32_t y = 1, uint32_t z = 1);

  Task& arg(detail::BufferState* b, Access mode);
  /// Hands the task over (used by Runtime::submit).
  detail::TaskNode* release() noexcept;

 private:
  detail::TaskNode* node_or_throw(const char* what) const;
  detail::TaskNode* t_ = nullptr;
};

}  // namespace hcr
