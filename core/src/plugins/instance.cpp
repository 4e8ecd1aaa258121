// The plugin instance: creating one per [[backend]] table (its options, its host services), reading
// and checking its devices, keeping them within the runtime's budget, ending it; load_plugins and
// load_one put search, library and instance together.
#include "loader_steps.hpp"

#include "../log_internal.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace fs = std::filesystem;

namespace hcr::detail {

namespace {

void host_log(void* host_context, hcr_log_level_t level, const char* message) {
  auto* p = static_cast<PluginInstance*>(host_context);
  if (message == nullptr) return;
  if (p->starting.load(std::memory_order_acquire) && level >= HCR_LOG_INFO) {
    std::lock_guard<std::mutex> g(p->notes_mutex);
    if (p->notes.size() == 8) p->notes.erase(p->notes.begin());
    p->notes.emplace_back(message, strnlen(message, 1024));
  }
  log::write(static_cast<LogLevel>(level), p->log_prefix + message);
}

// A plugin's refusal of its options (HCR_ERROR_INVALID_ARGUMENT from plugin_create: the ABI's
// "bad option"), placed at the key it names in quotes ('threads'; the first one the message
// names) and that key's line, else at the table.
detail::ConfigProblem option_problem(const BackendConfig& bc, const std::string& message) {
  size_t best = std::string::npos, which = 0;
  for (size_t i = 0; i < bc.options.size(); ++i) {
    const size_t at = message.find("'" + bc.options[i].first + "'");
    if (at < best || (at == best && at != std::string::npos &&
                      bc.options[i].first.size() > bc.options[which].first.size())) {
      best = at;
      which = i;
    }
  }
  const std::string table = bc.origin.empty() ? "backend '" + bc.name + "'" : bc.origin;
  if (best == std::string::npos) return {table, "backend '" + bc.name + "': " + message};
  const std::string where = which < bc.option_origins.size() ? bc.option_origins[which] : table;
  return {where,
          "backend." + bc.options[which].first + ": " + message + " (plugin '" + bc.name + "')"};
}

// A new instance of `lib` for table `bc`, not yet created in the plugin.
std::unique_ptr<PluginInstance> new_instance(const std::shared_ptr<LoadedLibrary>& lib,
                                             const BackendConfig& bc) {
  auto p = std::make_unique<PluginInstance>();
  p->library = lib;
  p->api = lib->api;
  p->name = lib->name;
  p->log_prefix = "[" + lib->name + "] ";
  p->memory_limit = bc.memory_limit;
  p->idle_watts = bc.idle_watts;
  p->busy_watts = bc.busy_watts;
  p->origin = bc.origin;
  p->options = bc.options;
  std::sort(p->options.begin(), p->options.end());
  p->services.struct_size = HCR_HOST_SERVICES_STRUCT_SIZE;
  p->services.abi_major = HCR_ABI_MAJOR;
  p->services.abi_minor = HCR_ABI_MINOR;
  p->services.host_context = p.get();
  p->services.log = &host_log;
  p->services.log_level =
      static_cast<hcr_log_level_t>(std::min(static_cast<int>(log::level()), int{HCR_LOG_INFO}));
  p->starting.store(true, std::memory_order_release);
  return p;
}

// Has the plugin create `inst` with the table's options. False with record.reason set on failure.
bool create_in_plugin(PluginInstance& inst, const BackendConfig& bc, PluginRecord& record,
                      std::optional<ConfigProblem>* mistake) {
  const std::shared_ptr<LoadedLibrary>& lib = inst.library;
  std::vector<hcr_option_t> options;
  for (auto& [k, v] : bc.options) options.push_back({HCR_OPTION_STRUCT_SIZE, k.c_str(), v.c_str()});
  hcr_plugin_create_args_t a{};
  a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
  a.services = &inst.services;
  a.options = options.data();
  a.num_options = options.size();
  a.library_path = lib->path.c_str();
  std::string where = bc.origin.empty() ? "" : " (backend table at " + bc.origin + ")";
  HCR_LOG(info, "initialising plugin '" << lib->name << "' from " << lib->path);
  if (hcr_error_t* err = lib->api->plugin_create(&a)) {
    const bool refused = lib->api->error_code(err) == HCR_ERROR_INVALID_ARGUMENT;
    const std::string message = take_error(lib->api, err);
    record.reason = "init failed: " + message + where;
    if (refused && mistake != nullptr) *mistake = option_problem(bc, message);
    return false;
  }
  if (a.plugin == nullptr) {
    record.reason = "init returned no instance" + where;
    return false;
  }
  inst.handle = a.plugin;
  return true;
}

// The record of device `i` as `info` describes it; none when it cannot be used (said at warn).
std::optional<PluginInstance::DeviceRecord> device_record(const LoadedLibrary& lib, size_t i,
                                                          const hcr_device_info_t& info) {
  if (info.kind < HCR_DEVICE_CPU || info.kind > HCR_DEVICE_SIM) {
    HCR_LOG(warn, lib.path << ": device " << i << " skipped: unknown kind "
                           << static_cast<int>(info.kind));
    return std::nullopt;
  }
  if (!(info.flags & HCR_DEVICE_HOST_MEMORY) &&
      (lib.api->mem_alloc == nullptr || lib.api->mem_free == nullptr || lib.api->copy == nullptr)) {
    HCR_LOG(warn, lib.path << ": device " << i
                           << " skipped: it has its own memory but the plugin offers no "
                              "mem_alloc/mem_free/copy");
    return std::nullopt;
  }
  Device d;
  d.name =
      info.name ? std::string(info.name, strnlen(info.name, 256)) : lib.name + std::to_string(i);
  d.arch = info.arch ? std::string(info.arch, strnlen(info.arch, 256)) : d.name;
  d.backend = lib.name;
  d.kind = static_cast<DeviceKind>(info.kind);
  d.memory_bytes = info.memory_bytes;
  d.compute_units = info.compute_units;
  d.concurrency = info.concurrency == 0 ? 1 : std::min<uint32_t>(info.concurrency, 4096);
  d.peak_gflops = info.peak_gflops > 0 ? info.peak_gflops : 0;
  d.link_bandwidth = info.link_bandwidth > 0 ? info.link_bandwidth : 0;
  d.link_latency = info.link_latency > 0 ? info.link_latency : 0;
  return PluginInstance::DeviceRecord{i, std::move(d), info.flags};
}

// Counts and describes the plugin's devices. False with record.reason set when they cannot be read.
bool read_devices(PluginInstance& inst, PluginRecord& record) {
  const std::shared_ptr<LoadedLibrary>& lib = inst.library;
  size_t count = 0;
  HCR_LOG(debug, "plugin '" << lib->name << "' from " << lib->path << ": counting devices");
  if (hcr_error_t* err = lib->api->device_count(inst.handle, &count)) {
    record.reason = "device_count failed: " + take_error(lib->api, err);
    return false;
  }
  if (count > 4096) {
    record.reason = "implausible device count " + std::to_string(count);
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    hcr_device_info_t info{};
    info.struct_size = HCR_DEVICE_INFO_STRUCT_SIZE;
    HCR_LOG(debug,
            "plugin '" << lib->name << "' from " << lib->path << ": describing device " << i);
    if (hcr_error_t* err = lib->api->device_info(inst.handle, i, &info)) {
      HCR_LOG(warn, lib->path << ": device " << i << " skipped: " << take_error(lib->api, err));
      continue;
    }
    if (auto d = device_record(*lib, i, info)) inst.devices.push_back(std::move(*d));
  }
  return true;
}

}  // namespace

// Creates one instance of `lib` and reads its devices. Null with record.reason set on failure;
// `mistake` is set too when the plugin refused the table's options.
std::unique_ptr<PluginInstance> instantiate(const std::shared_ptr<LoadedLibrary>& lib,
                                            const BackendConfig& bc, PluginRecord& record,
                                            std::optional<ConfigProblem>* mistake) {
  auto p = new_instance(lib, bc);
  if (!create_in_plugin(*p, bc, record, mistake)) return nullptr;
  if (!read_devices(*p, record)) return nullptr;
  record.devices = p->devices.size();
  p->starting.store(false, std::memory_order_release);
  p->services.log_level = static_cast<hcr_log_level_t>(log::level());
  if (p->devices.empty()) {  // why not, in the plugin's own words (its last info line)
    std::lock_guard<std::mutex> g(p->notes_mutex);
    record.reason =
        p->notes.empty() ? "the plugin found no device (and said nothing of why)" : p->notes.back();
  }
  return p;
}

PluginInstance::~PluginInstance() {
  if (handle != nullptr) api->plugin_destroy(handle);
}

namespace {

// Instantiates the libraries found for the configuration's [[backend]] tables (or each library
// once, with no options, when there are none), filling the report's records.
class Instantiation {
 public:
  Instantiation(const Config& config, LoadReport& report, FoundLibraries found)
      : config_(config),
        report_(report),
        libraries_(std::move(found.libraries)),
        record_of_(std::move(found.record_of)),
        mistakes_(duplicate_tables(config.backends)) {}

