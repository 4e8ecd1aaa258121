// The plugin loader. Modelled on the Khronos ICD loader's tolerance: each library that cannot be
// used is skipped with the file and the reason, and loading carries on. Search order: the
// configuration's directories, then HCR_PLUGIN_PATH, then the install's plugin directory; files
// named in HCR_PLUGIN_DISABLE are left alone.
#include "plugin_loader.hpp"

#include "config_check.hpp"
#include "elf_check.hpp"
#include "log_internal.hpp"

#include <boost/dll/runtime_symbol_info.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

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

// ---- trust ------------------------------------------------------------------------------------
//
// Loading a library runs its code in this process, so whoever can change what a path leads to can
// run code as this user. As OpenSSH's StrictModes and glibc's secure mode reason, a path is trusted
// when every directory from / down, every symbolic link on the way (each resolved) and the file
// itself are owned by root or this user (the effective uid) and writable by no one else. One
// exception, for /tmp-like directories: a directory writable by others but sticky (S_ISVTX) lets
// others add entries, never rename or remove ours, so it may lie on the way to an entry that root
// or this user owns; the directory searched and the library file may never be writable by others.

bool trusted_owner(uid_t uid) noexcept { return uid == 0 || uid == ::geteuid(); }

std::string writable_by(mode_t mode) {
  return (mode & S_IWOTH) ? "world-writable" : "group-writable";
}

// Empty when `path` (absolute) and everything leading to it are trusted and it is a directory
// (want_directory) or a regular file; otherwise why not, naming the offending path.
std::string untrusted(const fs::path& path, bool want_directory) {
  if (!path.is_absolute()) return "not an absolute path: refused";
  // Components still to walk, the next one last; resolved links push their targets' components.
  std::vector<std::string> todo;
  auto push = [&](const fs::path& p) {
    std::vector<std::string> parts;
    for (const fs::path& c : p.relative_path()) parts.push_back(c.string());
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  push(path);
  fs::path at = "/";
  struct stat st {};
  if (::lstat("/", &st) != 0) return "cannot examine /: " + std::string(std::strerror(errno));
  if (!trusted_owner(st.st_uid) || (st.st_mode & (S_IWGRP | S_IWOTH)))
    return "/ is not owned by root or not protected: refused";
  bool shared = false;  // `at` is writable by others (sticky): its entries' owners matter
  int links = 0;
  while (!todo.empty()) {
    const std::string name = todo.back();
    todo.pop_back();
    if (name.empty() || name == ".") continue;
    if (name == "..") {  // `at` is already resolved: its parent is the real one
      at = at.parent_path();
      shared = false;
      if (::lstat(at.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH))) shared = true;
      continue;
    }
    const fs::path next = at / name;
    if (::lstat(next.c_str(), &st) != 0)
      return "cannot examine " + next.string() + ": " + std::strerror(errno);
    if (S_ISLNK(st.st_mode)) {
      // Replaceable by whoever may write `at` (checked on the way here) and, in a sticky
      // directory, by the link's owner.
      if (shared && !trusted_owner(st.st_uid))
        return "symbolic link " + next.string() + " belongs to uid " + std::to_string(st.st_uid) +
               " in the shared directory " + at.string() + ": refused";
      if (++links > 40) return "too many symbolic links on the way to " + path.string();
      std::error_code ec;
      const fs::path target = fs::read_symlink(next, ec);
      if (ec) return "cannot read symbolic link " + next.string() + ": " + ec.message();
      if (target.is_absolute()) at = "/";
      push(target);
      continue;
    }
    const bool last = todo.empty();
    const bool directory = S_ISDIR(st.st_mode);
    const char* what = directory ? "directory" : "file";
    if (!trusted_owner(st.st_uid))
      return std::string(last ? "" : "on its path: ") + what + " " + next.string() +
             " belongs to uid " + std::to_string(st.st_uid) +
             " (neither root nor this user): refused";
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
      if (last) return writable_by(st.st_mode) + " " + what + ": refused";
      if (!directory || !(st.st_mode & S_ISVTX))
        return "on its path: " + writable_by(st.st_mode) + " " + what + " " + next.string() +
               ": refused";
      shared = true;
    } else {
      shared = false;
    }
    if (!last && !directory) return next.string() + " is not a directory";
    at = next;
    if (last) {
      if (want_directory && !directory) return "not a directory";
      if (!want_directory && !S_ISREG(st.st_mode)) return "not a regular file";
    }
  }
  return {};
}

