// The cost model's files: one TOML file per architecture, versioned; parsing one (validated, within
// the caps and kMaxModelParseBytes), writing one, and merging into what another process saved.
#include "cost_model.hpp"

#include "cost_model_internal.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace hcr::sched {

namespace internal {

toml::table parse_toml(std::string_view text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(origin + ":" + std::to_string(e.source().begin.line) + ": " +
                             std::string(e.description()));
  }
}

}  // namespace internal

namespace {
// One file per architecture, named after it: letters, digits, '_', '-' and '.' as they are; any
// other character becomes '_' and the name then ends in a hash of the exact key, so that two
// architectures never share a file ("gpu a" and "gpu/a" would both be "gpu_a").
std::string file_name_for(const std::string& arch) {
  std::string s;
  bool replaced = arch.empty();
  for (char ch : arch) {
    const bool keep = std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ||
                      (ch == '.' && !s.empty());
    s += keep ? ch : '_';
    replaced = replaced || !keep;
  }
  if (replaced) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (char ch : arch) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    char tail[18];
    std::snprintf(tail, sizeof tail, "-%08x", static_cast<unsigned>(h ^ (h >> 32)));
    s += tail;
  }
  return s + ".model.toml";
}
std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// A model file's content, validated.
struct ParsedCell {
  std::string kernel;
  uint64_t footprint;
  double size;
  uint32_t count;
  std::vector<double> samples;
  std::vector<double> joules;  // (optional: energy per launch)
  uint32_t joules_count = 0;
  int64_t updated = 0;  // (optional: 0 unknown, the oldest)
};
struct ParsedModel {
  std::string arch;
  std::vector<ParsedCell> cells;  // with samples, in file order, each once, within the caps
  size_t read = 0;                // distinct cells with samples read
  size_t truncated_from = 0;  // the text's size, when only its first kMaxModelParseBytes were read
};

// The text up to its last cell boundary within kMaxModelParseBytes (all of it when it is no
// larger): a file written before the caps could hold hundreds of thousands of cells, and what the
// TOML parser takes, in time and in memory, grows with the text.
std::string_view bounded(std::string_view text, const std::string& origin) {
  if (text.size() <= kMaxModelParseBytes) return text;
  const size_t at = text.rfind("\n[[cell]]", kMaxModelParseBytes - 1);
  if (at == std::string_view::npos)
    throw std::runtime_error(origin + ": " + std::to_string(text.size()) +
                             " bytes, and no [[cell]] begins within the first " +
                             std::to_string(kMaxModelParseBytes) +
                             " (what a model file is read up to)");
  return text.substr(0, at + 1);
}

