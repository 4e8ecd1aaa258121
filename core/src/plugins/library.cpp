// The plugin library: opening one file (Boost.DLL), its entry symbol, and the checks of the table
// it returns (size, ABI version, name, required entries). Libraries stay loaded once opened.
#include "elf_check.hpp"
#include "loader_steps.hpp"

#include "../log_internal.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <mutex>

namespace fs = std::filesystem;

namespace hcr::detail {

namespace {

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

// Why the table's size and ABI version cannot be used; empty when they can.
std::string version_problem(const hcr_plugin_api_t* api) {
  // struct_size, abi_major and abi_minor keep their places in every major version.
  constexpr size_t kVersionFields = HCR_STRUCT_SIZE(hcr_plugin_api_t, abi_minor);
  if (api->struct_size < kVersionFields)
    return "short table: " + std::to_string(api->struct_size) +
           " bytes, too small to hold its version";
  if (api->struct_size > (1u << 16))
    return "implausible table size: " + std::to_string(api->struct_size) + " bytes";
  if (api->abi_major != HCR_ABI_MAJOR)
    return "speaks plugin ABI " + std::to_string(api->abi_major) + "." +
           std::to_string(api->abi_minor) + "; this runtime speaks " +
           std::to_string(HCR_ABI_MAJOR) + "." + std::to_string(HCR_ABI_MINOR);
  if (api->struct_size < HCR_PLUGIN_API_STRUCT_SIZE_1_0)
    return "short table: " + std::to_string(api->struct_size) + " bytes, ABI " +
           std::to_string(HCR_ABI_MAJOR) + ".0 needs " +
           std::to_string(HCR_PLUGIN_API_STRUCT_SIZE_1_0);
  return {};
}

// The plugin's name from its table; empty with record.reason set when it has none or an
// implausible one.
std::string plugin_name(const hcr_plugin_api_t* api, PluginRecord& record) {
  if (api->name == nullptr || api->name[0] == '\0') {
    record.reason = "the table has no plugin name";
    return {};
  }
  std::string name(api->name, strnlen(api->name, 65));
  if (name.size() > 64 || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      })) {
    record.reason = "implausible plugin name (letters, digits, '_', '-', '.'; at most 64)";
    return {};
  }
  return name;
}

// The first entry every plugin must fill that the table leaves NULL; none when all are there.
const char* missing_entry(const hcr_plugin_api_t* api) {
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
    if (fn == nullptr) return entry;
  return nullptr;
}

// Loads a checked file and calls its entry point: the plugin's table, or null with
// record.reason set. The library stays loaded once its code has run (keep_loaded).
const hcr_plugin_api_t* load_table(const std::shared_ptr<LoadedLibrary>& lib, const fs::path& file,
                                   PluginRecord& record) {
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
  if (api == nullptr) record.reason = HCR_PLUGIN_ENTRY_SYMBOL " returned NULL";
  return api;
}

}  // namespace

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
  const hcr_plugin_api_t* api = load_table(lib, file, record);
  if (api == nullptr) return nullptr;
  if (std::string why = version_problem(api); !why.empty()) {
    record.reason = why;
    return nullptr;
  }
  std::string name = plugin_name(api, record);
  if (name.empty()) return nullptr;
  record.name = name;
  record.version = api->version ? std::string(api->version, strnlen(api->version, 64)) : "";
  if (const char* entry = missing_entry(api)) {
    record.reason = std::string("required entry '") + entry + "' is NULL";
    return nullptr;
  }
  lib->api = api;
  lib->name = name;
  return lib;
}

std::string take_error(const hcr_plugin_api_t* api, hcr_error_t* error) {
  if (error == nullptr) return {};
  const char* m = api->error_message(error);
  std::string text = m ? std::string(m, strnlen(m, 1 << 16)) : "(no message)";
  api->error_destroy(error);
  return text;
}

}  // namespace hcr::detail
