// Cost model: robust windowed history, power-law regression over sizes, link fits, and the
// versioned TOML files the model persists to.
#include "cost_model.hpp"

#include <toml++/toml.h>

#include <time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace hcr::sched {

// ---- History ----------------------------------------------------------------------------------

void History::add(double x) {
  // Beyond kMaxFileSeconds a duration is a broken clock or a plugin's garbage: kept, it would
  // be saved into a file the next run refuses as corrupt.
  if (!accepts(x)) return;
  ++count_;
  if (n_ >= static_cast<size_t>(kShift)) {
    // A sample far from the estimate counts toward a change of regime only with others on the
    // same side; alone it is an outlier, and the median ignores it anyway.
    const double tolerance = std::max(kOutlier * spread_, 0.25 * median_);
    int side = x > median_ + tolerance ? 1 : x < median_ - tolerance ? -1 : 0;
    if (side != 0 && (streak_ == 0 || (streak_ > 0) == (side > 0))) {
      streak_ += side;
      pending_.push_back(x);
      if (std::abs(streak_) >= kShift) {  // the device changed: start over from the new regime
        n_ = 0;
        head_ = 0;
        for (double p : pending_) {
          ring_[head_] = p;
          head_ = (head_ + 1) % kWindow;
          ++n_;
        }
        pending_.clear();
        streak_ = 0;
        recompute();
      }
      return;
    }
    // Back in line: the pending samples were outliers after all.
    streak_ = side;
    pending_.clear();
    if (side != 0) {
      pending_.push_back(x);
      return;
    }
  }
  ring_[head_] = x;
  head_ = (head_ + 1) % kWindow;
  n_ = std::min(n_ + 1, kWindow);
  recompute();
}

std::vector<double> History::samples() const {
  std::vector<double> out;
  for (size_t i = 0; i < n_; ++i) out.push_back(ring_[(head_ + kWindow - n_ + i) % kWindow]);
  return out;
}

void History::restore(const std::vector<double>& samples, uint32_t count) {
  n_ = head_ = 0;
  streak_ = 0;
  pending_.clear();
  size_t first = samples.size() > kWindow ? samples.size() - kWindow : 0;
  for (size_t i = first; i < samples.size(); ++i) {
    if (!(samples[i] >= 0) || !std::isfinite(samples[i])) continue;
    ring_[head_] = samples[i];
    head_ = (head_ + 1) % kWindow;
    ++n_;
  }
  count_ = std::max<uint32_t>(count, static_cast<uint32_t>(n_));
  recompute();
}

void History::recompute() {
  if (n_ == 0) {
    median_ = spread_ = 0;
    return;
  }
  std::vector<double> w;
  for (size_t i = 0; i < n_; ++i) w.push_back(ring_[(head_ + kWindow - n_ + i) % kWindow]);
  std::sort(w.begin(), w.end());
  auto median_of = [](std::vector<double>& s) {
    size_t m = s.size() / 2;
    return s.size() % 2 ? s[m] : 0.5 * (s[m - 1] + s[m]);
  };
  median_ = median_of(w);
  for (double& x : w) x = std::abs(x - median_);
  std::sort(w.begin(), w.end());
  spread_ = 1.4826 * median_of(w);  // MAD as a standard deviation
}

// ---- power law ----------------------------------------------------------------------------------

double PowerLaw::operator()(double n) const {
  return std::max(0.0, a * std::pow(std::max(n, 1.0), b) + c);
}

