/// \file kernel.hpp
/// Kernels — named operations with one implementation per backend — and what a CPU
/// implementation sees when it runs.
///
/// \code
/// hcr::Kernel scale = rt.kernel("scale").cpu([](hcr::TaskContext& ctx) {
///   auto x = ctx.arg<float>(0);                 // the task's first buffer
///   float a = ctx.param<float>(0);              // its first scalar parameter
///   for (size_t r = 0; r < x.rows; ++r)
///     for (size_t c = 0; c < x.cols; ++c) x(r, c) *= a;
/// });
/// rt.submit(hcr::Task(scale).read_write(x).param(2.0f));
/// \endcode
///
/// Built-in kernels ("gemm_f32", "gemm_f64") come from the plugins: rt.kernel("gemm_f32") needs no
/// implementation. Thread safety: adding implementations is safe at any time; a device that could
/// not run the kernel is asked again after an implementation is added.
#pragma once

#include <hcr/detail/handles.hpp>
#include <hcr/error.hpp>
#include <hcr/plugin.h>
#include <hcr/types.hpp>

#include <cstddef>
#include <cstring>
#include <functional>
#include <span>
#include <string>

namespace hcr {

/// A row-major matrix view: element (r, c) is data[r * ld + c]. Vectors are 1 x n.
template <class T>
struct MatrixView {
  T* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;
  size_t ld = 0;

  T& operator()(size_t r, size_t c) const noexcept { return data[r * ld + c]; }
  size_t size() const noexcept { return rows * cols; }
  bool contiguous() const noexcept { return rows <= 1 || ld == cols; }
  /// The elements as one span; only for contiguous views.
  std::span<T> span() const {
    if (!contiguous())
      throw Error(ErrorCode::invalid_argument,
                  "span() of a " + std::to_string(rows) + "x" + std::to_string(cols) +
                      " view with leading dimension " + std::to_string(ld) +
                      ": its rows are not contiguous");
    return {data, size()};
  }
};

namespace detail {
// Scalar parameter `index` of `task`, or of `ctx` without one (a device graph's node).
HCR_API const void* task_param(const TaskNode* task, const hcr_exec_context_t* ctx, size_t index,
                               size_t size);
[[noreturn]] HCR_API void bad_arg_type(size_t index, DType have, DType want);
[[noreturn]] HCR_API void bad_arg_index(size_t index, size_t count);
}  // namespace detail

/// What a CPU implementation receives: its task's buffers (as host views) and scalar parameters.
class TaskContext {
 public:
  TaskContext(const hcr_exec_context_t* ctx, const detail::TaskNode* task) noexcept
      : ctx_(ctx), task_(task) {}

  size_t num_args() const noexcept { return ctx_->num_args; }
  /// Buffer argument `i` as a typed view; throws Error if T is not its element type.
  template <class T>
  MatrixView<T> arg(size_t i) const {
    if (i >= ctx_->num_args) detail::bad_arg_index(i, ctx_->num_args);
    const hcr_arg_t& a = ctx_->args[i];
    if (static_cast<DType>(a.dtype) != dtype_of_v<T> && dtype_of_v<T> != DType::bytes)
      detail::bad_arg_type(i, static_cast<DType>(a.dtype), dtype_of_v<T>);
    return {static_cast<T*>(a.host), a.rows, a.cols, a.ld};
  }
  /// Scalar parameter `i`, in the order Task::param() added them, read as a T. Its bytes are
  /// copied unconverted: T must be the type it was given as (its size is checked; a double read
  /// as a float throws Error(invalid_argument) rather than giving its low half).
  template <class T>
  T param(size_t i) const {
    T v;
    std::memcpy(&v, detail::task_param(task_, ctx_, i, sizeof(T)), sizeof(T));
    return v;
  }
  /// Which of the device's concurrent slots runs this task.
  uint32_t worker() const noexcept { return ctx_->worker; }
  /// The runtime's id of the device running this task.
  size_t device_index() const noexcept { return ctx_->device; }
  const hcr_exec_context_t& raw() const noexcept { return *ctx_; }

 private:
  const hcr_exec_context_t* ctx_;
  const detail::TaskNode* task_;
};

using CpuFunction = std::function<void(TaskContext&)>;

/// Handle to a kernel of one runtime. Cheap to copy.
class HCR_API Kernel {
 public:
  Kernel() = default;
  explicit Kernel(detail::Ref<detail::KernelState> s) : s_(std::move(s)) {}

  const std::string& name() const;
  bool valid() const noexcept { return static_cast<bool>(s_); }

  /// A host implementation: runs on CPU workers and on simulated devices, with host pointers.
  /// An exception it throws fails the task and reaches the task's Event unchanged.
  Kernel& cpu(CpuFunction fn);
  /// A native launcher for backend `api` ("cuda", ...): called on a host thread with the
  /// backend's queue in ctx->native_queue and device pointers in the arguments.
  Kernel& native(std::string api, hcr_kernel_fn fn, void* user_data);
  /// Source code the backend named `api` compiles ("opencl": OpenCL C, "cuda": CUDA C++).
  Kernel& source(std::string api, std::string text, std::string build_options = {},
                 std::string entry = {});
  /// A prebuilt binary for backend `api` (an OpenCL program binary, an FPGA bitstream).
  Kernel& binary(std::string api, std::string path, std::string build_options = {},
                 std::string entry = {});

  detail::KernelState* state() const noexcept { return s_.get(); }

 private:
  detail::Ref<detail::KernelState> s_;
};

}  // namespace hcr
