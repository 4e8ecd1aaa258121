/// \file event.hpp
/// Events: the completion of a submitted task, carrying its error.
#pragma once

#include <hcr/detail/handles.hpp>
#include <hcr/export.hpp>

#include <exception>

namespace hcr {

namespace detail {
HCR_API bool task_done(const TaskNode* t) noexcept;
HCR_API void task_wait(const TaskNode* t);
HCR_API std::exception_ptr task_error(const TaskNode* t) noexcept;
HCR_API int task_device(const TaskNode* t) noexcept;
}  // namespace detail

/// Completion of one submitted task (or of an operation made of tasks, such as blas::gemm).
/// Cheap to copy. Thread-safe. An empty (default-constructed) Event stands for work already done:
/// ready() is true, wait() and get() return at once, and Task::after() ignores it.
class Event {
 public:
  Event() = default;
  explicit Event(detail::Ref<detail::TaskNode> t) : t_(std::move(t)) {}

  bool valid() const noexcept { return static_cast<bool>(t_); }
  /// True once the task has finished, successfully or not.
  bool ready() const noexcept { return !t_ || detail::task_done(t_.get()); }
  /// Blocks until the task has finished. Throws Error (invalid_argument) instead when it never
  /// would: the task depends on a host view (Buffer::acquire) this thread holds.
  void wait() const {
    if (t_) detail::task_wait(t_.get());
  }
  /// Waits, then rethrows the task's error (the kernel's own exception for CPU kernels).
  void get() const {
    wait();
    if (auto e = error()) std::rethrow_exception(e);
  }
  /// The task's error once it has finished; null on success or while running.
  std::exception_ptr error() const noexcept { return t_ ? detail::task_error(t_.get()) : nullptr; }
  /// Id of the device that ran it; -1 before it ran or for tasks that run nowhere (joins).
  int device() const noexcept { return t_ ? detail::task_device(t_.get()) : -1; }

  detail::TaskNode* node() const noexcept { return t_.get(); }

 private:
  detail::Ref<detail::TaskNode> t_;
};

}  // namespace hcr