namespace {
// Weighted least squares of log(t - c) = log a + b log n; returns the weighted squared error of
// the model in log space.
double fit_with_offset(const std::vector<std::array<double, 3>>& pts, double c, PowerLaw& out) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto& p : pts) {
    double x = std::log(std::max(p[0], 1.0)), y = std::log(std::max(p[1] - c, 1e-15));
    sw += p[2];
    sx += p[2] * x;
    sy += p[2] * y;
    sxx += p[2] * x * x;
    sxy += p[2] * x * y;
  }
  double den = sw * sxx - sx * sx;
  if (std::abs(den) < 1e-12) return INFINITY;
  double b = (sw * sxy - sx * sy) / den;
  b = std::clamp(b, 0.0, 4.0);
  double loga = (sy - b * sx) / sw;
  out.a = std::exp(loga);
  out.b = b;
  out.c = c;
  double err = 0;
  for (auto& p : pts) {
    double pred = out(p[0]);
    double e = std::log(std::max(pred, 1e-15)) - std::log(std::max(p[1], 1e-15));
    err += p[2] * e * e;
  }
  return err / sw;
}
}  // namespace

PowerLaw fit_power_law(const std::vector<std::array<double, 3>>& points) {
  PowerLaw best;
  std::vector<double> sizes;
  double tmin = INFINITY;
  for (auto& p : points) {
    if (std::find(sizes.begin(), sizes.end(), p[0]) == sizes.end()) sizes.push_back(p[0]);
    tmin = std::min(tmin, p[1]);
  }
  if (sizes.size() < 2 || !(tmin > 0)) return best;
  double err = fit_with_offset(points, 0, best);
  if (sizes.size() >= 3) {
    // Golden-section search of the offset c in [0, tmin): a fixed cost per launch.
    double lo = 0, hi = 0.999 * tmin;
    const double g = 0.5 * (std::sqrt(5.0) - 1);
    double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
    PowerLaw f1, f2;
    double e1 = fit_with_offset(points, x1, f1), e2 = fit_with_offset(points, x2, f2);
    for (int i = 0; i < 40; ++i) {
      if (e1 < e2) {
        hi = x2;
        x2 = x1;
        e2 = e1;
        f2 = f1;
        x1 = hi - g * (hi - lo);
        e1 = fit_with_offset(points, x1, f1);
      } else {
        lo = x1;
        x1 = x2;
        e1 = e2;
        f1 = f2;
        x2 = lo + g * (hi - lo);
        e2 = fit_with_offset(points, x2, f2);
      }
    }
    PowerLaw& cand = e1 < e2 ? f1 : f2;
    double ce = std::min(e1, e2);
    if (ce < err) {
      best = cand;
      err = ce;
    }
  }
  best.valid = std::isfinite(err) && best.a > 0;
  best.rel_error = std::isfinite(err) ? std::sqrt(err) : 1;
  return best;
}

// ---- caps ---------------------------------------------------------------------------------------

namespace {

// Microseconds since 1970, cheaply: a record takes one per sample, and the order of cells' last
// samples needs no finer clock (CostModel::stamp makes the stamps distinct).
int64_t now_us() noexcept {
#ifdef CLOCK_REALTIME_COARSE
  timespec ts{};
  if (clock_gettime(CLOCK_REALTIME_COARSE, &ts) == 0)
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
#endif
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Which of n cells stay within the caps: of each kernel the kMaxCellsPerKernel most recently
// updated, and of those the kMaxCellsPerArch most recent. On a tie the later index is the newer
// (a file's later cell, a map's later key).
template <class KernelOf, class UpdatedOf>
std::vector<bool> within_caps(size_t n, KernelOf kernel_of, UpdatedOf updated_of) {
  std::vector<bool> keep(n, true);
  if (n <= std::min(kMaxCellsPerKernel, kMaxCellsPerArch)) return keep;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int64_t ua = updated_of(a), ub = updated_of(b);
    return ua != ub ? ua > ub : a > b;
  });
  std::unordered_map<std::string_view, size_t> per_kernel;
  size_t kept = 0;
  for (size_t i : order) {
    size_t& of_kernel = per_kernel[kernel_of(i)];
    if (of_kernel < kMaxCellsPerKernel && kept < kMaxCellsPerArch) {
      ++of_kernel;
      ++kept;
    } else {
      keep[i] = false;
    }
  }
  return keep;
}

}  // namespace