ParsedModel parse_model(std::string_view whole, const std::string& origin) {
  const std::string_view text = bounded(whole, origin);
  toml::table root = internal::parse_toml(text, origin);
  auto format = root["format"].value<std::string>();
  // value_exact: TOML++'s value<int64_t>() of a float converts it first, undefined for 1e308.
  auto version = root["version"].value_exact<int64_t>();
  auto arch = root["arch"].value<std::string>();
  if (!format || *format != ModelFile::kFormat)
    throw std::runtime_error(origin + ": not an hcr cost model (no format = \"" +
                             std::string(ModelFile::kFormat) + "\")");
  if (!version || *version != ModelFile::kFormatVersion)
    throw std::runtime_error(origin + ": model format version " +
                             (version                    ? std::to_string(*version)
                              : root.contains("version") ? std::string("not an integer")
                                                         : std::string("missing")) +
                             ", this hcr reads version " +
                             std::to_string(ModelFile::kFormatVersion));
  if (!arch) throw std::runtime_error(origin + ": no arch");
  ParsedModel out{*arch, {}, 0, text.size() < whole.size() ? whole.size() : 0};
  auto* cells = root["cell"].as_array();
  if (cells == nullptr) return out;
  for (auto&& node : *cells) {
    auto* t = node.as_table();
    auto where = [&] { return origin + ":" + std::to_string(node.source().begin.line); };
    if (t == nullptr) throw std::runtime_error(where() + ": a cell is not a table");
    auto kernel = (*t)["kernel"].value<std::string>();
    auto fp = (*t)["footprint"].value<std::string>();
    auto size = (*t)["size"].value<double>();
    auto count = (*t)["count"].value_exact<int64_t>();
    auto* samples = (*t)["samples"].as_array();
    if (!kernel || !fp || !size || !count || samples == nullptr)
      throw std::runtime_error(where() + ": a cell needs kernel, footprint, size, count, samples");
    ParsedCell p{
        *kernel, 0, *size, static_cast<uint32_t>(std::clamp<int64_t>(*count, 0, 1 << 30)), {}};
    // Hexadecimal digits with an optional 0x, nothing else (stoull would take a sign and spaces).
    std::string_view digits = *fp;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
      digits.remove_prefix(2);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p.footprint, 16);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      throw std::runtime_error(where() + ": footprint '" + *fp + "' is not hexadecimal");
    for (auto&& s : *samples) {
      auto v = s.value<double>();
      if (!v || !(*v >= 0 && *v <= kMaxFileSeconds))
        throw std::runtime_error(where() + ": samples must be non-negative numbers of seconds, "
                                           "at most 1e9");
      p.samples.push_back(*v);
    }
    if (auto* joules = (*t)["joules"].as_array()) {  // energy, where it was measured
      auto jc = (*t)["joules_count"].value_exact<int64_t>();
      p.joules_count = static_cast<uint32_t>(std::clamp<int64_t>(jc.value_or(0), 0, 1 << 30));
      for (auto&& s : *joules) {
        auto v = s.value<double>();
        if (!v || !(*v >= 0 && *v <= kMaxFileSeconds))
          throw std::runtime_error(where() + ": joules must be non-negative numbers, at most 1e9");
        p.joules.push_back(*v);
      }
    } else if ((*t).contains("joules")) {
      throw std::runtime_error(where() + ": joules must be an array of numbers");
    }
    if (!(p.size >= 0) || !std::isfinite(p.size))
      throw std::runtime_error(where() + ": size must be a non-negative number");
    if (t->contains("updated")) {  // microseconds since 1970 of its last sample
      auto updated = (*t)["updated"].value_exact<int64_t>();
      if (!updated || *updated < 0)
        throw std::runtime_error(where() + ": updated must be a non-negative integer "
                                           "(microseconds since 1970)");
      p.updated = *updated;
    }
    // A cell without samples says nothing.
    if (!p.samples.empty()) out.cells.push_back(std::move(p));
  }
  // A cell twice: the last one counts. Then the caps: the most recently updated cells stay.
  std::vector<size_t> distinct;  // indices into out.cells, in file order
  {
    std::map<std::pair<std::string_view, uint64_t>, size_t> last;
    for (size_t i = 0; i < out.cells.size(); ++i)
      last[{out.cells[i].kernel, out.cells[i].footprint}] = i;
    for (size_t i = 0; i < out.cells.size(); ++i)
      if (last[{out.cells[i].kernel, out.cells[i].footprint}] == i) distinct.push_back(i);
  }
  out.read = distinct.size();
  const std::vector<bool> keep = internal::within_caps(
      distinct.size(), [&](size_t i) { return std::string_view(out.cells[distinct[i]].kernel); },
      [&](size_t i) { return out.cells[distinct[i]].updated; });
  std::vector<ParsedCell> kept;
  for (size_t i = 0; i < distinct.size(); ++i)
    if (keep[i]) kept.push_back(std::move(out.cells[distinct[i]]));
  out.cells = std::move(kept);
  return out;
}

// One cell as written: its size and history (and energy).
struct FileCell {
  double size = 0;
  int64_t updated = 0;
  History history;
  History energy;
};

std::string format_model(const std::string& arch,
                         const std::map<std::pair<std::string, uint64_t>, FileCell>& cells) {
  toml::array rows;
  for (auto& [key, cell] : cells) {
    if (cell.history.size() == 0) continue;
    toml::array samples;
    for (double x : cell.history.samples()) samples.push_back(x);
    toml::table row{
        {"kernel", key.first},
        {"footprint", hex(key.second)},
        {"size", cell.size},
        {"count", static_cast<int64_t>(cell.history.count())},
        {"samples", std::move(samples)},
    };
    if (cell.updated > 0) row.insert("updated", cell.updated);
    if (cell.energy.size() > 0) {
      toml::array joules;
      for (double x : cell.energy.samples()) joules.push_back(x);
      row.insert("joules", std::move(joules));
      row.insert("joules_count", static_cast<int64_t>(cell.energy.count()));
    }
    rows.push_back(std::move(row));
  }
  toml::table root{{"format", ModelFile::kFormat},
                   {"version", ModelFile::kFormatVersion},
                   {"arch", arch},
                   {"cell", std::move(rows)}};
  std::ostringstream out;
  out << "# hcr learned kernel costs for one device architecture (seconds per launch).\n"
      << "# Regenerated as hcr runs; delete it to start cold.\n"
      << root << "\n";
  return out.str();
}
}  // namespace

