// The plugin loader's steps, shared by its three parts: search and trust (search.cpp), the
// library (library.cpp) and the instance (instance.cpp). Private to the loader.
#pragma once

#include "plugin_loader.hpp"
#include "../config_check.hpp"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hcr::detail {

/// Empty when `path` (absolute) and everything leading to it are trusted and it is a directory
/// (want_directory) or a regular file; otherwise why not, naming the offending path.
std::string untrusted(const std::filesystem::path& path, bool want_directory);

/// Opens a library and checks its table. Null with record.reason set when it cannot be used.
std::shared_ptr<LoadedLibrary> open_library(const std::filesystem::path& file,
                                            PluginRecord& record);

/// Creates one instance of `lib` and reads its devices. Null with record.reason set on failure;
/// `mistake` is set too when the plugin refused the table's options.
std::unique_ptr<PluginInstance> instantiate(const std::shared_ptr<LoadedLibrary>& lib,
                                            const BackendConfig& bc, PluginRecord& record,
                                            std::optional<ConfigProblem>* mistake = nullptr);

/// The libraries the search opened, in search order (the first of a name wins).
struct FoundLibraries {
  std::vector<std::shared_ptr<LoadedLibrary>> libraries;
  std::map<std::string, size_t> record_of;  // library name -> index in report.plugins
};

/// Searches the configuration's directories, HCR_PLUGIN_PATH and the install's, and opens the
/// libraries found there; every directory and library goes into `report`.
FoundLibraries find_libraries(const Config& config, LoadReport& report);

}  // namespace hcr::detail
