// The core's side of the scheduling interface: task views for policies and the policy registry.
#include "buffer_state.hpp"
#include "contexts/context_state.hpp"
#include "kernel_state.hpp"
#include "runtime_core.hpp"
#include "task_node.hpp"

#include <hcr/error.hpp>
#include <hcr/sched.hpp>

#include <algorithm>
#include <map>
#include <mutex>

namespace hcr::sched {

using detail::TaskNode;

std::string_view TaskRef::kernel_name() const noexcept {
  return n_->kernel ? std::string_view(n_->kernel->name) : std::string_view();
}
uint32_t TaskRef::kernel_id() const noexcept { return n_->kernel ? n_->kernel->id : 0; }
int TaskRef::priority() const noexcept { return n_->priority; }
int TaskRef::user_priority() const noexcept { return n_->user_priority; }
void TaskRef::set_priority(int p) const noexcept { n_->priority = p; }
uint64_t TaskRef::footprint() const noexcept {
  if (!n_->footprint_valid) detail::compute_footprint(n_);
  return n_->footprint;
}
double TaskRef::size() const noexcept {
  if (!n_->footprint_valid) detail::compute_footprint(n_);
  return n_->size;
}
uint64_t TaskRef::policy_data() const noexcept { return n_->policy_data; }
void TaskRef::set_policy_data(uint64_t v) const noexcept { n_->policy_data = v; }
uint64_t TaskRef::policy_aux() const noexcept {
  return n_->policy_aux.load(std::memory_order_relaxed);
}
void TaskRef::set_policy_aux(uint64_t v) const noexcept {
  n_->policy_aux.store(v, std::memory_order_relaxed);
}

// `args` is fixed before submission and given up only when the task finishes: a ready task's,
// and its unfinished successors', can be read from any thread.
size_t TaskRef::arg_count() const noexcept { return n_->args.size(); }
TaskArg TaskRef::arg(size_t i) const noexcept {
  const detail::ArgRec& a = n_->args[i];
  return {a.buffer, a.buffer->bytes(), a.access};
}
uint64_t TaskRef::output_bytes() const noexcept {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n_->args.size(); ++i) {
    const detail::ArgRec& a = n_->args[i];
    bool first = true;  // a buffer named twice counts once
    for (size_t j = 0; j < i && first; ++j) first = n_->args[j].buffer != a.buffer;
    if (first && writes(a.access)) bytes += a.buffer->bytes();
  }
  return bytes;
}
bool TaskRef::waited() const noexcept { return n_->waited; }

size_t TaskRef::successors(TaskRef* out, bool* data, size_t max) const noexcept {
  std::lock_guard<detail::SpinLock> g(n_->lock);
  const size_t n = n_->successors.size();
  for (size_t i = 0; i < n && i < max; ++i) {
    out[i] = TaskRef(n_->successors[i].task);
    data[i] = n_->successors[i].data;
  }
  return n;
}

bool TaskRef::can_run(DeviceId d) const noexcept {
  if (!n_->kernel || (n_->pinned >= 0 && static_cast<DeviceId>(n_->pinned) != d) ||
      !n_->kernel->can_run(d) || !n_->rt->usable(d) || !n_->rt->fits(n_, d) ||
      (n_->context != nullptr && !n_->context->has(d)))
    return false;
  for (uint32_t x : n_->excluded)  // devices that already failed it
    if (x == d) return false;
  return true;
}

bool TaskRef::can_run_anywhere() const noexcept {
  for (size_t d = 0, n = n_->rt->device_count(); d < n; ++d)
    if (can_run(static_cast<DeviceId>(d))) return true;
  return false;
}

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::string, PolicyFactory, std::less<>> factories;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

void register_policy(std::string name, PolicyFactory factory) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().factories[std::move(name)] = std::move(factory);
}

std::vector<std::string> policy_names() {
  std::lock_guard<std::mutex> lock(registry().mutex);
  std::vector<std::string> names;
  for (auto& [n, f] : registry().factories) names.push_back(n);
  return names;
}

std::unique_ptr<Policy> make_policy(std::string_view name, const Config& config) {
  PolicyFactory f;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    auto it = registry().factories.find(name);
    if (it != registry().factories.end()) f = it->second;
  }
  if (!f) {
    std::string known;
    for (auto& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::config,
                "unknown scheduler policy '" + std::string(name) + "' (known: " + known + ")");
  }
  auto p = f(config);
  if (!p) throw Error(ErrorCode::config, "policy '" + std::string(name) + "' could not be made");
  return p;
}

}  // namespace hcr::sched