std::string ModelFile::file_name(const std::string& arch) { return file_name_for(arch); }

std::optional<std::string> ModelFile::arch_of(std::string_view text) {
  auto arch_in = [](std::string_view t) -> std::optional<std::string> {
    try {
      return toml::parse(t)["arch"].value<std::string>();
    } catch (const toml::parse_error&) {
      return std::nullopt;
    }
  };
  // `arch` is a top-level key, and TOML has those before the first table header: the text up to
  // the first line that opens one says it, however large the file (loading a directory asks
  // every file). Where that prefix does not parse (such a line inside a multi-line value), the
  // text within the parse bound.
  if (const size_t header = text.find("\n["); header != std::string_view::npos)
    if (auto arch = arch_in(text.substr(0, header + 1))) return arch;
  try {
    return arch_in(bounded(text, "arch_of"));
  } catch (const std::runtime_error&) {  // no cell boundary within the bound
    return std::nullopt;
  }
}

std::map<std::string, std::vector<CostModel::SavedCell>> CostModel::snapshot() const {
  std::map<std::string, std::vector<SavedCell>> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, p] : pairs_) {
    std::lock_guard<detail::SpinLock> pl(p->lock);
    for (auto& [fp, cell] : p->cells) {
      if (cell.history.size() == 0) continue;
      out[p->arch].push_back({p->kernel, fp, cell.size, cell.history.samples(),
                              cell.history.count(), cell.updated, cell.fresh, cell.fresh_count,
                              cell.energy.samples(), cell.energy.count(), cell.energy_fresh,
                              cell.energy_fresh_count});
    }
  }
  return out;
}

std::string ModelFile::merged_text(const std::string& arch, const std::vector<SavedCell>& cells,
                                   std::optional<std::string_view> on_disk,
                                   const std::string& origin, std::string* why) {
  std::map<std::pair<std::string, uint64_t>, FileCell> merged;
  if (on_disk) {
    try {
      ParsedModel file = parse_model(*on_disk, origin);
      if (file.arch != arch)
        throw std::runtime_error(origin + ": holds architecture '" + file.arch + "', not '" + arch +
                                 "'");
      for (auto& c : file.cells) {
        FileCell& f = merged[{c.kernel, c.footprint}];
        f.size = c.size;
        f.updated = c.updated;
        f.history.restore(c.samples, c.count);
        f.energy.restore(c.joules, c.joules_count);
      }
    } catch (const std::runtime_error& e) {
      merged.clear();
      if (why != nullptr) *why = e.what();
    }
  }
  for (const SavedCell& c : cells) {
    auto it = merged.find({c.kernel, c.footprint});
    if (it == merged.end()) {  // only here: as this model has it
      FileCell& f = merged[{c.kernel, c.footprint}];
      f.size = c.size;
      f.updated = c.updated;
      f.history.restore(c.samples, c.count);
      f.energy.restore(c.joules, c.joules_count);
      continue;
    }
    // The file has all this model knows of it, and more, but what it recorded since its last
    // save: that is added (samples beyond the kept ones still count: they left the window long
    // ago anyway).
    FileCell& f = it->second;
    auto add_fresh = [](History& h, const std::vector<double>& fresh, uint32_t fresh_count) {
      for (double x : fresh) h.add(x);
      const uint32_t dropped = fresh_count - static_cast<uint32_t>(fresh.size());
      if (dropped > 0) h.restore(h.samples(), h.count() + dropped);
    };
    if (c.fresh_count > 0 || c.joules_fresh_count > 0) {
      f.size = c.size;
      f.updated = std::max(f.updated, c.updated);
    }
    if (c.fresh_count > 0) add_fresh(f.history, c.fresh, c.fresh_count);
    if (c.joules_fresh_count > 0) add_fresh(f.energy, c.joules_fresh, c.joules_fresh_count);
  }
  // The file's cells and this model's together, within the caps: the least recently updated go.
  std::vector<decltype(merged)::iterator> at;
  for (auto it = merged.begin(); it != merged.end(); ++it)
    if (it->second.history.size() > 0) at.push_back(it);
  const std::vector<bool> keep = internal::within_caps(
      at.size(), [&](size_t i) { return std::string_view(at[i]->first.first); },
      [&](size_t i) { return at[i]->second.updated; });
  for (size_t i = 0; i < at.size(); ++i)
    if (!keep[i]) merged.erase(at[i]);
  return format_model(arch, merged);
}

