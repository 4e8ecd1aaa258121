// Gathering a plan's window: a walk over successors from the tasks that wait, bounded.
#include "window_input.hpp"

#include <algorithm>
#include <memory>

namespace hcr::sched {

int64_t WindowInput::add(TaskRef x, int32_t device) {
  auto [it, added] = index_.emplace(x.node(), static_cast<uint32_t>(window_.size()));
  if (!added) return it->second;
  if (window_.size() >= max_tasks_) {
    index_.erase(it);
    return -1;
  }
  window_.push_back(x);
  fixed_.push_back(device);
  return it->second;
}

std::vector<TaskRef>& WindowInput::successors_of(TaskRef t) {
  const size_t n = t.successors(nullptr, nullptr, 0);
  found_.resize(n);
  std::unique_ptr<bool[]> data(new bool[n + 1]);
  found_.resize(std::min(n, t.successors(found_.data(), data.get(), n)));
  return found_;
}

void WindowInput::add_successors(TaskRef t) {
  for (TaskRef x : successors_of(t)) add(x, -1);
}

void WindowInput::add_running(TaskRef t, uint32_t node, double ready) {
  for (size_t a = 0, na = t.arg_count(); a < na; ++a)
    if (const TaskArg arg = t.arg(a); writes(arg.access)) results_[arg.buffer] = {node, ready};
  add_successors(t);
}

void WindowInput::close() {
  for (size_t i = 0; i < window_.size(); ++i) {  // (the window grows as it is walked)
    succ_.emplace_back();
    for (TaskRef x : successors_of(window_[i]))
      if (const int64_t j = add(x, -1); j >= 0) succ_[i].push_back(static_cast<uint32_t>(j));
  }
}

void WindowInput::fill(PlanInput& in, const Context& ctx,
                       const std::function<void(TaskRef, std::vector<double>&)>& exec) {
  std::unordered_map<const void*, uint32_t> buffers;
  in.tasks.resize(window_.size());
  for (size_t i = 0; i < window_.size(); ++i) {
    const TaskRef w = window_[i];
    PlanTask& pt = in.tasks[i];
    pt.successors = std::move(succ_[i]);
    pt.fixed = fixed_[i];
    exec(w, pt.exec);
    for (size_t a = 0, na = w.arg_count(); a < na; ++a) {
      const TaskArg arg = w.arg(a);
      auto [it, added] = buffers.emplace(arg.buffer, static_cast<uint32_t>(in.buffers.size()));
      if (added) {
        PlanBuffer& b = in.buffers.emplace_back();
        b.bytes = arg.bytes;
        uint64_t arriving[2];
        ctx.locate(arg.buffer, b.valid, arriving);
        b.valid[0] |= arriving[0];
        b.valid[1] |= arriving[1];
        if (auto r = results_.find(arg.buffer); r != results_.end()) {
          b.written = true;
          b.writer_node = r->second.node;
          b.ready = r->second.ready;  // (halfway through, on average)
        }
      }
      auto use = std::find_if(pt.uses.begin(), pt.uses.end(),
                              [&](const PlanTask::Use& u) { return u.buffer == it->second; });
      if (use == pt.uses.end()) use = pt.uses.insert(pt.uses.end(), {it->second, false, false});
      use->reads |= reads(arg.access);
      use->writes |= writes(arg.access);
    }
  }
}

}  // namespace hcr::sched
