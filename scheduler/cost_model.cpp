// Cost model: robust windowed history, power-law regression over sizes, and the cells per kernel
// and architecture within their caps. The model files are model_toml.cpp's, links link_model.cpp's.
#include "cost_model.hpp"

#include "cost_model_internal.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
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
  const std::vector<bool> keep = internal::within_caps(
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
// once a model has accumulated a few dozen sizes, would cost a worker tens of microseconds per
// task under the pair's lock. Predictions from a cell's own history, the common case, never need
// them.
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
  if (fresh.size() == ModelFile::kFreshKept) fresh.erase(fresh.begin());
  fresh.push_back(x);
  ++count;
}
}  // namespace

void CostModel::record_energy(Pair& p, uint64_t footprint, double size, double joules) {
  record_quantity(p, footprint, size, joules, Quantity::energy);
}

Prediction CostModel::predict_energy(Pair& p, uint64_t footprint, double size) const {
  return predict_quantity(p, footprint, size, Quantity::energy);
}

void CostModel::record(Pair& p, uint64_t footprint, double size, double seconds) {
  record_quantity(p, footprint, size, seconds, Quantity::time);
}

Prediction CostModel::predict(Pair& p, uint64_t footprint, double size) const {
  return predict_quantity(p, footprint, size, Quantity::time);
}

void CostModel::record_quantity(Pair& p, uint64_t footprint, double size, double x, Quantity q) {
  const bool time = q == Quantity::time;
  size_t arch_cells = 0;
  {
    std::lock_guard<detail::SpinLock> lock(p.lock);
    bool added = false;
    Cell& cell = cell_of(p, footprint, added);
    cell.size = size;
    (time ? cell.history : cell.energy).add(x);
    // Not in any file yet: the next save adds it.
    if (History::accepts(x)) {
      if (time) keep_fresh(cell.fresh, cell.fresh_count, x);
      else keep_fresh(cell.energy_fresh, cell.energy_fresh_count, x);
    }
    cell.updated = stamp();
    if (time) p.total.fetch_add(1, std::memory_order_relaxed);  // samples() counts durations
    p.fits_stale = true;
    // A new footprint: the pair's least recently updated one goes beyond the kernel's cap, the
    // architecture's beyond its own (trim, outside the pair's lock).
    if (added) arch_cells = evict_for(p, footprint);
  }
  if (arch_cells > kMaxCellsPerArch) trim(p.arch);
}

Prediction CostModel::predict_quantity(Pair& p, uint64_t footprint, double size, Quantity q) const {
  const bool time = q == Quantity::time;
  Prediction r;
  std::lock_guard<detail::SpinLock> lock(p.lock);
  auto it = p.cells.find(footprint);
  if (it != p.cells.end()) {
    const History& h = time ? it->second.history : it->second.energy;
    if (h.size() > 0) {
      r.seconds = h.estimate();
      r.spread = h.spread();
      r.samples = static_cast<uint32_t>(h.size());
      r.source = Prediction::Source::history;
      return r;
    }
  }
  fresh_fits(p);
  const PowerLaw& fit = time ? p.fit : p.energy_fit;
  if (fit.valid) {
    r.seconds = fit(size);
    r.spread = fit.rel_error * r.seconds;
    if (time) r.samples = p.total.load(std::memory_order_relaxed);  // energy keeps no such count
    r.source = Prediction::Source::regression;
    return r;
  }
  // Durations only: energy is predicted from its own history or its fit, never from one size.
  if (time && p.cells.size() == 1 && p.cells.begin()->second.history.size() > 0) {
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

}  // namespace hcr::sched
