// peft's cold start: speed ratios learned between architectures, and the costs they predict.
#include "cold_start.hpp"

#include <bitset>
#include <cmath>
#include <mutex>
#include <tuple>

namespace hcr::sched {

void ColdStart::costs(TaskRef t, const KernelPairs& kp, const uint64_t devices[2], bool estimates,
                      ArchCosts& out) const {
  const uint64_t fp = t.footprint();
  const double size = t.size();
  const uint32_t n = kp.count.load(std::memory_order_acquire);
  // Every architecture's measurement (a basis for the others'), then the ones asked for.
  uint32_t asked = 0;
  for (uint32_t s = 0; s < n; ++s) {
    const KernelPairs::Arch& a = kp.archs[s];
    Prediction pr = model_.predict(*a.pair, fp, size);
    out[s] = pr.known() ? ArchCost{pr.seconds, true} : ArchCost{};
    if (((a.devices[0].load(std::memory_order_relaxed) & devices[0]) |
         (a.devices[1].load(std::memory_order_relaxed) & devices[1])) != 0)
      asked |= 1u << s;
  }
  for (uint32_t s = 0; s < n; ++s) {
    ArchCost& c = out[s];
    if (c.measured || !(asked & (1u << s))) continue;
    const KernelPairs::Arch& a = kp.archs[s];
    // The measured architecture with the most reliable ratio to this one.
    uint32_t best_n = 0;
    for (uint32_t o = 0; o < n; ++o) {
      if (!out[o].measured) continue;
      const Ratio& r = ratio(a.arch, kp.archs[o].arch);
      const uint32_t rn = r.n.load(std::memory_order_relaxed);
      if (rn > best_n) {
        best_n = rn;
        c.exec = out[o].exec * std::exp(r.log.load(std::memory_order_relaxed));
      }
    }
    if (best_n != 0) continue;
    // No ratio learned yet: the plugins' peak speeds stand for it (where both declare one).
    const double peak = ctx_->device(a.device).peak_gflops;
    for (uint32_t o = 0; o < n && best_n == 0 && peak > 0; ++o) {
      const double other = out[o].measured ? ctx_->device(kp.archs[o].device).peak_gflops : 0;
      if (other > 0) {
        c.exec = out[o].exec * other / peak;
        best_n = 1;
      }
    }
    if (best_n == 0 && estimates) c.exec = ctx_->plugin_estimate(t, a.device);
  }
  for (uint32_t s = 0; s < n; ++s)
    if (!(asked & (1u << s))) out[s] = {};
}

bool ColdStart::ratio_learned(uint8_t a) const {
  if (a >= kArchs) return false;
  for (size_t b = 0; b < kArchs; ++b)
    if (b != a && ratios_[a][b].n.load(std::memory_order_relaxed) > 0) return true;
  return false;
}

void ColdStart::learn(TaskRef t, const KernelPairs& pairs, DeviceId d, double seconds) {
  const uint8_t a = kernels_.arch_index(d);
  if (a >= kArchs) return;
  // Once a ratio rests on many samples, one completion in 16 keeps it current (each costs a
  // prediction per architecture).
  if (ratio_samples_[a].fetch_add(1, std::memory_order_relaxed) >= 64 &&
      (ratio_samples_[a].load(std::memory_order_relaxed) & 15) != 0)
    return;
  std::bitset<kArchs> done;
  done[a] = true;
  for (DeviceId o = 0, count = ctx_->device_count(); o < count; ++o) {
    const uint8_t b = kernels_.arch_index(o);
    if (b >= kArchs || done[b]) continue;
    done[b] = true;
    Prediction there = model_.predict(*pairs[o], t.footprint(), t.size());
    if (there.source != Prediction::Source::history || !(there.seconds > 0)) continue;
    const double x = std::log(seconds / there.seconds);
    std::lock_guard<detail::SpinLock> lock(ratios_lock_);
    for (auto [i, j, v] : {std::tuple{a, b, x}, std::tuple{b, a, -x}}) {
      Ratio& r = ratios_[i][j];
      const uint32_t n = r.n.load(std::memory_order_relaxed);
      const double keep = std::min<double>(n, 15) / (std::min<double>(n, 15) + 1);
      r.log.store(keep * r.log.load(std::memory_order_relaxed) + (1 - keep) * v,
                  std::memory_order_relaxed);
      r.n.store(n + 1, std::memory_order_relaxed);
    }
  }
}

}  // namespace hcr::sched