// A library that was loaded has run code (static initialisers, its plugin) that may have started
// threads or left thread-local state and exit handlers (oneTBB, CUDA do all three): unloading it
// would leave those pointing into unmapped code, and a thread that ever called into it would
// crash at exit. Loaded libraries stay loaded until the process ends; plugin instances still end
// with their runtime.
void keep_loaded(const std::shared_ptr<LoadedLibrary>& lib) {
  static auto* kept = new std::vector<std::shared_ptr<LoadedLibrary>>();  // never destroyed
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (std::find(kept->begin(), kept->end(), lib) == kept->end()) kept->push_back(lib);
}

// Opens a library and checks its table. Null with record.reason set when it cannot be used.
std::shared_ptr<LoadedLibrary> open_library(const fs::path& file, PluginRecord& record) {
  if (std::string why = untrusted(file, false); !why.empty()) {
    record.reason = why;
    return nullptr;
  }
  if (std::string why = elf_problem(file); !why.empty()) {
    record.reason = "cannot load: " + why;
    return nullptr;
  }
  auto lib = std::make_shared<LoadedLibrary>();
  lib->path = file.string();
  // From here on the library's own code runs (its static initialisers, then its entry point):
  // said first, so that a library that crashes or hangs the process is named by the last line
  // logged. `hcr devices` reads these lines to name the culprit (tools/cmd_devices.cpp).
  HCR_LOG(info, "opening plugin library " << lib->path);
  try {
    lib->library.load(file, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    record.reason = std::string("cannot load: ") + e.what();
    return nullptr;
  }
  keep_loaded(lib);  // its static initialisers ran: see keep_loaded
  if (!lib->library.has(HCR_PLUGIN_ENTRY_SYMBOL)) {
    record.reason = "no entry symbol " HCR_PLUGIN_ENTRY_SYMBOL;
    return nullptr;
  }
  auto& get_api = lib->library.get<const hcr_plugin_api_t*()>(HCR_PLUGIN_ENTRY_SYMBOL);
  const hcr_plugin_api_t* api = get_api();
  if (api == nullptr) {
    record.reason = HCR_PLUGIN_ENTRY_SYMBOL " returned NULL";
    return nullptr;
  }
  // struct_size, abi_major and abi_minor keep their places in every major version.
  constexpr size_t kVersionFields = HCR_STRUCT_SIZE(hcr_plugin_api_t, abi_minor);
  if (api->struct_size < kVersionFields) {
    record.reason = "short table: " + std::to_string(api->struct_size) +
                    " bytes, too small to hold its version";
    return nullptr;
  }
  if (api->struct_size > (1u << 16)) {
    record.reason = "implausible table size: " + std::to_string(api->struct_size) + " bytes";
    return nullptr;
  }
  if (api->abi_major != HCR_ABI_MAJOR) {
    record.reason = "speaks plugin ABI " + std::to_string(api->abi_major) + "." +
                    std::to_string(api->abi_minor) + "; this runtime speaks " +
                    std::to_string(HCR_ABI_MAJOR) + "." + std::to_string(HCR_ABI_MINOR);
    return nullptr;
  }
  if (api->struct_size < HCR_PLUGIN_API_STRUCT_SIZE_1_0) {
    record.reason = "short table: " + std::to_string(api->struct_size) + " bytes, ABI " +
                    std::to_string(HCR_ABI_MAJOR) + ".0 needs " +
                    std::to_string(HCR_PLUGIN_API_STRUCT_SIZE_1_0);
    return nullptr;
  }
  if (api->name == nullptr || api->name[0] == '\0') {
    record.reason = "the table has no plugin name";
    return nullptr;
  }
  std::string name(api->name, strnlen(api->name, 65));
  if (name.size() > 64 || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      })) {
    record.reason = "implausible plugin name (letters, digits, '_', '-', '.'; at most 64)";
    return nullptr;
  }
  record.name = name;
  record.version = api->version ? std::string(api->version, strnlen(api->version, 64)) : "";
  const std::pair<const char*, const void*> required[] = {
      {"error_code", reinterpret_cast<const void*>(api->error_code)},
      {"error_message", reinterpret_cast<const void*>(api->error_message)},
      {"error_destroy", reinterpret_cast<const void*>(api->error_destroy)},
      {"plugin_create", reinterpret_cast<const void*>(api->plugin_create)},
      {"plugin_destroy", reinterpret_cast<const void*>(api->plugin_destroy)},
      {"device_count", reinterpret_cast<const void*>(api->device_count)},
      {"device_info", reinterpret_cast<const void*>(api->device_info)},
      {"kernel_get", reinterpret_cast<const void*>(api->kernel_get)},
      {"kernel_release", reinterpret_cast<const void*>(api->kernel_release)},
      {"launch", reinterpret_cast<const void*>(api->launch)},
      {"synchronize", reinterpret_cast<const void*>(api->synchronize)},
  };
  for (auto& [entry, fn] : required)
    if (fn == nullptr) {
      record.reason = std::string("required entry '") + entry + "' is NULL";
      return nullptr;
    }
  lib->api = api;
  lib->name = name;
  return lib;
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
  if (best == std::string::npos)
    return {table, "backend '" + bc.name + "': " + message};
  const std::string where =
      which < bc.option_origins.size() ? bc.option_origins[which] : table;
  return {where, "backend." + bc.options[which].first + ": " + message + " (plugin '" + bc.name +
                     "')"};
}

