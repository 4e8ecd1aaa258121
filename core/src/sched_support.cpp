// The core's side of the scheduling interface: task views for policies and the policy registry.
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

bool TaskRef::can_run(DeviceId d) const noexcept {
  if (!n_->kernel || (n_->pinned >= 0 && static_cast<DeviceId>(n_->pinned) != d) ||
      !n_->kernel->can_run(d) || !n_->rt->usable(d) || !n_->rt->fits(n_, d))
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
