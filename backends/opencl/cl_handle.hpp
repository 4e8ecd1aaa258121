// Owning handles for OpenCL objects: one reference, released once. The plugin holds contexts,
// queues, programs, kernels, buffers and events through these so that every error path frees what
// it created.
#pragma once

#include "cl_api.hpp"

#include <utility>

namespace hcr::opencl {

template <class T, cl_int (*Retain)(T), cl_int (*Release)(T)>
class ClHandle {
 public:
  ClHandle() = default;
  /// Takes over one reference (what a clCreate* call returned).
  explicit ClHandle(T h) noexcept : h_(h) {}
  ClHandle(const ClHandle& o) noexcept : h_(o.h_) {
    if (h_ != nullptr) Retain(h_);
  }
  ClHandle(ClHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  ClHandle& operator=(ClHandle o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~ClHandle() { reset(); }

  void reset(T h = nullptr) noexcept {
    if (h_ != nullptr) Release(h_);
    h_ = h;
  }
  /// Gives up ownership without releasing.
  T release() noexcept { return std::exchange(h_, nullptr); }
  T get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  T h_ = nullptr;
};

using Context = ClHandle<cl_context, clRetainContext, clReleaseContext>;
using Queue = ClHandle<cl_command_queue, clRetainCommandQueue, clReleaseCommandQueue>;
using Program = ClHandle<cl_program, clRetainProgram, clReleaseProgram>;
using KernelHandle = ClHandle<cl_kernel, clRetainKernel, clReleaseKernel>;
using Mem = ClHandle<cl_mem, clRetainMemObject, clReleaseMemObject>;
using Event = ClHandle<cl_event, clRetainEvent, clReleaseEvent>;

}  // namespace hcr::opencl
