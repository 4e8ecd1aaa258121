// Search and trust: where plugins are looked for (the configuration's directories, then
// HCR_PLUGIN_PATH, then the install's plugin directory; files named in HCR_PLUGIN_DISABLE are left
// alone), and the ownership and permission checks a path passes before anything is loaded from it.
#include "loader_steps.hpp"

#include "../log_internal.hpp"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace hcr::detail {

namespace {

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

}  // namespace

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

namespace {

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

// The items of a ':'-separated environment variable, when the configuration lets it be read.
std::vector<std::string> environment_list(const Config& config, const char* variable) {
  std::vector<std::string> items;
  if (config.use_environment)
    if (const char* env = std::getenv(variable); env && *env) {
      std::stringstream ss(env);
      for (std::string item; std::getline(ss, item, ':');)
        if (!item.empty()) items.push_back(item);
    }
  return items;
}

// The directories searched, in order, each with where it was named (path, origin).
std::vector<std::pair<std::string, std::string>> search_dirs(const Config& config) {
  std::vector<std::pair<std::string, std::string>> dirs;
  for (auto& p : config.plugin_paths) dirs.emplace_back(p, "config");
  for (auto& p : environment_list(config, "HCR_PLUGIN_PATH"))
    dirs.emplace_back(p, "HCR_PLUGIN_PATH");
  dirs.emplace_back(install_plugin_dir().string(), "install");
  return dirs;
}

// One search: the directories are examined in order, their libraries opened or left unopened.
class LibrarySearch {
 public:
  LibrarySearch(const Config& config, LoadReport& report)
      : config_(config),
        report_(report),
        // HCR_PLUGIN_DISABLE: libraries never opened (full paths or file names, ':'-separated),
        // as the Vulkan loader's VK_LOADER_DRIVERS_DISABLE: the way around one that crashes or
        // hangs the process at start (`hcr devices` finds it and sets this for its own probes).
        disabled_(environment_list(config, "HCR_PLUGIN_DISABLE")) {
    for (const BackendConfig& bc : config.backends)
      if (bc.enabled) wanted_.insert(bc.name);
  }

  // Examines one directory and, when it is used, opens its libraries.
  void search(const std::string& path, const std::string& origin) {
    fs::path p(path);
    if (!use_dir(p, origin)) return;
    for (const fs::path& file : library_files(p)) {
      PluginRecord rec;
      rec.path = file.string();
      if (is_disabled(file)) {
        rec.reason = "disabled by HCR_PLUGIN_DISABLE (not opened)";
        HCR_LOG(info, "plugin " << rec.path << " skipped: " << rec.reason);
        report_.plugins.push_back(std::move(rec));
        continue;
      }
      if (unwanted(file)) {
        rec.reason = "not named in the configuration (not opened)";
        unopened_.push_back(report_.plugins.size());
        report_.plugins.push_back(std::move(rec));
        continue;
      }
      open(file, std::move(rec), report_.plugins.size());
    }
  }

  // A plugin asked for but not found: perhaps a library was renamed. Open the others after all.
  void open_unopened_if_missing() {
    bool missing = false;
    for (const std::string& name : wanted_) missing = missing || !found_.record_of.count(name);
    if (!missing) return;
    for (size_t i : unopened_) {
      const fs::path file = report_.plugins[i].path;
      PluginRecord rec;
      rec.path = file.string();
      open(file, std::move(rec), i);
    }
  }

  FoundLibraries take() { return std::move(found_); }

 private:
  // Whether directory `p` is searched; its entry in report.dirs says why not.
  bool use_dir(const fs::path& p, const std::string& origin) {
    const std::string path = p.string();
    LoadReport::Dir d{path, origin, false, {}};
    std::error_code ec;
    if (!p.is_absolute()) d.reason = "not an absolute path: refused";
    else if (!fs::exists(p, ec)) d.reason = "does not exist";
    else if (!fs::is_directory(p, ec)) d.reason = "not a directory";
    else if (std::string why = untrusted(p, true); !why.empty()) d.reason = why;
    else if (auto canon = fs::weakly_canonical(p, ec);
             std::find(seen_dirs_.begin(), seen_dirs_.end(), canon) != seen_dirs_.end())
      d.reason = "listed earlier";
    else {
      d.used = true;
      seen_dirs_.push_back(canon);
    }
    if (!d.reason.empty() && origin != "install")
      HCR_LOG(info, "plugin directory " << path << " (" << origin << "): " << d.reason);
    report_.dirs.push_back(d);
    return d.used;
  }

  bool is_disabled(const fs::path& file) const {
    return std::any_of(disabled_.begin(), disabled_.end(), [&](const std::string& d) {
      return d == file.string() || d == file.filename().string();
    });
  }

  // With [[backend]] tables, a library whose file name says it is a plugin nobody asked for
  // (libhcr-<name>.so) is not opened at all: loading one costs milliseconds (its dependencies'
  // initialisers), PoCL's tens. Libraries named otherwise are opened to learn their name.
  bool unwanted(const fs::path& file) const {
    if (config_.backends.empty()) return false;
    const std::string stem = file.filename().string();
    const std::string prefix = "libhcr-";
    if (stem.rfind(prefix, 0) != 0) return false;
    const std::string name = stem.substr(prefix.size(), stem.find('.') - prefix.size());
    return !name.empty() && !wanted_.count(name);
  }

  // Opens one library, its record going to report.plugins[slot] (a new entry when slot is the
  // end).
  void open(const fs::path& file, PluginRecord rec, size_t slot) {
    auto lib = open_library(file, rec);
    if (lib && found_.record_of.count(lib->name)) {
      rec.reason = "shadowed by " + report_.plugins[found_.record_of[lib->name]].path;
      lib.reset();
    }
    if (!lib) HCR_LOG(warn, "plugin " << rec.path << " skipped: " << rec.reason);
    else HCR_LOG(info, "plugin " << rec.path << ": found '" << lib->name << "' " << rec.version);
    if (lib) found_.record_of[lib->name] = slot;
    if (slot == report_.plugins.size()) report_.plugins.push_back(std::move(rec));
    else report_.plugins[slot] = std::move(rec);
    if (lib) found_.libraries.push_back(std::move(lib));
  }

  const Config& config_;
  LoadReport& report_;
  std::vector<std::string> disabled_;
  std::set<std::string> wanted_;
  FoundLibraries found_;
  std::vector<size_t> unopened_;  // report.plugins entries left unopened
  std::vector<fs::path> seen_dirs_;
};

}  // namespace

fs::path install_plugin_dir() {
  boost::dll::fs::error_code ec;
  fs::path self = boost::dll::this_line_location(ec);
  if (ec) return {};
  return self.parent_path() / "hcr" / "plugins";
}

FoundLibraries find_libraries(const Config& config, LoadReport& report) {
  LibrarySearch search(config, report);
  for (auto& [path, origin] : search_dirs(config)) search.search(path, origin);
  search.open_unopened_if_missing();
  return search.take();
}

}  // namespace hcr::detail
