// Model files on disk: loading a model directory, and saves that merge into what other processes
// saved there, through hcr::files (trusted directory, capped reads, atomic writes, a lock).
#include "cost_model.hpp"

#include "safe_file.hpp"

#include <hcr/log.hpp>
#include <hcr/sched.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>

namespace hcr::sched {

namespace fs = std::filesystem;

namespace {

// Longer than any save takes (milliseconds); a holder stuck beyond it costs this save only.
constexpr auto kLockWait = std::chrono::seconds(5);
// Readable by others, as the files always were; the directory (0700) decides who reaches them.
constexpr mode_t kFileMode = 0644;

bool is_model_file(const std::string& name) {
  const std::string_view suffix = ".model.toml";
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An unusable model directory is a state of the machine, not an event: said once per directory
// and reason in a process (a runtime saves every 30 s, tests make many runtimes).
void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(message).second) return;
  }
  log::write(LogLevel::warn, message);
}

std::string unusable(const fs::path& dir, const std::exception& e) {
  return "model directory '" + dir.string() +
         "' not used (learned costs are neither loaded nor "
         "saved): " +
         e.what();
}

// Every model file of `dir` into `model`; each architecture's file of record read last, so that
// where a differently named file (an earlier hcr's name) holds the same cells, it wins.
void load_from(CostModel& model, const files::TrustedDir& dir, std::vector<std::string>& warnings) {
  struct File {
    std::string name, text;
    bool of_record;
  };
  std::vector<File> found;
  std::vector<std::string> names;
  try {
    names = dir.list();
  } catch (const files::FileError& e) {
    warnings.push_back(unusable(dir.path(), e));
    return;
  }
  for (const std::string& name : names) {
    if (!is_model_file(name)) continue;
    try {
      std::optional<std::string> text = dir.read(name, kMaxModelFileBytes);
      if (!text) continue;  // removed meanwhile
      auto arch = ModelFile::arch_of(*text);
      const bool of_record = arch && name == ModelFile::file_name(*arch);
      found.push_back({name, std::move(*text), of_record});
    } catch (const std::exception& e) {
      warnings.push_back(std::string("ignoring cost model file ") + e.what());
    }
  }
  std::stable_partition(found.begin(), found.end(), [](const File& f) { return !f.of_record; });
  for (auto& f : found) {
    try {
      model.load_text(f.text, dir.file(f.name).string(), &warnings);
    } catch (const std::exception& e) {
      warnings.push_back(std::string("ignoring cost model file ") + e.what());
    }
  }
}

// The execution models into `dir`, whose lock the caller holds. An architecture is written when
// it has samples no file holds yet, or no file; merged into the file as it is now.
std::vector<fs::path> save_locked(CostModel& model, const files::TrustedDir& dir,
                                  std::vector<std::string>& warnings) {
  std::vector<fs::path> written;
  std::set<std::string> saved;  // architectures
  for (auto& [arch, cells] : model.snapshot()) {
    const std::string name = ModelFile::file_name(arch);
    const std::string path = dir.file(name).string();
    std::optional<std::string> text;
    try {
      text = dir.read(name, kMaxModelFileBytes);
    } catch (const files::FileError& e) {  // not ours to merge with (a link, another's file)
      warnings.push_back(std::string("replacing cost model file ") + e.what());
    }
    const bool fresh = std::any_of(cells.begin(), cells.end(), [](const CostModel::SavedCell& c) {
      return c.fresh_count > 0 || c.joules_fresh_count > 0;
    });
    // The file holds all this model learned of it, and maybe more; unless it was loaded cut short
    // or over the caps, and must be written within them.
    if (text && !fresh && !model.needs_rewrite(arch)) continue;
    std::string why;
    std::string merged = ModelFile::merged_text(
        arch, cells, text ? std::optional<std::string_view>(*text) : std::nullopt, path, &why);
    if (!why.empty()) warnings.push_back("replacing cost model file " + why);
    dir.write(name, merged, kFileMode);
    model.mark_saved(arch, cells);
    written.push_back(dir.file(name));
    saved.insert(arch);
  }
  // A file of another name that holds an architecture just written (named by an earlier hcr, or
  // copied) was loaded with the rest and is now part of what was written: it goes, so that it
  // never competes with the file of record again. So do temporaries left by a save that died.
  for (const std::string& name : dir.list()) {
    // A temporary of a save that died midway: no other save runs while the lock is held.
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp.") != std::string::npos) {
      dir.remove(name);
      continue;
    }
    if (!is_model_file(name) ||
        std::find(written.begin(), written.end(), dir.file(name)) != written.end())
      continue;
    std::optional<std::string> arch;
    try {
      if (auto text = dir.read(name, kMaxModelFileBytes)) arch = ModelFile::arch_of(*text);
    } catch (const files::FileError&) {  // unreadable: not ours to remove
    }
    if (arch && saved.count(*arch)) dir.remove(name);
  }
  return written;
}