// ---- CostModel --------------------------------------------------------------------------------

CostModel::Pair* CostModel::find_or_add(const std::string& kernel, const std::string& arch) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& p = pairs_[{kernel, arch}];
  if (!p) {
    p = std::make_unique<Pair>();
    p->kernel = kernel;
    p->arch = arch;
    auto& state = archs_[arch];
    if (!state) state = std::make_unique<ArchState>();
    p->arch_state = state.get();
  }
  return p.get();
}

CostModel::Cell& CostModel::cell_of(Pair& p, uint64_t footprint, bool& added) {
  auto [it, fresh] = p.cells.try_emplace(footprint);
  added = fresh;
  if (fresh) p.arch_state->cells.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

namespace {
// A new cell just made `keep` the pair's newest: beyond kMaxCellsPerKernel, the least recently
// updated of the others goes. Returns the cell count of the pair's architecture after.
template <class Pair>
size_t evict_for(Pair& p, uint64_t keep) {
  if (p.cells.size() > kMaxCellsPerKernel) {
    auto oldest = p.cells.end();
    for (auto it = p.cells.begin(); it != p.cells.end(); ++it)
      if (it->first != keep &&
          (oldest == p.cells.end() || it->second.updated < oldest->second.updated))
        oldest = it;
    p.cells.erase(oldest);
    p.arch_state->cells.fetch_sub(1, std::memory_order_relaxed);
    p.fits_stale = true;
  }
  return p.arch_state->cells.load(std::memory_order_relaxed);
}
}  // namespace

int64_t CostModel::stamp() noexcept {
  const int64_t now = now_us();
  int64_t last = clock_.load(std::memory_order_relaxed);
  while (!clock_.compare_exchange_weak(last, std::max(now, last + 1), std::memory_order_relaxed)) {
  }
  return std::max(now, last + 1);
}

void CostModel::trim(const std::string& arch) {
  std::lock_guard<std::mutex> lock(mutex_);
  struct Item {
    Pair* pair;
    uint64_t footprint;
    int64_t updated;
  };
  std::vector<Item> items;
  for (auto& [key, p] : pairs_) {
    if (p->arch != arch) continue;
    std::lock_guard<detail::SpinLock> pl(p->lock);
    for (auto& [fp, cell] : p->cells) items.push_back({p.get(), fp, cell.updated});
  }
  const std::vector<bool> keep = within_caps(
      items.size(), [&](size_t i) { return std::string_view(items[i].pair->kernel); },
      [&](size_t i) { return items[i].updated; });
  for (size_t i = 0; i < items.size(); ++i) {
    if (keep[i]) continue;
    Pair& p = *items[i].pair;
    std::lock_guard<detail::SpinLock> pl(p.lock);
    auto it = p.cells.find(items[i].footprint);
    // A sample recorded since made it recent: it stays.
    if (it == p.cells.end() || it->second.updated != items[i].updated) continue;
    p.cells.erase(it);
    p.arch_state->cells.fetch_sub(1, std::memory_order_relaxed);
    p.fits_stale = true;
  }
}

bool CostModel::needs_rewrite(const std::string& arch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = archs_.find(arch);
  return it != archs_.end() && it->second->rewrite;
}

CostModel::Pair* CostModel::pair(const std::string& kernel, const std::string& arch) {
  return find_or_add(kernel, arch);
}

// The power-law fits are made again when they are read after new samples (fresh_fits), not at
// every sample: a refit walks every cell of the pair and runs a 40-step search over them, which,
// once a model had accumulated a few dozen sizes, cost a worker tens of microseconds per task
// under the pair's lock (a tiled Cholesky of 6000 tasks ran 20% slower on such a model than on a
// fresh one). Predictions from a cell's own history, the common case, never need them.
void CostModel::fresh_fits(Pair& p) {
  if (!p.fits_stale) return;
  p.fits_stale = false;
  if (p.cells.size() >= 2) refit(p);
}

void CostModel::refit(Pair& p) {
  std::vector<std::array<double, 3>> pts, energy;
  for (auto& [fp, cell] : p.cells) {
    if (cell.history.size() > 0)
      pts.push_back({cell.size, cell.history.estimate(),
                     static_cast<double>(std::min<size_t>(cell.history.size(), 8))});
    if (cell.energy.size() > 0)
      energy.push_back({cell.size, cell.energy.estimate(),
                        static_cast<double>(std::min<size_t>(cell.energy.size(), 8))});
  }
  p.fit = fit_power_law(pts);
  p.energy_fit = fit_power_law(energy);
}

namespace {
// A sample not yet in any file: kept (the last kFreshKept) and counted for the next save.
void keep_fresh(std::vector<double>& fresh, uint32_t& count, double x) {
  if (fresh.size() == CostModel::kFreshKept) fresh.erase(fresh.begin());
  fresh.push_back(x);
  ++count;
}
}  // namespace

void CostModel::record_energy(Pair& p, uint64_t footprint, double size, double joules) {
  size_t arch_cells = 0;
  {
    std::lock_guard<detail::SpinLock> lock(p.lock);
    bool added = false;
    Cell& cell = cell_of(p, footprint, added);
    cell.size = size;
    cell.energy.add(joules);
    if (History::accepts(joules)) keep_fresh(cell.energy_fresh, cell.energy_fresh_count, joules);
    cell.updated = stamp();
    p.fits_stale = true;
    if (added) arch_cells = evict_for(p, footprint);
  }
  if (arch_cells > kMaxCellsPerArch) trim(p.arch);
}

Prediction CostModel::predict_energy(Pair& p, uint64_t footprint, double size) const {
  Prediction r;
  std::lock_guard<detail::SpinLock> lock(p.lock);
  auto it = p.cells.find(footprint);
  if (it != p.cells.end() && it->second.energy.size() > 0) {
    const History& h = it->second.energy;
    r.seconds = h.estimate();
    r.spread = h.spread();
    r.samples = static_cast<uint32_t>(h.size());
    r.source = Prediction::Source::history;
    return r;
  }
  fresh_fits(p);
  if (p.energy_fit.valid) {
    r.seconds = p.energy_fit(size);
    r.spread = p.energy_fit.rel_error * r.seconds;
    r.source = Prediction::Source::regression;
  }
  return r;
}

void CostModel::record(Pair& p, uint64_t footprint, double size, double seconds) {
  size_t arch_cells = 0;
  {
    std::lock_guard<detail::SpinLock> lock(p.lock);
    bool added = false;
    Cell& cell = cell_of(p, footprint, added);
    cell.size = size;
    cell.history.add(seconds);
    // Not in any file yet: the next save adds it.
    if (History::accepts(seconds)) keep_fresh(cell.fresh, cell.fresh_count, seconds);
    cell.updated = stamp();
    p.total.fetch_add(1, std::memory_order_relaxed);
    p.fits_stale = true;
    // A new footprint: the pair's least recently updated one goes beyond the kernel's cap, the
    // architecture's beyond its own (trim, outside the pair's lock).
    if (added) arch_cells = evict_for(p, footprint);
  }
  if (arch_cells > kMaxCellsPerArch) trim(p.arch);
}

Prediction CostModel::predict(Pair& p, uint64_t footprint, double size) const {
  Prediction r;
  std::lock_guard<detail::SpinLock> lock(p.lock);
  auto it = p.cells.find(footprint);
  if (it != p.cells.end() && it->second.history.size() > 0) {
    const History& h = it->second.history;
    r.seconds = h.estimate();
    r.spread = h.spread();
    r.samples = static_cast<uint32_t>(h.size());
    r.source = Prediction::Source::history;
    return r;
  }
  fresh_fits(p);
  if (p.fit.valid) {
    r.seconds = p.fit(size);
    r.spread = p.fit.rel_error * r.seconds;
    r.samples = p.total.load(std::memory_order_relaxed);
    r.source = Prediction::Source::regression;
    return r;
  }
  if (p.cells.size() == 1 && p.cells.begin()->second.history.size() > 0) {
    // One size seen: scale it linearly with the data until a second size allows a fit.
    const Cell& only = p.cells.begin()->second;
    if (only.size > 0) {
      r.seconds = only.history.estimate() * size / only.size;
      r.spread = r.seconds;
      r.samples = static_cast<uint32_t>(only.history.size());
      r.source = Prediction::Source::regression;
    }
  }
  return r;
}

uint32_t CostModel::samples(const Pair& p) const noexcept {
  return p.total.load(std::memory_order_relaxed);
}

void CostModel::record(const std::string& kernel, const std::string& arch, uint64_t footprint,
                       double size, double seconds) {
  record(*find_or_add(kernel, arch), footprint, size, seconds);
}

Prediction CostModel::predict(const std::string& kernel, const std::string& arch,
                              uint64_t footprint, double size) const {
  Pair* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pairs_.find({kernel, arch});
    if (it == pairs_.end()) return {};
    p = it->second.get();
  }
  return predict(*p, footprint, size);
}

