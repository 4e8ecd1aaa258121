// Link model: latency and bandwidth between memory nodes, declared or fitted from measured copies,
// and the TOML file the measured links persist to.
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
        if (f != g && names[f] == l.from && names[g] == l.to) declare(f, g, l.latency, l.bandwidth);
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
    rows.push_back(toml::table{
        {"from", l.from}, {"to", l.to}, {"latency", l.latency}, {"bandwidth", l.bandwidth}});
  std::ostringstream out;
  out << "# hcr learned copy costs between memory nodes (seconds, bytes/s).\n"
      << toml::table{{"format", kFormat}, {"version", kFormatVersion}, {"link", std::move(rows)}}
      << "\n";
  return out.str();
}

std::vector<LinkModel::NamedLink> LinkModel::parse(std::string_view text,
                                                   const std::string& origin) {
  toml::table root = internal::parse_toml(text, origin);
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
