// Finds, loads and checks backend plugins (Boost.DLL), and creates their instances. A library that
// cannot be used is skipped with a diagnostic in the LoadReport; nothing here throws for a bad
// plugin. Mistakes in the configuration's [[backend]] tables (options a plugin refuses, a name no
// library has, two identical tables) are collected and thrown together as one Error(config).
#pragma once

#include <hcr/config.hpp>
#include <hcr/plugin.h>
#include <hcr/runtime.hpp>

#include <boost/dll/shared_library.hpp>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace hcr::detail {

/// A library that passed every check. Shared by its instances: it stays loaded while one lives.
struct LoadedLibrary {
  boost::dll::shared_library library;
  const hcr_plugin_api_t* api = nullptr;
  std::string path;
  std::string name;
};

/// One created plugin instance (one [[backend]] table) and the devices it reported.
struct PluginInstance {
  std::shared_ptr<LoadedLibrary> library;
  const hcr_plugin_api_t* api = nullptr;
  hcr_plugin_t* handle = nullptr;
  std::string name;
  std::string log_prefix;
  std::string memory_limit;                 // the [[backend]] table's, read by the runtime
  double idle_watts = -1, busy_watts = -1;  // the same: declared power, < 0 none
  std::string origin;                       // where that table is
  std::vector<std::pair<std::string, std::string>> options;  // the table's, sorted
  // While it starts (create, counting and describing its devices) the plugin is asked for its
  // info lines too, and the last few are kept: a plugin that finds no device says why at info
  // level, which the loader's record then carries whatever the log level.
  std::atomic<bool> starting{false};
  std::mutex notes_mutex;
  std::vector<std::string> notes;
  hcr_host_services_t services{};
  struct DeviceRecord {
    size_t index;  // the plugin's own device index
    Device info;
    uint32_t flags;
  };
  std::vector<DeviceRecord> devices;

  PluginInstance() = default;
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;
  ~PluginInstance();
};

/// The directory plugins are installed in, found from libhcr's own location.
std::filesystem::path install_plugin_dir();

/// Searches, loads and instantiates per `config`; fills `report`.
std::vector<std::unique_ptr<PluginInstance>> load_plugins(const Config& config, LoadReport& report);

/// The devices one runtime can take: kMaxDevices, of which kOwnMemory with memory of their own
/// (the data manager's nodes besides the host's).
struct DeviceBudget {
  static constexpr size_t kOwnMemory = 127;
  size_t devices = 0, own_memory = 0;
  /// How many of `p`'s devices, from the first, still fit; counts them as taken.
  size_t take(const PluginInstance& p) noexcept {
    size_t keep = 0;
    for (const auto& d : p.devices) {
      const bool own = !(d.flags & HCR_DEVICE_HOST_MEMORY);
      if (devices == kMaxDevices || (own && own_memory == kOwnMemory)) break;
      ++devices;
      own_memory += own;
      ++keep;
    }
    return keep;
  }
};

/// Loads one library file and instantiates it with `backend` (options) — hot-plug and tests.
/// When the plugin refuses the options (a mistake in the table, not a broken library), `mistake`
/// (if given) gets "where: backend.key: what". An instance in `loaded` of the same plugin with the
/// same options drives the same devices: the library is then not instantiated again, and
/// `mistake` says so (as the configuration's loader refuses two such tables).
std::unique_ptr<PluginInstance> load_one(const std::filesystem::path& file,
                                         const BackendConfig& backend, PluginRecord& record,
                                         std::string* mistake = nullptr,
                                         std::span<const PluginInstance* const> loaded = {});

/// Text of an ABI error, which is then freed through `api`.
std::string take_error(const hcr_plugin_api_t* api, hcr_error_t* error);

}  // namespace hcr::detail
