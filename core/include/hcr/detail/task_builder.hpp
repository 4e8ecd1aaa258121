/// \file task_builder.hpp
/// The builder calls a task shares with every layer that builds tasks its own way (hcr::Task;
/// hcr::mpi::Task, which keeps its arguments inline): typed buffer arguments and scalar
/// parameters, written once over the two calls each task type defines. Not an API.
#pragma once

#include <hcr/buffer.hpp>
#include <hcr/types.hpp>

#include <cstddef>
#include <type_traits>

namespace hcr::detail {

/// `Derived` defines `arg(BufferState*, Access)` and `param_bytes(data, size, align)`, each
/// returning `Derived&`, and brings `arg` in with `using TaskBuilder<Derived>::arg`.
template <class Derived>
class TaskBuilder {
 public:
  template <class T>
  Derived& read(const Buffer<T>& b) {
    return self().arg(b.state(), Access::read);
  }
  template <class T>
  Derived& write(const Buffer<T>& b) {
    return self().arg(b.state(), Access::write);
  }
  template <class T>
  Derived& read_write(const Buffer<T>& b) {
    return self().arg(b.state(), Access::read_write);
  }
  /// Updates `b` in place, in any order among the tasks next to it that commute on it too
  /// (Access::commute): they run one at a time, whichever is ready first.
  template <class T>
  Derived& commute(const Buffer<T>& b) {
    return self().arg(b.state(), Access::commute);
  }
  /// Contributes to `b` through its declared reduction (Access::reduce, Buffer::set_reduction):
  /// the kernel sees a private copy holding the identity, to update in place (`acc += x`).
  template <class T>
  Derived& reduce(const Buffer<T>& b) {
    return self().arg(b.state(), Access::reduce);
  }
  template <class T>
  Derived& arg(const Buffer<T>& b, Access mode) {
    return self().arg(b.state(), mode);
  }
  /// Appends a scalar parameter (any trivially copyable value); kernels read them in order.
  template <class T>
  Derived& param(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "parameters are copied bytewise");
    return self().param_bytes(&value, sizeof(T), alignof(T));
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace hcr::detail