  // Every library found, once, with no options.
  void create_each() {
    for (auto& lib : libraries_) create(lib, BackendConfig{lib->name, true, {}, {}}, true);
  }

  // One instance per [[backend]] table; the mistakes in the tables are thrown together.
  void create_tables() {
    std::map<std::string, bool> used;
    for (const BackendConfig& bc : config_.backends) {
      auto it = std::find_if(libraries_.begin(), libraries_.end(),
                             [&](auto& l) { return l->name == bc.name; });
      if (!bc.enabled || it == libraries_.end()) {
        skip_table(bc);
        continue;
      }
      create(*it, bc, !used[bc.name]);
      used[bc.name] = true;
    }
    if (!mistakes_.empty()) throw Error(ErrorCode::config, problems_text(std::move(mistakes_)));
    for (auto& lib : libraries_)
      if (!used[lib->name]) {
        auto& rec = report_.plugins[record_of_[lib->name]];
        rec.reason = "not named in the configuration";
      }
  }

  std::vector<std::unique_ptr<PluginInstance>> take() { return std::move(instances_); }

 private:
  void create(const std::shared_ptr<LoadedLibrary>& lib, const BackendConfig& bc, bool first) {
    PluginRecord rec = report_.plugins[record_of_[lib->name]];
    rec.reason.clear();
    std::optional<ConfigProblem> mistake;
    // A table of the configuration is the user's: options the plugin refuses are a mistake in it.
    // Loading every plugin with no options (no tables) has no table to blame.
    auto inst = instantiate(lib, bc, rec, config_.backends.empty() ? nullptr : &mistake);
    if (mistake) mistakes_.push_back(std::move(*mistake));
    if (inst) keep_within_budget(inst, rec);
    rec.status = inst ? PluginRecord::Status::loaded : PluginRecord::Status::skipped;
    if (inst) HCR_LOG(info, "plugin " << rec.path << ": loaded, " << rec.devices << " device(s)");
    else if (!mistake) HCR_LOG(warn, "plugin " << rec.path << " skipped: " << rec.reason);
    if (first) report_.plugins[record_of_[lib->name]] = rec;
    else report_.plugins.push_back(rec);
    if (inst) instances_.push_back(std::move(inst));
  }

