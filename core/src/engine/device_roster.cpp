#include "device_roster.hpp"

#include "device_health.hpp"
#include "../data/data_manager.hpp"
#include "../kernel_registry.hpp"
#include "../kernel_state.hpp"
#include "../log_internal.hpp"
#include "../units.hpp"

#include <hcr/error.hpp>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

namespace hcr::detail {

void DeviceRoster::load_configured() {
  plugins_ = load_plugins(p_.config, report_);
  for (auto& p : plugins_) add_devices(*p);
  warn_if_oversubscribed();
}

// CPU devices run one task per slot on a core of their own: more slots than the process may use
// cores (several cpu tables, a threads option above the affinity mask) make workers take turns on
// a core, and every prediction of their speed wrong. Said once per runtime (and again when a
// plugged-in device raises the count).
void DeviceRoster::warn_if_oversubscribed() {
  uint32_t slots = 0, devices = 0;
  for (size_t d = 0; d < p_.devices.appended(); ++d)
    if (p_.devices[d].info.kind == DeviceKind::cpu) {
      slots += std::max<uint32_t>(1, p_.devices[d].info.concurrency);
      ++devices;
    }
  cpu_set_t set;
  CPU_ZERO(&set);
  const uint32_t cores = ::sched_getaffinity(0, sizeof(set), &set) == 0
                             ? static_cast<uint32_t>(CPU_COUNT(&set))
                             : std::max(1u, std::thread::hardware_concurrency());
  if (slots <= cores || slots <= oversubscribed_warned_) return;
  oversubscribed_warned_ = slots;
  HCR_LOG(warn, devices << " CPU device(s) run " << slots << " worker(s) on the " << cores
                        << " core(s) this process may use: workers take turns and run slower "
                           "than their model predicts (give the cpu backends threads that add up "
                           "to at most "
                        << cores << ")");
}

void DeviceRoster::add_devices(PluginInstance& p) {
  DeviceTable& devices = p_.devices;
  if (devices.appended() + p.devices.size() > kMaxDevices)
    throw Error(ErrorCode::config, "plugin '" + p.name + "': more than " +
                                       std::to_string(kMaxDevices) + " devices in one runtime");
  for (auto& rec : p.devices) {
    auto ds = std::make_unique<DeviceState>();
    DeviceState& d = *ds;
    d.info = rec.info;
    d.info.id = devices.appended();
    d.plugin = &p;
    d.attempts = &p_.attempts;
    d.index = rec.index;
    d.flags = rec.flags;
    // Keep every slot busy and, by default, one task queued behind each: a slot finishing a
    // task finds the next one in the plugin, its inputs already copied in.
    const uint32_t slots = std::max<uint32_t>(1, d.info.concurrency);
    const int lookahead = p_.config.lookahead;
    d.window = slots + (lookahead < 0 ? slots : static_cast<uint32_t>(lookahead));
    // Memory nodes: host-memory devices share node 0; every other device has its own, with the
    // limit its [[backend]] table sets (default 90% of what it reports).
    if (!(d.flags & HCR_DEVICE_HOST_MEMORY)) {
      MemoryLimit limit{true, 90};
      if (!p.memory_limit.empty()) {
        auto parsed = parse_memory_limit(p.memory_limit);
        if (!parsed)
          throw Error(ErrorCode::config, p.origin + ": backend '" + p.name + "': memory_limit '" +
                                             p.memory_limit + "' is not a size or a share");
        limit = *parsed;
      }
      uint64_t bytes = limit.apply(d.info.memory_bytes);
      if (d.info.memory_bytes > 0) bytes = std::min(bytes, d.info.memory_bytes);
      d.info.memory_node = p_.data.add_node({&p, d.index, d.info.id, d.info.name, bytes});
    }
    p_.joining(d, p);
    p_.health.joined(d.info.id);
    devices.append(std::move(ds), d.info.memory_node == 0 ? 0 : p_.data.limit(d.info.memory_node));
    p_.appended(d.info.id);  // hot-plug: before anyone sees it
    devices.publish();
  }
}

PluginRecord DeviceRoster::load_plugin(const std::string& path, const BackendConfig& backend) {
  p_.check_alive("load_plugin");
  if (!backend.enabled)
    throw Error(ErrorCode::invalid_argument,
                "load_plugin: '" + path + "' with a backend table that says enabled = false" +
                    (backend.origin.empty() ? std::string() : " (" + backend.origin + ")"));
  // Absolute only, as for search directories: a relative name would load whatever the working
  // directory (perhaps another user's, or a download folder) holds under that name. The loader
  // then checks the file and every directory leading to it (plugins/search.cpp, untrusted()).
  if (!std::filesystem::path(path).is_absolute())
    throw Error(ErrorCode::invalid_argument,
                "load_plugin: '" + path +
                    "' is not an absolute path (a relative name would be "
                    "looked up in the working directory): refused");
  std::error_code ec;
  const std::filesystem::path file = path;
  if (!std::filesystem::is_regular_file(file, ec))
    throw Error(ErrorCode::plugin, "load_plugin: '" + path + "' is not a file");
  DeviceTable& devices = p_.devices;
  std::vector<Ref<KernelState>> kernels;
  uint32_t first = 0, last = 0;
  PluginRecord rec;
  {
    std::lock_guard<std::mutex> g(mutex_);
    p_.check_alive("load_plugin");
    std::string mistake;
    // Instances with a device still there: one with the same options drives the same devices.
    std::vector<const PluginInstance*> live;
    for (size_t d = 0; d < devices.count(); ++d) {
      const uint8_t s = devices[d].status.load(std::memory_order_relaxed);
      if (s != DeviceState::kRemoved && s != DeviceState::kLost &&
          std::find(live.begin(), live.end(), devices[d].plugin) == live.end())
        live.push_back(devices[d].plugin);
    }
    std::unique_ptr<PluginInstance> inst = load_one(file, backend, rec, &mistake, live);
    if (inst) {
      DeviceBudget budget;
      for (size_t d = 0; d < devices.count(); ++d) {
        ++budget.devices;
        budget.own_memory += devices[d].info.memory_node != 0;
      }
      if (budget.take(*inst) < inst->devices.size()) {
        rec.status = PluginRecord::Status::skipped;
        rec.reason = "its " + std::to_string(inst->devices.size()) +
                     " device(s) do not fit: one runtime takes at most " +
                     std::to_string(kMaxDevices) + " devices, " +
                     std::to_string(DeviceBudget::kOwnMemory) +
                     " of them with their own memory, and has " + std::to_string(devices.count());
        rec.devices = 0;
        inst.reset();  // the plugin instance ends here; its library stays loaded, unused
      }
    }
    report_.plugins.push_back(rec);
    if (!mistake.empty())  // the table's fault, not the library's
      throw Error(ErrorCode::config, "load_plugin: '" + file.string() + "': " + mistake);
    if (!inst)
      throw Error(ErrorCode::plugin, "load_plugin: '" + file.string() + "' skipped: " + rec.reason);
    PluginInstance& p = *inst;
    plugins_.push_back(std::move(inst));
    first = devices.count();
    add_devices(p);
    last = devices.count();
    warn_if_oversubscribed();
    kernels = p_.kernels.all();
  }
  // Kernels known so far learn whether the new devices run them (the new devices' answers are
  // unknown until asked); then the new devices take work waiting in shared queues.
  for (auto& k : kernels) {
    {
      std::lock_guard<std::mutex> g(k->mutex);
      k->resolved.store(false, std::memory_order_release);
    }
    p_.kernels.resolve(*k);
  }
  for (uint32_t d = first; d < last; ++d) p_.feed(devices[d]);
  HCR_LOG(info, "plugin '" << rec.name << "' from " << file.string() << " joined with "
                           << (last - first) << " device(s)");
  return rec;
}

void DeviceRoster::remove_device(uint32_t id) {
  p_.check_alive("remove_device");
  std::lock_guard<std::mutex> g(mutex_);
  const uint32_t n = p_.devices.count();
  if (id >= n)
    throw Error(ErrorCode::invalid_argument, "remove_device: no device " + std::to_string(id) +
                                                 " (the runtime has " + std::to_string(n) + ")");
  DeviceState& d = p_.devices[id];
  // (already out: stays so)
  p_.health.retire(d, DeviceState::kRemoved, "removed by the application");
  // What it runs finishes there; a pump that saw it active just before may still hand it one.
  while (d.in_flight.load(std::memory_order_seq_cst) != 0 ||
         d.pumping.load(std::memory_order_seq_cst))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (d.info.memory_node != 0 && d.status.load() != DeviceState::kLost)
    p_.data.evacuate(d.info.memory_node, 60.0);
}

std::vector<Device> DeviceRoster::snapshot() const {
  std::lock_guard<std::mutex> g(mutex_);
  const auto& infos = p_.devices.infos();
  return std::vector<Device>(infos.begin(), infos.begin() + p_.devices.count());
}

LoadReport DeviceRoster::report() const {
  std::lock_guard<std::mutex> g(mutex_);
  return report_;
}

}  // namespace hcr::detail
