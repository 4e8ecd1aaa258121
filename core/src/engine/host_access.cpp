// Host access (host_access.hpp): views threads hold and async accesses granted.
#include "host_access.hpp"

#include "halo_reads.hpp"
#include "../buffer_state.hpp"
#include "../kernel_state.hpp"
#include "../log_internal.hpp"
#include "../task_node.hpp"

#include <hcr/error.hpp>

#include <boost/container/small_vector.hpp>

#include <string>
#include <unordered_set>

namespace hcr::detail {

namespace {
bool is_tile_of(const BufferState* tile, const BufferState* whole) noexcept {
  for (const BufferState* p = tile->parent.get(); p != nullptr; p = p->parent.get())
    if (p == whole) return true;
  return false;
}
}  // namespace

void HostAccesses::view_granted(TaskNode* token) {
  std::lock_guard<std::mutex> g(views_mutex_);
  views_.emplace_back(token, std::this_thread::get_id());
  views_held_.store(views_.size(), std::memory_order_relaxed);
}

void HostAccesses::view_released(TaskNode* token) noexcept {
  std::lock_guard<std::mutex> g(views_mutex_);
  for (size_t i = 0; i < views_.size(); ++i)
    if (views_[i].first == token) {
      views_[i] = views_.back();
      views_.pop_back();
      views_held_.store(views_.size(), std::memory_order_relaxed);
      return;
    }
}

void HostAccesses::check_view_conflict(const BufferState& b, Access mode) const {
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> g(views_mutex_);
  for (auto& [token, holder] : views_) {
    if (holder != me) continue;  // another thread's view: it will be released there
    const ArgRec& held = token->args[0];
    std::string why;
    if (held.buffer == &b) {
      if (writes(mode) || writes(held.access))  // two reads share; anything else waits
        why = "this thread holds a " + std::string(access_name(held.access)) + " view of it";
    } else if (ordered_through_ghosts(*held.buffer, held.access, b, mode)) {
      why = "this thread holds a " + std::string(access_name(held.access)) +
            " view of the neighbouring " + describe(*held.buffer) + ", and " +
            (reads(mode) && writes(held.access) ? "this view's ghosts read its edge"
                                                : "its ghosts read this tile's edge");
    } else if (is_tile_of(&b, held.buffer) || is_tile_of(held.buffer, &b)) {
      // Partition and unpartition order tiles and the whole by a join that writes both.
      why = "this thread holds a " + std::string(access_name(held.access)) + " view of the " +
            describe(*held.buffer) +
            (is_tile_of(&b, held.buffer) ? ", which it is a tile of" : ", one of its tiles");
    }
    if (!why.empty())
      throw Error(ErrorCode::invalid_argument,
                  "acquire(" + std::string(access_name(mode)) + ") of a " + describe(b) +
                      " would wait forever: " + why + "; release that view first");
  }
}

void HostAccesses::check_wait(const TaskNode* target) const {
  // No view anywhere: nothing to look at. A view this thread acquired is counted here already (it
  // was registered on this thread before acquire returned).
  if (views_held_.load(std::memory_order_relaxed) == 0) return;
  const std::thread::id me = std::this_thread::get_id();
  std::vector<TaskNode*> mine;
  {
    std::lock_guard<std::mutex> g(views_mutex_);
    for (auto& [token, holder] : views_)
      if (holder == me) mine.push_back(token);
  }
  // Everything reachable from a view this thread holds through successor edges waits for that
  // view, so it stays pending (and alive) while this thread looks; a walk too large to finish
  // quickly is given up (the wait then simply waits).
  constexpr size_t kMaxWalk = 100000;
  for (TaskNode* view : mine) {
    std::vector<TaskNode*> stack{view};
    std::unordered_set<const TaskNode*> seen{view};
    while (!stack.empty() && seen.size() < kMaxWalk) {
      TaskNode* n = stack.back();
      stack.pop_back();
      boost::container::small_vector<Edge, 8> next;
      n->lock.lock();
      next.assign(n->successors.begin(), n->successors.end());
      n->lock.unlock();
      for (const Edge& e : next) {
        if (e.task == target) {
          // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) about one long sum.
          std::string msg = "Event::wait would wait forever: the ";
          if (target->kernel) {
            msg += "task of kernel '";
            msg += target->kernel->name;
            msg += "'";
          } else {
            msg += "operation";
          }
          msg += " depends on the ";
          msg += access_name(view->args[0].access);
          msg += " view of a ";
          msg += describe(*view->args[0].buffer);
          msg += " this thread holds (Buffer::acquire); release that view first";
          throw Error(ErrorCode::invalid_argument, msg);
        }
        if (seen.insert(e.task).second) stack.push_back(e.task);
      }
    }
  }
}

void HostAccesses::check_no_view_held(std::string_view what) const {
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> g(views_mutex_);
  for (auto& [token, holder] : views_)
    if (holder == me)
      throw Error(ErrorCode::invalid_argument,
                  std::string(what) + " would wait forever: this thread holds a " +
                      access_name(token->args[0].access) + " view of a " +
                      describe(*token->args[0].buffer) +
                      " (Buffer::acquire), which counts as unfinished work until released");
}

void HostAccesses::end_views_of_this_thread() noexcept {
  const std::thread::id me = std::this_thread::get_id();
  std::vector<TaskNode*> mine;
  {
    std::lock_guard<std::mutex> g(views_mutex_);
    for (size_t i = 0; i < views_.size();)
      if (views_[i].second == me) {
        retain(views_[i].first);
        mine.push_back(views_[i].first);
        views_[i] = views_.back();
        views_.pop_back();
        views_held_.store(views_.size(), std::memory_order_relaxed);
      } else {
        ++i;
      }
  }
  for (TaskNode* t : mine) {
    HCR_LOG(error, "the runtime ends while this thread holds a "
                       << access_name(t->args[0].access) << " view of a "
                       << describe(*t->args[0].buffer)
                       << " (Buffer::acquire): the view is released now, tasks waiting for it run; "
                          "release views before the runtime ends");
    // Whoever moves `granted` from 1 ends the access: the HostView's own release later only
    // drops its reference.
    if (t->granted.exchange(2, std::memory_order_acq_rel) == 1) end_.finish(t, nullptr);
    release(t);
  }
}

void HostAccesses::grant_async(TaskNode* t) noexcept {
  retain(t);  // the token the callback gets
  bool open = false;
  {
    std::lock_guard<std::mutex> g(async_mutex_);
    if (!async_closing_) {
      retain(t);  // the list's
      async_open_.push_back(t);
      t->granted.store(1, std::memory_order_release);
      open = true;
    }
  }
  if (!open) {
    release(t);
    // finish() hands the callback this error (the access was never granted).
    end_.finish(t, std::make_exception_ptr(Error(
                       ErrorCode::shutdown, "acquire_async of a " + describe(*t->args[0].buffer) +
                                                ": the runtime ended before it was granted")));
    return;
  }
  retain(t);  // ours across the call: the callback may release the token at once
  try {
    t->grant_fn(t->grant_user, t->view->host, t, nullptr);
  } catch (...) {
    HCR_LOG(error, "an acquire_async callback threw; the callback must not throw");
    end_async(t, std::current_exception());  // nothing if it was released while unwinding
  }
  release(t);
}

void HostAccesses::end_async(TaskNode* t, std::exception_ptr e) noexcept {
  if (t->granted.exchange(2, std::memory_order_acq_rel) == 1) end_.finish(t, std::move(e));
}

void HostAccesses::async_released(TaskNode* t) noexcept {
  bool listed = false;
  {
    std::lock_guard<std::mutex> g(async_mutex_);
    for (size_t i = 0; i < async_open_.size(); ++i)
      if (async_open_[i] == t) {
        async_open_[i] = async_open_.back();
        async_open_.pop_back();
        listed = true;
        break;
      }
  }
  if (listed) release(t);
}

void HostAccesses::end_async_accesses() noexcept {
  std::vector<TaskNode*> open;
  {
    std::lock_guard<std::mutex> g(async_mutex_);
    async_closing_ = true;
    open.swap(async_open_);
  }
  for (TaskNode* t : open) {
    HCR_LOG(error, "the runtime ends while an acquire_async access ("
                       << access_name(t->args[0].access) << ") of a "
                       << describe(*t->args[0].buffer)
                       << " is unreleased: it is ended now, tasks waiting for it run; release "
                          "async accesses before the runtime ends");
    end_async(t, nullptr);  // the holder's release later only drops its reference
    release(t);
  }
}

bool HostAccesses::holds_view() const noexcept {
  if (views_held_.load(std::memory_order_relaxed) == 0) return false;
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> g(views_mutex_);
  for (auto& [token, holder] : views_)
    if (holder == me) return true;
  return false;
}

}  // namespace hcr::detail
