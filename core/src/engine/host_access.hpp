// Host access: the views threads hold on buffers (Buffer::acquire) and the async accesses granted
// (Buffer::acquire_async), and the waits that would never end because of one.
//
// A thread that holds a view and then waits for something that waits for the view never returns:
// the checks here turn the cases that can be seen into errors. A view handed to another thread
// still counts as its acquiring thread's. Granted async accesses not yet released are listed (a
// reference each) so that the runtime's end can end them; after that, an access that becomes
// grantable fails with ErrorCode::shutdown instead of reaching its callback with data.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include "task_end.hpp"

#include <hcr/types.hpp>

#include <atomic>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace hcr::detail {

struct BufferState;
struct TaskNode;

class HostAccesses {
 public:
  /// `end` ends the access tasks (a view released, an async access ended).
  explicit HostAccesses(TaskEnd& end) : end_(end) {}
  HostAccesses(const HostAccesses&) = delete;
  HostAccesses& operator=(const HostAccesses&) = delete;

  // ---- views (Buffer::acquire) ----
  void view_granted(TaskNode* token);
  void view_released(TaskNode* token) noexcept;
  /// Throws when this thread holds a view that an acquire of `b` for `mode` would wait for.
  void check_view_conflict(const BufferState& b, Access mode) const;
  /// Throws when this thread holds any view (`what` would wait for its release).
  void check_no_view_held(std::string_view what) const;
  /// Whether this thread holds a view (a lock only when some view exists).
  bool holds_view() const noexcept;
  /// Throws when waiting for `target` on this thread would never end: it depends on a view this
  /// thread holds.
  void check_wait(const TaskNode* target) const;
  /// Runtime destruction: ends the views this thread still holds, with an error for each, so
  /// that the destructor's wait can end.
  void end_views_of_this_thread() noexcept;

  // ---- async accesses (Buffer::acquire_async) ----
  /// The access's data is home: calls its callback with the data (or fails the access).
  void grant_async(TaskNode* t) noexcept;
  /// Ends a granted access (granted 1 -> 2) with `e`; nothing when it has ended already.
  void end_async(TaskNode* t, std::exception_ptr e) noexcept;
  /// The holder released `t`: it leaves the list of open accesses.
  void async_released(TaskNode* t) noexcept;
  /// Runtime destruction: ends every granted access (an error logged for each) and makes later
  /// grants fail, so that the destructor's wait can end.
  void end_async_accesses() noexcept;

 private:
  TaskEnd& end_;
  mutable std::mutex views_mutex_;
  std::vector<std::pair<TaskNode*, std::thread::id>> views_;  // borrowed: the HostView holds a ref
  std::atomic<size_t> views_held_{0};  // views_.size(), read without the lock by check_wait
  std::mutex async_mutex_;
  std::vector<TaskNode*> async_open_;  // granted, not released (references held)
  bool async_closing_ = false;
};

}  // namespace hcr::detail