  // The first devices found are kept; the rest are left out, saying so.
  void keep_within_budget(std::unique_ptr<PluginInstance>& inst, PluginRecord& rec) {
    const size_t offered = inst->devices.size();
    const size_t keep = budget_.take(*inst);
    if (keep < offered) {
      const std::string why =
          std::to_string(offered - keep) + " of its " + std::to_string(offered) +
          " device(s) left out: one runtime takes at most " + std::to_string(kMaxDevices) +
          " devices, " + std::to_string(DeviceBudget::kOwnMemory) +
          " of them with their own memory";
      rec.devices = keep;
      if (keep == 0) {  // nothing of it would be used: skipped, its instance ended
        rec.reason = why;
        inst.reset();
      } else {
        HCR_LOG(warn, "plugin " << rec.path << ": " << why);
        inst->devices.resize(keep);
      }
    }
  }

  // A table whose plugin is disabled or missing: a mistake, or a warning (see why_missing).
  void skip_table(const BackendConfig& bc) {
    PluginRecord rec;
    rec.name = bc.name;
    bool mistake = false;
    rec.reason = !bc.enabled ? "disabled in the configuration (" + bc.origin + ")"
                             : why_missing(bc, mistake);
    if (mistake) mistakes_.push_back({bc.origin, "backend.name: " + rec.reason});
    else HCR_LOG(warn, "backend '" << bc.name << "' skipped: " << rec.reason);
    report_.plugins.push_back(std::move(rec));
  }

