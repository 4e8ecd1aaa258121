// The CPU's energy meter: Linux powercap's RAPL package domains (/sys/class/powercap/intel-rapl:N,
// which AMD's Zen kernels expose under the same name). Each domain counts microjoules in energy_uj
// and wraps around at max_energy_range_uj; the meter unwraps each one and sums the packages (their
// subzones, intel-rapl:N:M, are parts of the package and not added again). A domain whose counter
// cannot be read (no RAPL, or energy_uj readable by root only, as since Linux 5.10) is left out;
// with none left there is no meter. What it measures is the whole package, whoever runs on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hcr::cpu {

class RaplMeter {
 public:
  /// Reads the package domains under `root` (a powercap directory). No domain readable: empty().
  explicit RaplMeter(const std::filesystem::path& root) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      // Packages only: "intel-rapl:0", not the subzone "intel-rapl:0:1" nor the control type.
      if (name.rfind("intel-rapl:", 0) != 0 || name.find(':', 11) != std::string::npos) continue;
      Domain d;
      d.counter = e.path() / "energy_uj";
      const std::optional<uint64_t> now = read_number(d.counter);
      if (!now) continue;
      d.last = *now;
      d.range = read_number(e.path() / "max_energy_range_uj").value_or(0);
      domains_.push_back(std::move(d));
    }
    last_time_ = std::chrono::steady_clock::now();
  }

  bool empty() const noexcept { return domains_.empty(); }
  size_t domains() const noexcept { return domains_.size(); }

  struct Reading {
    double joules = 0;  // since the meter was made
    double watts = -1;  // over the interval since the previous reading that saw a change
  };
  /// Reads every domain's counter now. A counter that reads lower than before wrapped around (at
  /// its max_energy_range_uj, or 2^32 µJ where that is unknown); one that cannot be read this time
  /// adds nothing.
  Reading read() {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t added = 0;
    for (Domain& d : domains_) {
      const std::optional<uint64_t> now = read_number(d.counter);
      if (!now) continue;
      const uint64_t range = d.range > 0 ? d.range : uint64_t{1} << 32;
      added += *now >= d.last ? *now - d.last : range - d.last + *now;
      d.last = *now;
    }
    total_uj_ += added;
    const auto t = std::chrono::steady_clock::now();
    if (added > 0) {
      const double dt = std::chrono::duration<double>(t - last_time_).count();
      if (dt > 0) watts_ = static_cast<double>(added) * 1e-6 / dt;
      last_time_ = t;
    }
    return {static_cast<double>(total_uj_) * 1e-6, watts_};
  }

 private:
  struct Domain {
    std::filesystem::path counter;
    uint64_t last = 0;
    uint64_t range = 0;
  };
  static std::optional<uint64_t> read_number(const std::filesystem::path& p) {
    std::ifstream in(p);
    uint64_t v = 0;
    if (!(in >> v)) return std::nullopt;
    return v;
  }

  std::mutex mutex_;
  std::vector<Domain> domains_;
  uint64_t total_uj_ = 0;
  double watts_ = -1;
  std::chrono::steady_clock::time_point last_time_;
};

}  // namespace hcr::cpu