// Creates one instance of `lib` and reads its devices. Null with record.reason set on failure;
// `mistake` is set too when the plugin refused the table's options.
std::unique_ptr<PluginInstance> instantiate(const std::shared_ptr<LoadedLibrary>& lib,
                                            const BackendConfig& bc, PluginRecord& record,
                                            std::optional<detail::ConfigProblem>* mistake = nullptr) {
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

  std::vector<hcr_option_t> options;
  for (auto& [k, v] : bc.options)
    options.push_back({HCR_OPTION_STRUCT_SIZE, k.c_str(), v.c_str()});
  hcr_plugin_create_args_t a{};
  a.struct_size = HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE;
  a.services = &p->services;
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
    return nullptr;
  }
  if (a.plugin == nullptr) {
    record.reason = "init returned no instance" + where;
    return nullptr;
  }
  p->handle = a.plugin;

  size_t count = 0;
  HCR_LOG(debug, "plugin '" << lib->name << "' from " << lib->path << ": counting devices");
  if (hcr_error_t* err = lib->api->device_count(p->handle, &count)) {
    record.reason = "device_count failed: " + take_error(lib->api, err);
    return nullptr;
  }
  if (count > 4096) {
    record.reason = "implausible device count " + std::to_string(count);
    return nullptr;
  }
  for (size_t i = 0; i < count; ++i) {
    hcr_device_info_t info{};
    info.struct_size = HCR_DEVICE_INFO_STRUCT_SIZE;
    HCR_LOG(debug, "plugin '" << lib->name << "' from " << lib->path << ": describing device " << i);
    if (hcr_error_t* err = lib->api->device_info(p->handle, i, &info)) {
      HCR_LOG(warn, lib->path << ": device " << i << " skipped: " << take_error(lib->api, err));
      continue;
    }
    if (info.kind < HCR_DEVICE_CPU || info.kind > HCR_DEVICE_SIM) {
      HCR_LOG(warn, lib->path << ": device " << i << " skipped: unknown kind "
                              << static_cast<int>(info.kind));
      continue;
    }
    if (!(info.flags & HCR_DEVICE_HOST_MEMORY) &&
        (lib->api->mem_alloc == nullptr || lib->api->mem_free == nullptr ||
         lib->api->copy == nullptr)) {
      HCR_LOG(warn, lib->path << ": device " << i
                              << " skipped: it has its own memory but the plugin offers no "
                                 "mem_alloc/mem_free/copy");
      continue;
    }
    Device d;
    d.name = info.name ? std::string(info.name, strnlen(info.name, 256))
                       : lib->name + std::to_string(i);
    d.arch = info.arch ? std::string(info.arch, strnlen(info.arch, 256)) : d.name;
    d.backend = lib->name;
    d.kind = static_cast<DeviceKind>(info.kind);
    d.memory_bytes = info.memory_bytes;
    d.compute_units = info.compute_units;
    d.concurrency = info.concurrency == 0 ? 1 : std::min<uint32_t>(info.concurrency, 4096);
    d.peak_gflops = info.peak_gflops > 0 ? info.peak_gflops : 0;
    d.link_bandwidth = info.link_bandwidth > 0 ? info.link_bandwidth : 0;
    d.link_latency = info.link_latency > 0 ? info.link_latency : 0;
    p->devices.push_back({i, std::move(d), info.flags});
  }
  record.devices = p->devices.size();
  p->starting.store(false, std::memory_order_release);
  p->services.log_level = static_cast<hcr_log_level_t>(log::level());
  if (p->devices.empty()) {  // why not, in the plugin's own words (its last info line)
    std::lock_guard<std::mutex> g(p->notes_mutex);
    record.reason = p->notes.empty() ? "the plugin found no device (and said nothing of why)"
                                     : p->notes.back();
  }
  return p;
}