void log_all(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) log::write(LogLevel::warn, w);
}

}  // namespace

std::vector<fs::path> CostModel::save(const fs::path& dir) {
  if (snapshot().empty()) return {};  // nothing learned: not even the directory appears
  files::TrustedDir d = files::TrustedDir::make(dir);
  files::Lock lock = d.lock(kLockFileName, kLockWait);
  std::vector<std::string> warnings;
  return save_locked(*this, d, warnings);
}

void CostModel::load(const fs::path& dir, std::vector<std::string>& warnings) {
  std::optional<files::TrustedDir> d;
  try {
    d = files::TrustedDir::open(dir);
  } catch (const files::FileError& e) {
    warnings.push_back(unusable(dir, e));
    return;
  }
  if (d) load_from(*this, *d, warnings);
}

void CostModel::load_file(const fs::path& file) {
  load_text(files::read_file(file, kMaxModelFileBytes), file.string());
}

std::string check_model_file(std::string_view name, std::string_view text) {
  const std::string origin(name);
  if (text.size() > kMaxModelParseBytes)
    return origin + ": " + std::to_string(text.size()) + " bytes, more than the " +
           std::to_string(kMaxModelParseBytes) + " a model file is read up to";
  try {
    CostModel model;  // loaded as a model directory's file is, and thrown away
    std::vector<std::string> warnings;
    model.load_text(text, origin, &warnings);
    if (!warnings.empty()) return warnings.front();
  } catch (const std::exception& e) {
    return e.what();
  }
  const std::optional<std::string> arch = ModelFile::arch_of(text);
  if (!arch || ModelFile::file_name(*arch) != name)
    return origin + ": holds architecture '" + arch.value_or("") + "', whose file is " +
           ModelFile::file_name(arch.value_or(""));
  return {};
}

void load_models(const std::string& dir, CostModel& model, LinkModel& links,
                 const std::vector<std::string>& node_names) noexcept {
  std::vector<std::string> warnings;
  try {
    std::optional<files::TrustedDir> d;
    try {
      d = files::TrustedDir::open(dir);
    } catch (const files::FileError& e) {
      warn_once(unusable(dir, e));
      return;
    }
    if (!d) return;  // nothing saved yet
    load_from(model, *d, warnings);
    try {
      if (auto text = d->read(kLinkFileName, kMaxModelFileBytes))
        links.declare(LinkModel::parse(*text, d->file(kLinkFileName).string()), node_names);
    } catch (const std::exception& e) {
      warnings.push_back(std::string("ignoring link model file ") + e.what());
    }
  } catch (const std::exception& e) {
    warnings.push_back("cannot load the cost model from " + dir + ": " + e.what());
  }
  log_all(warnings);
}

void save_models(const std::string& dir, CostModel& model, const LinkModel& links,
                 const std::vector<std::string>& node_names) noexcept {
  std::vector<std::string> warnings;
  try {
    const std::vector<LinkModel::NamedLink> measured = links.measured(node_names);
    if (model.snapshot().empty() && measured.empty()) return;
    std::optional<files::TrustedDir> d;
    try {
      d = files::TrustedDir::make(dir);
    } catch (const files::FileError& e) {
      warn_once(unusable(dir, e));
      return;
    }
    files::Lock lock = d->lock(kLockFileName, kLockWait);
    save_locked(model, *d, warnings);
    if (!measured.empty()) {
      const std::string path = d->file(kLinkFileName).string();
      std::vector<LinkModel::NamedLink> on_disk;
      try {
        if (auto text = d->read(kLinkFileName, kMaxModelFileBytes))
          on_disk = LinkModel::parse(*text, path);
      } catch (const std::exception& e) {
        warnings.push_back(std::string("replacing link model file ") + e.what());
      }
      d->write(kLinkFileName, LinkModel::format(LinkModel::merge(std::move(on_disk), measured)),
               kFileMode);
    }
  } catch (const std::exception& e) {
    warnings.push_back("cannot save the cost model under " + dir + ": " + e.what());
  }
  log_all(warnings);
}

}  // namespace hcr::sched
