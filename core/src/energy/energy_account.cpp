// Energy per device and per task: meters read as tasks complete, declared power modelled from busy
// time, readings of coarse meters attributed over intervals.
#include "energy_account.hpp"

#include <algorithm>
#include <cstddef>
#include <mutex>

namespace hcr::detail {

namespace {
// The shortest interval a measured meter's reading is attributed over (tasks much shorter than a
// meter's update cannot be told apart within it).
constexpr double kMinInterval = 0.05;

// The table's device_energy entry, where its size reaches it (an ABI 1.0 plugin's does not).
auto energy_entry(const hcr_plugin_api_t* api) {
  using Fn = decltype(api->device_energy);
  if (api == nullptr || api->struct_size < offsetof(hcr_plugin_api_t, device_energy) + sizeof(Fn))
    return Fn{nullptr};
  return api->device_energy;
}
}  // namespace

struct EnergyAccount::State {
  SpinLock lock;
  DeviceInit init;
  uint8_t source = kNone;
  double origin = 0;       // steady-clock seconds when the device joined
  double base = 0;         // the meter's joules then
  double last_joules = 0;  // since origin, at the last reading
  double last_time = 0;
  double watts = -1, idle = -1;
  double resolution = 0;
  double busy = 0;  // declared: busy seconds so far (all slots)
  // A measured meter's interval: the tasks done in it, and its reading when it opened.
  struct Pending {
    uint32_t kernel;
    uint64_t footprint;
    double size, seconds;
  };
  std::vector<Pending> batch;
  double batch_joules = 0, batch_time = 0;
};

const char* EnergyAccount::source_name(uint8_t source) noexcept {
  switch (source) {
    case kMeasured: return "measured";
    case kModelled: return "modelled";
    case kDeclared: return "declared";
    default: return "none";
  }
}

EnergyAccount::EnergyAccount() : states_(new State[kMaxDevices]) {}
EnergyAccount::~EnergyAccount() = default;

void EnergyAccount::add_device(uint32_t id, const DeviceInit& init, double now) {
  if (id >= kMaxDevices) return;
  State& s = states_[id];
  std::lock_guard<SpinLock> g(s.lock);
  s.init = init;
  s.origin = s.last_time = s.batch_time = now;
  if (auto fn = energy_entry(init.api); fn != nullptr) {
    hcr_energy_reading_t r{};
    r.struct_size = HCR_ENERGY_READING_STRUCT_SIZE;
    if (hcr_error_t* err = fn(init.plugin, init.index, &r)) {
      init.api->error_destroy(err);
    } else if (r.source == HCR_ENERGY_MEASURED || r.source == HCR_ENERGY_MODELLED) {
      s.source = r.source == HCR_ENERGY_MEASURED ? kMeasured : kModelled;
      s.base = r.joules;
      s.idle = r.idle_watts;
      s.resolution = std::max(0.0, r.resolution);
    }
  }
  if (s.source == kNone && (init.idle_watts >= 0 || init.busy_watts >= 0)) {
    s.source = kDeclared;
    s.idle = std::max(0.0, init.idle_watts);
  }
  if (s.source == kNone) return;
  // A declared idle draw stands in for a meter that does not tell its own.
  if (s.idle < 0 && init.idle_watts >= 0) s.idle = init.idle_watts;
  active_.store(true, std::memory_order_release);
}

double EnergyAccount::meter(State& s, double now) {
  double joules = s.last_joules, watts = -1;
  if (s.source == kDeclared) {
    const double busy_watts = std::max(s.init.busy_watts, s.idle);
    joules = s.idle * (now - s.origin) +
             (busy_watts - s.idle) * s.busy / std::max<uint32_t>(1, s.init.slots);
  } else if (s.source != kNone) {
    hcr_energy_reading_t r{};
    r.struct_size = HCR_ENERGY_READING_STRUCT_SIZE;
    if (hcr_error_t* err = energy_entry(s.init.api)(s.init.plugin, s.init.index, &r)) {
      s.init.api->error_destroy(err);  // (a failed read: the last figures stand)
      return joules;
    }
    joules = std::max(s.last_joules, r.joules - s.base);  // never decreases
    watts = r.watts;
  }
  // The meter's own figure of the draw, else the mean since the last reading.
  if (watts >= 0) s.watts = watts;
  else if (now > s.last_time) s.watts = (joules - s.last_joules) / (now - s.last_time);
  s.last_joules = joules;
  s.last_time = now;
  if (record_.load(std::memory_order_relaxed)) {
    std::lock_guard<SpinLock> g(power_lock_);
    power_.push_back({static_cast<uint32_t>(&s - states_.get()), now, s.watts});
  }
  return joules;
}

void EnergyAccount::task_done(uint32_t d, uint32_t kernel, uint64_t footprint, double size,
                              double seconds, double joules, double now, std::vector<Sample>& out) {
  if (d >= kMaxDevices) return;
  State& s = states_[d];
  std::lock_guard<SpinLock> g(s.lock);
  if (s.source == kNone) return;
  if (s.source == kDeclared && seconds > 0) {
    s.busy += seconds;
    const double busy_watts = std::max(s.init.busy_watts, s.idle);
    out.push_back({kernel, footprint, size, d,
                   (busy_watts - s.idle) / std::max<uint32_t>(1, s.init.slots) * seconds});
    return;
  }
  if (joules >= 0) {  // the plugin knows the task's own
    out.push_back({kernel, footprint, size, d, joules});
    return;
  }
  if (!(seconds > 0)) return;
  s.batch.push_back({kernel, footprint, size, seconds});
  if (now - s.batch_time < std::max(kMinInterval, s.resolution)) return;
  // The interval closes: what the meter counted in it, less the idle draw, over its tasks.
  const double total = meter(s, now);
  double used = total - s.batch_joules;
  if (s.idle > 0) used -= s.idle * (now - s.batch_time);
  double busy = 0;
  for (const State::Pending& p : s.batch) busy += p.seconds;
  if (used > 0 && busy > 0)
    for (const State::Pending& p : s.batch)
      out.push_back({p.kernel, p.footprint, p.size, d, used * p.seconds / busy});
  s.batch.clear();
  s.batch_joules = total;
  s.batch_time = now;
}

EnergyAccount::Reading EnergyAccount::read(uint32_t d, double now) {
  Reading r;
  if (d >= kMaxDevices) return r;
  State& s = states_[d];
  std::lock_guard<SpinLock> g(s.lock);
  r.source = s.source;
  if (s.source == kNone) return r;
  r.joules = meter(s, now);
  r.watts = s.watts;
  r.idle_watts = s.idle;
  return r;
}

double EnergyAccount::idle_watts(uint32_t d) const noexcept {
  if (d >= kMaxDevices) return -1;
  State& s = states_[d];
  std::lock_guard<SpinLock> g(s.lock);
  return s.idle;
}

void EnergyAccount::record_power(bool on) {
  std::lock_guard<SpinLock> g(power_lock_);
  if (on) power_.clear();
  record_.store(on, std::memory_order_relaxed);
}

std::vector<EnergyAccount::PowerPoint> EnergyAccount::power() const {
  std::lock_guard<SpinLock> g(power_lock_);
  return power_;
}

}  // namespace hcr::detail