uint32_t CostModel::samples(const std::string& kernel, const std::string& arch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pairs_.find({kernel, arch});
  return it == pairs_.end() ? 0 : it->second->total.load(std::memory_order_relaxed);
}

std::vector<CostModel::Row> CostModel::rows() const {
  std::vector<Row> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, p] : pairs_) {
    std::lock_guard<detail::SpinLock> pl(p->lock);
    fresh_fits(*p);
    for (auto& [fp, cell] : p->cells)
      out.push_back({p->kernel, p->arch, fp, cell.size, cell.history.estimate(),
                     cell.history.spread(), cell.history.count(), p->fit, cell.energy.estimate(),
                     cell.energy.count()});
  }
  return out;
}

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
// TOML text parsed, or an error naming the origin and the line.
toml::table parse_toml(std::string_view text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(origin + ":" + std::to_string(e.source().begin.line) + ": " +
                             std::string(e.description()));
  }
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
  toml::table root = parse_toml(text, origin);
  auto format = root["format"].value<std::string>();
  // value_exact: TOML++'s value<int64_t>() of a float converts it first, undefined for 1e308.
  auto version = root["version"].value_exact<int64_t>();
  auto arch = root["arch"].value<std::string>();
  if (!format || *format != CostModel::kFormat)
    throw std::runtime_error(origin + ": not an hcr cost model (no format = \"" +
                             std::string(CostModel::kFormat) + "\")");
  if (!version || *version != CostModel::kFormatVersion)
    throw std::runtime_error(origin + ": model format version " +
                             (version                 ? std::to_string(*version)
                              : root.contains("version") ? std::string("not an integer")
                                                         : std::string("missing")) +
                             ", this hcr reads version " +
                             std::to_string(CostModel::kFormatVersion));
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
    ParsedCell p{*kernel, 0, *size,
                 static_cast<uint32_t>(std::clamp<int64_t>(*count, 0, 1 << 30)), {}};
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
        throw std::runtime_error(where() +
                                 ": updated must be a non-negative integer "
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
  const std::vector<bool> keep = within_caps(
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
  toml::table root{{"format", CostModel::kFormat},
                   {"version", CostModel::kFormatVersion},
                   {"arch", arch},
                   {"cell", std::move(rows)}};
  std::ostringstream out;
  out << "# hcr learned kernel costs for one device architecture (seconds per launch).\n"
      << "# Regenerated as hcr runs; delete it to start cold.\n"
      << root << "\n";
  return out.str();
}
}  // namespace