std::vector<fs::path> library_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  const std::string suffix = boost::dll::shared_library::suffix().string();
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (it->is_regular_file(ec) && p.extension() == suffix) files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

PluginInstance::~PluginInstance() {
  if (handle != nullptr) api->plugin_destroy(handle);
}

std::string take_error(const hcr_plugin_api_t* api, hcr_error_t* error) {
  if (error == nullptr) return {};
  const char* m = api->error_message(error);
  std::string text = m ? std::string(m, strnlen(m, 1 << 16)) : "(no message)";
  api->error_destroy(error);
  return text;
}

fs::path install_plugin_dir() {
  boost::dll::fs::error_code ec;
  fs::path self = boost::dll::this_line_location(ec);
  if (ec) return {};
  return self.parent_path() / "hcr" / "plugins";
}

std::vector<std::unique_ptr<PluginInstance>> load_plugins(const Config& config,
                                                          LoadReport& report) {
  std::vector<std::pair<std::string, std::string>> dirs;  // path, origin
  for (auto& p : config.plugin_paths) dirs.emplace_back(p, "config");
  if (config.use_environment)
    if (const char* env = std::getenv("HCR_PLUGIN_PATH"); env && *env) {
      std::stringstream ss(env);
      for (std::string item; std::getline(ss, item, ':');)
        if (!item.empty()) dirs.emplace_back(item, "HCR_PLUGIN_PATH");
    }
  dirs.emplace_back(install_plugin_dir().string(), "install");
  // HCR_PLUGIN_DISABLE: libraries never opened (full paths or file names, ':'-separated), as the
  // Vulkan loader's VK_LOADER_DRIVERS_DISABLE: the way around one that crashes or hangs the
  // process at start (`hcr devices` finds it and sets this for its own probes).
  std::vector<std::string> disabled;
  if (config.use_environment)
    if (const char* env = std::getenv("HCR_PLUGIN_DISABLE"); env && *env) {
      std::stringstream ss(env);
      for (std::string item; std::getline(ss, item, ':');)
        if (!item.empty()) disabled.push_back(item);
    }
  auto is_disabled = [&](const fs::path& file) {
    return std::any_of(disabled.begin(), disabled.end(), [&](const std::string& d) {
      return d == file.string() || d == file.filename().string();
    });
  };

  // With [[backend]] tables, a library whose file name says it is a plugin nobody asked for
  // (libhcr-<name>.so) is not opened at all: loading one costs milliseconds (its dependencies'
  // initialisers), PoCL's tens. Libraries named otherwise are opened to learn their name.
  std::set<std::string> wanted;
  for (const BackendConfig& bc : config.backends)
    if (bc.enabled) wanted.insert(bc.name);
  auto unwanted = [&](const fs::path& file) {
    if (config.backends.empty()) return false;
    const std::string stem = file.filename().string();
    const std::string prefix = "libhcr-";
    if (stem.rfind(prefix, 0) != 0) return false;
    const std::string name = stem.substr(prefix.size(), stem.find('.') - prefix.size());
    return !name.empty() && !wanted.count(name);
  };

  // Libraries in search order; the first of a name wins.
  std::vector<std::shared_ptr<LoadedLibrary>> libraries;
  std::map<std::string, size_t> record_of;  // library name -> index in report.plugins
  std::vector<size_t> unopened;             // report.plugins entries left unopened
  // Opens one library, its record going to report.plugins[slot] (a new entry when slot is the end).
  auto open = [&](const fs::path& file, PluginRecord rec, size_t slot) {
    auto lib = open_library(file, rec);
    if (lib && record_of.count(lib->name)) {
      rec.reason = "shadowed by " + report.plugins[record_of[lib->name]].path;
      lib.reset();
    }
    if (!lib) HCR_LOG(warn, "plugin " << rec.path << " skipped: " << rec.reason);
    else HCR_LOG(info, "plugin " << rec.path << ": found '" << lib->name << "' " << rec.version);
    if (lib) record_of[lib->name] = slot;
    if (slot == report.plugins.size()) report.plugins.push_back(std::move(rec));
    else report.plugins[slot] = std::move(rec);
    if (lib) libraries.push_back(std::move(lib));
  };
  std::vector<fs::path> seen_dirs;
  for (auto& [path, origin] : dirs) {
    LoadReport::Dir d{path, origin, false, {}};
    fs::path p(path);
    std::error_code ec;
    if (!p.is_absolute()) d.reason = "not an absolute path: refused";
    else if (!fs::exists(p, ec)) d.reason = "does not exist";
    else if (!fs::is_directory(p, ec)) d.reason = "not a directory";
    else if (std::string why = untrusted(p, true); !why.empty()) d.reason = why;
    else if (auto canon = fs::weakly_canonical(p, ec);
             std::find(seen_dirs.begin(), seen_dirs.end(), canon) != seen_dirs.end())
      d.reason = "listed earlier";
    else {
      d.used = true;
      seen_dirs.push_back(canon);
    }
    if (!d.reason.empty() && origin != "install")
      HCR_LOG(info, "plugin directory " << path << " (" << origin << "): " << d.reason);
    report.dirs.push_back(d);
    if (!d.used) continue;
    for (const fs::path& file : library_files(p)) {
      PluginRecord rec;
      rec.path = file.string();
      if (is_disabled(file)) {
        rec.reason = "disabled by HCR_PLUGIN_DISABLE (not opened)";
        HCR_LOG(info, "plugin " << rec.path << " skipped: " << rec.reason);
        report.plugins.push_back(std::move(rec));
        continue;
      }
      if (unwanted(file)) {
        rec.reason = "not named in the configuration (not opened)";
        unopened.push_back(report.plugins.size());
        report.plugins.push_back(std::move(rec));
        continue;
      }
      open(file, std::move(rec), report.plugins.size());
    }
  }
  // A plugin asked for but not found: perhaps a library was renamed. Open the others after all.
  bool missing = false;
  for (const std::string& name : wanted) missing = missing || !record_of.count(name);
  if (missing)
    for (size_t i : unopened) {
      const fs::path file = report.plugins[i].path;
      PluginRecord rec;
      rec.path = file.string();
      open(file, std::move(rec), i);
    }


  std::vector<std::unique_ptr<PluginInstance>> instances;
  // Mistakes in the [[backend]] tables: all of them are collected, then thrown as one Error.
  std::vector<detail::ConfigProblem> mistakes = detail::duplicate_tables(config.backends);
  DeviceBudget budget;  // what the runtime can take, over every instance
  auto create = [&](const std::shared_ptr<LoadedLibrary>& lib, const BackendConfig& bc,
                    bool first) {
    PluginRecord rec = report.plugins[record_of[lib->name]];
    rec.reason.clear();
    std::optional<detail::ConfigProblem> mistake;
    // A table of the configuration is the user's: options the plugin refuses are a mistake in it.
    // Loading every plugin with no options (no tables) has no table to blame.
    auto inst = instantiate(lib, bc, rec, config.backends.empty() ? nullptr : &mistake);
    if (mistake) mistakes.push_back(std::move(*mistake));
    if (inst) {
      // The first devices found are kept; the rest are left out, saying so.
      const size_t offered = inst->devices.size();
      const size_t keep = budget.take(*inst);
      if (keep < offered) {
        const std::string why = std::to_string(offered - keep) + " of its " +
                                std::to_string(offered) +
                                " device(s) left out: one runtime takes at most " +
                                std::to_string(kMaxDevices) + " devices, " +
                                std::to_string(DeviceBudget::kOwnMemory) +
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
    rec.status = inst ? PluginRecord::Status::loaded : PluginRecord::Status::skipped;
    if (inst) HCR_LOG(info, "plugin " << rec.path << ": loaded, " << rec.devices << " device(s)");
    else if (!mistake) HCR_LOG(warn, "plugin " << rec.path << " skipped: " << rec.reason);
    if (first) report.plugins[record_of[lib->name]] = rec;
    else report.plugins.push_back(rec);
    if (inst) instances.push_back(std::move(inst));
  };

  if (config.backends.empty()) {
    for (auto& lib : libraries) create(lib, BackendConfig{lib->name, true, {}, {}}, true);
    return instances;
  }

  // Why no library is plugin `name`. A mistake (a misspelt name) when every library was examined
  // and none is it; not one when a library that could be it was skipped before telling its name
  // (it cannot load here, it is disabled): its name is then no mistake, the machine lacks it. A
  // library named libhcr-<other>.so is taken to be plugin <other>, as its name says.
  auto why_missing = [&](const BackendConfig& bc, bool& mistake) {
    std::string maybe;
    for (const PluginRecord& r : report.plugins) {
      if (r.path.empty() || r.status == PluginRecord::Status::loaded) continue;
      const std::string file = fs::path(r.path).filename().string();
      const std::string prefix = "libhcr-";
      const bool hinted = file.rfind(prefix, 0) == 0;
      const std::string hint = hinted ? file.substr(prefix.size(), file.find('.') - prefix.size())
                                      : std::string();
      const bool could_be = r.name == bc.name || (r.name.empty() && (!hinted || hint == bc.name));
      if (could_be) maybe += (maybe.empty() ? "" : "; ") + r.path + ": " + r.reason;
    }
    mistake = maybe.empty();
    if (!mistake)
      return "no usable plugin named '" + bc.name + "' (backend table at " + bc.origin +
             "): perhaps " + maybe;
    std::string found, unsearched;
    for (auto& lib : libraries) found += (found.empty() ? "" : ", ") + lib->name;
    for (const LoadReport::Dir& d : report.dirs)
      if (!d.used && d.origin != "install" && d.reason != "listed earlier")
        unsearched += (unsearched.empty() ? "" : ", ") + d.path + " (" + d.reason + ")";
    return "no plugin named '" + bc.name + "' in the search path (found: " +
           (found.empty() ? "none" : found) + ")" +
           (unsearched.empty() ? "" : "; not searched: " + unsearched);
  };
  std::map<std::string, bool> used;
  for (const BackendConfig& bc : config.backends) {
    auto it = std::find_if(libraries.begin(), libraries.end(),
                           [&](auto& l) { return l->name == bc.name; });
    if (!bc.enabled || it == libraries.end()) {
      PluginRecord rec;
      rec.name = bc.name;
      bool mistake = false;
      rec.reason = !bc.enabled ? "disabled in the configuration (" + bc.origin + ")"
                               : why_missing(bc, mistake);
      if (mistake) mistakes.push_back({bc.origin, "backend.name: " + rec.reason});
      else HCR_LOG(warn, "backend '" << bc.name << "' skipped: " << rec.reason);
      report.plugins.push_back(std::move(rec));
      continue;
    }
    create(*it, bc, !used[bc.name]);
    used[bc.name] = true;
  }
  if (!mistakes.empty())
    throw Error(ErrorCode::config, detail::problems_text(std::move(mistakes)));
  for (auto& lib : libraries)
    if (!used[lib->name]) {
      auto& rec = report.plugins[record_of[lib->name]];
      rec.reason = "not named in the configuration";
    }
  return instances;
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
