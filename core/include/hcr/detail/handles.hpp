// Internal: reference-counted handles to the runtime's private objects. Not part of the API.
#pragma once

#include <hcr/export.hpp>

#include <utility>

namespace hcr::detail {

struct TaskNode;
struct BufferState;
struct KernelState;
class RuntimeCore;

HCR_API void retain(TaskNode* p) noexcept;
HCR_API void release(TaskNode* p) noexcept;
HCR_API void retain(BufferState* p) noexcept;
HCR_API void release(BufferState* p) noexcept;
HCR_API void retain(KernelState* p) noexcept;
HCR_API void release(KernelState* p) noexcept;

/// Intrusive strong reference.
template <class T>
class Ref {
 public:
  Ref() noexcept = default;
  /// Adopts a reference the caller already holds.
  static Ref adopt(T* p) noexcept {
    Ref r;
    r.p_ = p;
    return r;
  }
  /// Takes a new reference.
  static Ref share(T* p) noexcept {
    if (p) retain(p);
    return adopt(p);
  }
  Ref(const Ref& o) noexcept : p_(o.p_) {
    if (p_) retain(p_);
  }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref& operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~Ref() {
    if (p_) release(p_);
  }
  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  T* detach() noexcept { return std::exchange(p_, nullptr); }
  friend bool operator==(const Ref& a, const Ref& b) noexcept { return a.p_ == b.p_; }

 private:
  T* p_ = nullptr;
};

}  // namespace hcr::detail