std::string CostModel::file_name(const std::string& arch) { return file_name_for(arch); }

std::optional<std::string> CostModel::arch_of(std::string_view text) {
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

std::string CostModel::merged_text(const std::string& arch, const std::vector<SavedCell>& cells,
                                   std::optional<std::string_view> on_disk,
                                   const std::string& origin, std::string* why) {
  std::map<std::pair<std::string, uint64_t>, FileCell> merged;
  if (on_disk) {
    try {
      ParsedModel file = parse_model(*on_disk, origin);
      if (file.arch != arch)
        throw std::runtime_error(origin + ": holds architecture '" + file.arch + "', not '" +
                                 arch + "'");
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
  const std::vector<bool> keep = within_caps(
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
  for (auto& [arch, cells] : snapshot()) texts[arch] = merged_text(arch, cells, std::nullopt, arch);
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

// ---- LinkModel --------------------------------------------------------------------------------

void LinkModel::resize(uint32_t nodes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto grown = std::make_unique<Fit[]>(static_cast<size_t>(nodes) * nodes);
  for (uint32_t f = 0; f < std::min(nodes, nodes_); ++f)
    for (uint32_t t = 0; t < std::min(nodes, nodes_); ++t) {
      Fit& g = grown[f * nodes + t];
      const Fit& o = fits_[f * nodes_ + t];
      g.link = o.link;
      g.sw = o.sw, g.sx = o.sx, g.sy = o.sy, g.sxx = o.sxx, g.sxy = o.sxy;
      publish(g);
    }
  fits_ = std::move(grown);
  nodes_ = nodes;
}

void LinkModel::publish(Fit& f) {
  f.latency.store(f.link.latency, std::memory_order_relaxed);
  f.seconds_per_byte.store(f.link.bandwidth > 0 ? 1.0 / f.link.bandwidth : 0,
                           std::memory_order_relaxed);
}

void LinkModel::declare(uint32_t from, uint32_t to, double latency, double bandwidth) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (from >= nodes_ || to >= nodes_) return;
  Fit& f = fits_[from * nodes_ + to];
  if (f.link.samples != 0) return;  // measured beats declared
  f.link.latency = std::max(0.0, latency);
  f.link.bandwidth = std::max(0.0, bandwidth);
  publish(f);
}

void LinkModel::record(uint32_t from, uint32_t to, uint64_t bytes, double seconds) {
  if (!(seconds >= 0) || !(seconds <= kMaxFileSeconds)) return;  // as History::add
  std::lock_guard<std::mutex> lock(mutex_);
  if (from >= nodes_ || to >= nodes_) return;
  Fit& f = fits_[from * nodes_ + to];
  // Exponentially decayed least squares of seconds = latency + bytes / bandwidth.
  const double keep = 0.95, x = static_cast<double>(bytes), y = seconds;
  f.sw = keep * f.sw + 1;
  f.sx = keep * f.sx + x;
  f.sy = keep * f.sy + y;
  f.sxx = keep * f.sxx + x * x;
  f.sxy = keep * f.sxy + x * y;
  ++f.link.samples;
  double den = f.sw * f.sxx - f.sx * f.sx;
  double slope = den > 1e-9 * f.sxx * f.sw ? (f.sw * f.sxy - f.sx * f.sy) / den : 0;
  if (slope > 0) {
    f.link.bandwidth = 1.0 / slope;
    f.link.latency = std::max(0.0, (f.sy - slope * f.sx) / f.sw);
  } else if (x > 0) {  // one size so far: all of it is bandwidth
    f.link.bandwidth = f.sx / std::max(f.sy, 1e-12);
    f.link.latency = 0;
  }
  publish(f);
}

double LinkModel::predict(uint32_t from, uint32_t to, uint64_t bytes) const {
  if (bytes == 0 || from == to) return 0;
  if (from >= nodes_ || to >= nodes_)  // a node that joined past the model's room
    return static_cast<double>(bytes) / fallback_bandwidth;
  const Fit& f = fits_[from * nodes_ + to];
  double spb = f.seconds_per_byte.load(std::memory_order_relaxed);
  if (spb <= 0) spb = 1.0 / fallback_bandwidth;
  return f.latency.load(std::memory_order_relaxed) + static_cast<double>(bytes) * spb;
}

LinkModel::Link LinkModel::link(uint32_t from, uint32_t to) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (from >= nodes_ || to >= nodes_) return {};
  return fits_[from * nodes_ + to].link;
}

std::vector<LinkModel::NamedLink> LinkModel::measured(const std::vector<std::string>& names) const {
  std::vector<NamedLink> out;
  for (uint32_t f = 0; f < names.size(); ++f)
    for (uint32_t g = 0; g < names.size(); ++g) {
      auto l = link(f, g);
      if (f == g || l.samples == 0 || l.bandwidth <= 0) continue;
      out.push_back({names[f], names[g], l.latency, l.bandwidth});
    }
  return out;
}

void LinkModel::declare(const std::vector<NamedLink>& links,
                        const std::vector<std::string>& names) {
  for (auto& l : links)
    for (uint32_t f = 0; f < names.size(); ++f)
      for (uint32_t g = 0; g < names.size(); ++g)
        if (f != g && names[f] == l.from && names[g] == l.to)
          declare(f, g, l.latency, l.bandwidth);
}

std::vector<LinkModel::NamedLink> LinkModel::merge(std::vector<NamedLink> on_disk,
                                                   const std::vector<NamedLink>& measured) {
  for (const NamedLink& m : measured) {
    auto same = [&](const NamedLink& l) { return l.from == m.from && l.to == m.to; };
    auto it = std::find_if(on_disk.begin(), on_disk.end(), same);
    if (it == on_disk.end()) {
      on_disk.push_back(m);
    } else {
      *it = m;
      // A pair twice in the file (a file edited by hand): once is enough.
      on_disk.erase(std::remove_if(it + 1, on_disk.end(), same), on_disk.end());
    }
  }
  return on_disk;
}

std::string LinkModel::format(const std::vector<NamedLink>& links) {
  toml::array rows;
  for (auto& l : links)
    rows.push_back(toml::table{{"from", l.from},
                               {"to", l.to},
                               {"latency", l.latency},
                               {"bandwidth", l.bandwidth}});
  std::ostringstream out;
  out << "# hcr learned copy costs between memory nodes (seconds, bytes/s).\n"
      << toml::table{{"format", kFormat}, {"version", kFormatVersion}, {"link", std::move(rows)}}
      << "\n";
  return out.str();
}

std::vector<LinkModel::NamedLink> LinkModel::parse(std::string_view text,
                                                   const std::string& origin) {
  toml::table root = parse_toml(text, origin);
  if (root["format"].value<std::string>() != std::string(kFormat) ||
      root["version"].value_exact<int64_t>() != int64_t{kFormatVersion})
    throw std::runtime_error(origin + ": not an hcr link model of version " +
                             std::to_string(kFormatVersion));
  std::vector<NamedLink> out;
  if (auto* links = root["link"].as_array())
    for (auto&& l : *links) {
      auto from = l.at_path("from").value<std::string>();
      auto to = l.at_path("to").value<std::string>();
      auto latency = l.at_path("latency").value<double>();
      auto bandwidth = l.at_path("bandwidth").value<double>();
      auto where = [&] { return origin + ":" + std::to_string(l.source().begin.line); };
      if (!from || !to || !latency || !bandwidth)
        throw std::runtime_error(where() + ": incomplete link");
      // inf or nan would make every copy to the node infinitely long (or unordered).
      if (!(*latency >= 0 && *latency <= kMaxFileSeconds))
        throw std::runtime_error(where() + ": latency must be a non-negative number of seconds, "
                                           "at most 1e9");
      if (!(*bandwidth >= 1 && std::isfinite(*bandwidth)))
        throw std::runtime_error(where() + ": bandwidth must be a number of bytes/s, at least 1");
      out.push_back({*from, *to, *latency, *bandwidth});
    }
  return out;
}

}  // namespace hcr::sched
