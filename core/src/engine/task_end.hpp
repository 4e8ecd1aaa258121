// The narrow way a part of the engine ends a task: it hands it to completion, which settles its
// successors. Parts that end tasks of their own (host access, the data manager's write-through)
// see this, not the whole engine.
#pragma once

#include <exception>
#include <string>

namespace hcr::detail {

struct TaskNode;

class TaskEnd {
 public:
  /// Ends `t` (success when `error` is null): its successors are released, waiters woken.
  virtual void finish(TaskNode* t, std::exception_ptr error) noexcept = 0;

 protected:
  ~TaskEnd() = default;
};

/// The message of any exception_ptr.
std::string what(const std::exception_ptr& e);

}  // namespace hcr::detail