  // Why no library is plugin `name`. A mistake (a misspelt name) when every library was examined
  // and none is it; not one when a library that could be it was skipped before telling its name
  // (it cannot load here, it is disabled): its name is then no mistake, the machine lacks it. A
  // library named libhcr-<other>.so is taken to be plugin <other>, as its name says.
  std::string why_missing(const BackendConfig& bc, bool& mistake) const {
    std::string maybe;
    for (const PluginRecord& r : report_.plugins) {
      if (r.path.empty() || r.status == PluginRecord::Status::loaded) continue;
      const std::string file = fs::path(r.path).filename().string();
      const std::string prefix = "libhcr-";
      const bool hinted = file.rfind(prefix, 0) == 0;
      const std::string hint =
          hinted ? file.substr(prefix.size(), file.find('.') - prefix.size()) : std::string();
      const bool could_be = r.name == bc.name || (r.name.empty() && (!hinted || hint == bc.name));
      if (could_be) maybe += (maybe.empty() ? "" : "; ") + r.path + ": " + r.reason;
    }
    mistake = maybe.empty();
    if (!mistake)
      return "no usable plugin named '" + bc.name + "' (backend table at " + bc.origin +
             "): perhaps " + maybe;
    std::string found, unsearched;
    for (auto& lib : libraries_) found += (found.empty() ? "" : ", ") + lib->name;
    for (const LoadReport::Dir& d : report_.dirs)
      if (!d.used && d.origin != "install" && d.reason != "listed earlier")
        unsearched += (unsearched.empty() ? "" : ", ") + d.path + " (" + d.reason + ")";
    return "no plugin named '" + bc.name +
           "' in the search path (found: " + (found.empty() ? "none" : found) + ")" +
           (unsearched.empty() ? "" : "; not searched: " + unsearched);
  }

  const Config& config_;
  LoadReport& report_;
  std::vector<std::shared_ptr<LoadedLibrary>> libraries_;
  std::map<std::string, size_t> record_of_;
  // Mistakes in the [[backend]] tables: all of them are collected, then thrown as one Error.
  std::vector<ConfigProblem> mistakes_;
  DeviceBudget budget_;  // what the runtime can take, over every instance
  std::vector<std::unique_ptr<PluginInstance>> instances_;
};

}  // namespace

std::vector<std::unique_ptr<PluginInstance>> load_plugins(const Config& config,
                                                          LoadReport& report) {
  Instantiation instantiation(config, report, find_libraries(config, report));
  if (config.backends.empty()) instantiation.create_each();
  else instantiation.create_tables();
  return instantiation.take();
}

std::unique_ptr<PluginInstance> load_one(const fs::path& file, const BackendConfig& backend,
                                         PluginRecord& record, std::string* mistake,
                                         std::span<const PluginInstance* const> loaded) {
  record.path = file.string();
  auto lib = open_library(file, record);
  if (!lib) return nullptr;
  if (!backend.name.empty() && backend.name != lib->name) {
    record.reason = "the library is plugin '" + lib->name + "', not '" + backend.name + "'";
    return nullptr;
  }
  auto options = backend.options;
  std::sort(options.begin(), options.end());
  for (const PluginInstance* other : loaded)
    if (other != nullptr && other->name == lib->name && other->options == options) {
      record.name = lib->name;
      record.reason = "plugin '" + lib->name + "' is loaded already with the same options" +
                      (other->origin.empty() ? std::string() : " (" + other->origin + ")") +
                      ": a second instance would drive the same devices twice (give it options "
                      "that select other devices)";
      if (mistake != nullptr) *mistake = record.reason;
      return nullptr;
    }
  std::optional<detail::ConfigProblem> refused;
  auto inst = instantiate(lib, backend, record, &refused);
  if (refused && mistake != nullptr) *mistake = refused->where + ": " + refused->text;
  record.status = inst ? PluginRecord::Status::loaded : PluginRecord::Status::skipped;
  return inst;
}

}  // namespace hcr::detail
