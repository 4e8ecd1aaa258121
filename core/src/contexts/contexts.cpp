// Contexts (contexts.hpp), and the Context handle. The arbitration itself is context_policy.cpp.
#include "contexts.hpp"

#include "context_policy.hpp"

#include "../data/data_manager.hpp"
#include "../engine/device_table.hpp"
#include "../engine/placement.hpp"
#include "../log_internal.hpp"
#include "../task_node.hpp"
#include "../units.hpp"

#include <hcr/error.hpp>
#include <hcr/runtime.hpp>

#include <algorithm>
#include <bit>
#include <cmath>

namespace hcr::detail {

namespace {

// The bits of `devices` (empty: all of the first `count`); throws naming an id out of range.
void device_bits(const std::vector<uint32_t>& devices, uint32_t count, const std::string& what,
                 uint64_t out[2]) {
  out[0] = out[1] = 0;
  if (devices.empty()) {
    for (uint32_t d = 0; d < count; ++d) out[d / 64] |= uint64_t{1} << (d % 64);
    return;
  }
  for (uint32_t d : devices) {
    if (d >= count)
      throw Error(ErrorCode::invalid_argument,
                  what + ": device " + std::to_string(d) + " does not exist (the runtime has " +
                      std::to_string(count) + (count == 1 ? " device)" : " devices)"));
    out[d / 64] |= uint64_t{1} << (d % 64);
  }
}

}  // namespace

hcr::Context Contexts::make(const ContextSpec& spec) {
  p_.check_alive("Runtime::context");
  const std::string what = "Runtime::context('" + spec.name + "')";
  if (spec.name.empty())
    throw Error(ErrorCode::invalid_argument, "Runtime::context: a context needs a name");
  if (!(spec.weight > 0) || !std::isfinite(spec.weight))
    throw Error(ErrorCode::invalid_argument,
                what + ": weight " + std::to_string(spec.weight) + " is not a positive number");
  std::lock_guard<std::mutex> g(p_.device_set);
  if (spec.name == "default")
    throw Error(ErrorCode::invalid_argument,
                what + ": 'default' names the context of tasks submitted without one");
  for (const auto& c : all_)
    if (c->name == spec.name)
      throw Error(ErrorCode::invalid_argument, what + ": a context of that name exists already");
  if (all_.size() >= ContextPolicy::kMaxContexts)
    throw Error(ErrorCode::invalid_argument, what + ": a runtime holds at most " +
                                                 std::to_string(ContextPolicy::kMaxContexts - 1) +
                                                 " contexts");
  uint64_t bits[2];
  device_bits(spec.devices, p_.devices.count(), what, bits);

  auto c = std::make_shared<ContextState>();
  c->owner = p_.self;
  c->rt = p_.rt;
  c->home = this;
  c->name = spec.name;
  c->weight = spec.weight;
  c->priority = spec.priority;
  if (spec.memory_quota && *spec.memory_quota == 0)
    throw Error(ErrorCode::invalid_argument, what + ": a memory_quota of 0 bytes");
  c->memory_quota = spec.memory_quota.value_or(0);
  c->all_devices = spec.devices.empty();
  {
    const uint32_t own =
        spec.devices.empty()
            ? p_.devices.count()
            : static_cast<uint32_t>(std::popcount(bits[0]) + std::popcount(bits[1]));
    if (spec.reserve > own)
      throw Error(ErrorCode::invalid_argument, what + ": reserve " + std::to_string(spec.reserve) +
                                                   " is more than its " + std::to_string(own) +
                                                   " device(s)");
  }
  c->reserve = spec.reserve;
  c->bits[0].store(bits[0], std::memory_order_relaxed);
  c->bits[1].store(bits[1], std::memory_order_relaxed);
  auto policy = sched::make_policy(p_.policy_name, p_.config);
  policy->attach(p_.view);

  if (policy_ == nullptr) {
    // The first context: the policy in use becomes the default context's, behind a ContextPolicy.
    // Tasks it holds stay with it; device time is measured from now on (what contexts share).
    auto def = std::make_shared<ContextState>();
    def->owner = p_.self;
    def->rt = p_.rt;
    def->home = this;
    def->name = "default";
    def->all_devices = true;
    device_bits({}, p_.devices.count(), what, bits);
    def->bits[0].store(bits[0], std::memory_order_relaxed);
    def->bits[1].store(bits[1], std::memory_order_relaxed);
    auto composite = std::make_unique<ContextPolicy>(std::move(p_.policy_owner), *def, p_.view);
    composite->set_pump([this](sched::DeviceId d) { p_.feed(d); });
    policy_ = composite.get();
    p_.policy_owner = std::move(composite);
    {
      std::lock_guard<std::mutex> l(mutex_);
      all_.push_back(def);
    }
    default_ = std::move(def);
    p_.measure();
    p_.placement.set_policy(policy_);
  }
  c->index = static_cast<uint32_t>(all_.size());
  policy_->add(*c, std::move(policy));
  {
    std::lock_guard<std::mutex> l(mutex_);
    all_.push_back(c);
  }
  HCR_LOG(info, "context '" << c->name << "' created: weight " << c->weight << ", priority "
                            << c->priority << ", "
                            << (c->all_devices ? std::string("every device")
                                               : std::to_string(std::popcount(bits[0]) +
                                                                std::popcount(bits[1])) +
                                                     " device(s)"));
  return hcr::Context(std::move(c));
}

hcr::Context Contexts::make(const ContextConfig& table) {
  ContextSpec spec;
  spec.name = table.name;
  spec.weight = table.weight;
  spec.priority = table.priority;
  spec.memory_quota = table.memory_quota;
  spec.reserve = table.reserve;
  const std::string where =
      (table.origin.empty() ? p_.config.origin : table.origin) + ": context '" + table.name + "'";
  for (const std::string& name : table.devices) {
    // An id, or a device's name.
    bool found = false;
    for (uint32_t d = 0, n = p_.devices.count(); d < n && !found; ++d)
      if (p_.devices[d].info.name == name || std::to_string(d) == name) {
        spec.devices.push_back(d);
        found = true;
      }
    if (!found) {
      std::string known;
      for (uint32_t d = 0, n = p_.devices.count(); d < n; ++d)
        known += (d ? ", " : "") + std::to_string(d) + " '" + p_.devices[d].info.name + "'";
      throw Error(ErrorCode::config, where + ": devices: no device '" + name + "' (the devices: " +
                                         (known.empty() ? "none" : known) + ")");
    }
  }
  try {
    return make(spec);
  } catch (const Error& e) {
    throw Error(ErrorCode::config, where + ": " + e.what());
  }
}

void Contexts::set_devices(ContextState& c, const std::vector<uint32_t>& devices) {
  p_.check_alive("Context::set_devices('" + c.name + "')");
  std::vector<TaskNode*> again;
  uint64_t gained[2] = {0, 0};
  {
    std::lock_guard<std::mutex> g(p_.device_set);
    p_.check_alive("Context::set_devices");
    uint64_t bits[2];
    device_bits(devices, p_.devices.count(), "Context::set_devices('" + c.name + "')", bits);
    uint64_t lost[2];
    for (int w = 0; w < 2; ++w) {
      const uint64_t old = c.bits[w].load(std::memory_order_relaxed);
      lost[w] = old & ~bits[w];
      gained[w] = bits[w] & ~old;
      c.bits[w].store(bits[w], std::memory_order_seq_cst);
    }
    c.all_devices = devices.empty();
    // The mask first, then the drain: a policy asked for a lost device from now on finds nothing
    // of this context's it may run there; what it had queued for it comes back here. When it
    // gains devices, what it queued for its other devices comes back too, to be spread over
    // the new set (a policy of per-device queues would otherwise leave the new ones idle).
    const bool grows = (gained[0] | gained[1]) != 0;
    for (uint32_t d = 0, n = p_.devices.count(); d < n; ++d)
      if (((lost[d / 64] | (grows ? bits[d / 64] : 0)) >> (d % 64)) & 1u)
        for (sched::TaskRef t : policy_->drain_context(c.index, d)) again.push_back(t.node());
  }
  for (TaskNode* t : again) p_.place_again(t);
  for (uint32_t d = 0, n = p_.devices.count(); d < n; ++d)
    if ((gained[d / 64] >> (d % 64)) & 1u) p_.feed(d);
}

hcr::Context Contexts::find(std::string_view name) const {
  std::lock_guard<std::mutex> g(mutex_);
  std::string known;
  for (size_t i = 1; i < all_.size(); ++i) {  // (the default context has no handle)
    if (all_[i]->name == name) return hcr::Context(all_[i]);
    known += (known.empty() ? "" : ", ") + all_[i]->name;
  }
  throw Error(ErrorCode::invalid_argument,
              "Runtime::find_context: no context '" + std::string(name) +
                  "' (the contexts: " + (known.empty() ? "none" : known) + ")");
}

void Contexts::stats(RuntimeStats& s) const {
  std::lock_guard<std::mutex> g(mutex_);
  for (const auto& c : all_) {
    ContextStats x;
    x.name = c->name;
    x.weight = c->weight;
    x.priority = c->priority;
    x.memory_quota = c->memory_quota;
    x.reserve = c->reserve;
    x.tasks = c->tasks.load(std::memory_order_relaxed);
    x.failed = c->failed.load(std::memory_order_relaxed);
    x.wait_seconds = static_cast<double>(c->wait_ns.load(std::memory_order_relaxed)) * 1e-9;
    x.queued = static_cast<uint64_t>(policy_->queued(c->index));
    for (uint32_t d = 0, n = p_.devices.count(); d < n; ++d) {
      if (c->has(d)) x.devices.push_back(d);
      const double sec = static_cast<double>(c->busy_ns[d].load(std::memory_order_relaxed)) * 1e-9;
      x.device_seconds.push_back(sec);
      x.busy_seconds += sec;
      const uint32_t node = p_.devices[d].info.memory_node;
      x.memory_bytes.push_back(node == 0 ? 0 : p_.data.context_bytes(node, c->index));
    }
    s.contexts.push_back(std::move(x));
  }
}

std::vector<std::string> Contexts::names() const {
  std::vector<std::string> names;  // by index; the default context's name stays empty
  std::lock_guard<std::mutex> g(mutex_);
  for (const auto& c : all_) names.push_back(c->index == 0 ? std::string() : c->name);
  return names;
}

void Contexts::stop() noexcept {
  if (policy_ != nullptr) policy_->stop();
}

}  // namespace hcr::detail

namespace hcr {

namespace {
detail::ContextState& state_or_throw(detail::ContextState* s, const char* what) {
  if (s == nullptr)
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": an empty Context handle");
  return *s;
}
}  // namespace

const std::string& Context::name() const { return state_or_throw(s_.get(), "Context::name").name; }
double Context::weight() const { return state_or_throw(s_.get(), "Context::weight").weight; }
int Context::priority() const { return state_or_throw(s_.get(), "Context::priority").priority; }

std::vector<uint32_t> Context::devices() const {
  const detail::ContextState& c = state_or_throw(s_.get(), "Context::devices");
  std::vector<uint32_t> out;
  for (uint32_t d = 0; d < kMaxDevices; ++d)
    if (c.has(d)) out.push_back(d);
  return out;
}

void Context::set_devices(std::vector<uint32_t> devices) {
  detail::ContextState& c = state_or_throw(s_.get(), "Context::set_devices");
  std::shared_ptr<detail::RuntimeCore> rt = c.owner.lock();  // alive while this call runs
  if (!rt || c.home == nullptr)
    throw Error(ErrorCode::shutdown,
                "Context::set_devices('" + c.name + "'): the runtime has ended");
  c.home->set_devices(c, devices);
}

}  // namespace hcr