void CostModel::mark_saved(const std::string& arch, const std::vector<SavedCell>& cells) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = archs_.find(arch); it != archs_.end()) it->second->rewrite = false;
  }
  for (const SavedCell& c : cells) {
    if (c.fresh_count == 0 && c.joules_fresh_count == 0) continue;
    Pair* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = pairs_.find({c.kernel, arch});
      if (it == pairs_.end()) continue;
      p = it->second.get();
    }
    std::lock_guard<detail::SpinLock> pl(p->lock);
    auto it = p->cells.find(c.footprint);
    if (it == p->cells.end()) continue;
    Cell& cell = it->second;
    // Samples recorded since the snapshot are the newest ones: they stay fresh.
    auto saved = [](std::vector<double>& fresh, uint32_t& count, uint32_t now_saved) {
      count -= std::min(count, now_saved);
      if (fresh.size() > count)
        fresh.erase(fresh.begin(), fresh.end() - static_cast<std::ptrdiff_t>(count));
    };
    saved(cell.fresh, cell.fresh_count, c.fresh_count);
    saved(cell.energy_fresh, cell.energy_fresh_count, c.joules_fresh_count);
  }
}

std::map<std::string, std::string> CostModel::save_text() const {
  std::map<std::string, std::string> texts;
  for (auto& [arch, cells] : snapshot())
    texts[arch] = ModelFile::merged_text(arch, cells, std::nullopt, arch);
  return texts;
}

void CostModel::load_text(std::string_view text, const std::string& origin,
                          std::vector<std::string>* warnings) {
  // Validated whole before the model is touched: a bad file changes nothing.
  ParsedModel file = parse_model(text, origin);
  const bool truncated = file.truncated_from > 0, dropped = file.cells.size() < file.read;
  if (warnings != nullptr && truncated)
    warnings->push_back(origin + ": " + std::to_string(file.truncated_from) +
                        " bytes, more than the " + std::to_string(kMaxModelParseBytes) +
                        " a model file is read up to: only the " + std::to_string(file.read) +
                        " cells before that were read (the next save rewrites the file)");
  if (warnings != nullptr && dropped)
    warnings->push_back(origin + ": " + std::to_string(file.read) + " cells, more than a model " +
                        "keeps (" + std::to_string(kMaxCellsPerKernel) + " per kernel, " +
                        std::to_string(kMaxCellsPerArch) + " per architecture): the " +
                        std::to_string(file.read - file.cells.size()) +
                        " least recently updated were left out (the next save rewrites the file "
                        "without them)");
  for (auto& p : file.cells) {
    Pair& pr = *find_or_add(p.kernel, file.arch);
    std::lock_guard<detail::SpinLock> lock(pr.lock);
    bool added = false;
    Cell& cell = cell_of(pr, p.footprint, added);
    // A cell read twice (in two files of one architecture): the last one counts, once.
    pr.total.fetch_sub(static_cast<uint32_t>(cell.history.size()), std::memory_order_relaxed);
    cell.size = p.size;
    cell.updated = p.updated;
    // Samples recorded from now on are newer than any loaded (a file from a clock ahead of ours).
    for (int64_t last = clock_.load(std::memory_order_relaxed);
         last < p.updated &&
         !clock_.compare_exchange_weak(last, p.updated, std::memory_order_relaxed);) {
    }
    cell.history.restore(p.samples, p.count);
    cell.energy.restore(p.joules, p.joules_count);
    pr.total.fetch_add(static_cast<uint32_t>(cell.history.size()), std::memory_order_relaxed);
  }
  // With what the model had (another file of the architecture, samples recorded): the caps.
  trim(file.arch);
  std::lock_guard<std::mutex> lock(mutex_);
  if (truncated || dropped)
    if (auto it = archs_.find(file.arch); it != archs_.end()) it->second->rewrite = true;
  for (auto& [key, p] : pairs_) {
    std::lock_guard<detail::SpinLock> pl(p->lock);
    p->fits_stale = true;
    fresh_fits(*p);
  }
}

}  // namespace hcr::sched
