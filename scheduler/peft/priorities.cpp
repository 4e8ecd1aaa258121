// peft's automatic priorities: upward ranks from the mean predicted costs, as priority levels.
#include "priorities.hpp"

#include <algorithm>
#include <climits>

namespace hcr::sched {

RankPriorities::RankPriorities(KernelTable& kernels, const ColdStart& cold, const LinkModel& links)
    : kernels_(kernels),
      cold_(cold),
      links_(links),
      ranks_([this](TaskRef t) { return mean_cost(t); },
             [this](uint64_t bytes) { return mean_copy(bytes); }) {}

void RankPriorities::assign(TaskRef t) {
  const int user = std::clamp(t.user_priority(), INT_MIN / kLevels + 1, INT_MAX / kLevels - 1);
  const int level = UpwardRank::level(ranks_.rank(t, ctx_->submitted()));
  t.set_priority(user * kLevels + std::min(level, kLevels - 1));
}

double RankPriorities::mean_cost(TaskRef t) {
  const KernelPairs& pairs = kernels_.of(t);
  const uint64_t all[2] = {~uint64_t{0}, ~uint64_t{0}};
  ColdStart::ArchCosts costs;
  cold_.costs(t, pairs, all, /*estimates=*/false, costs);
  double sum = 0;
  size_t known = 0;
  for (size_t i = 0, n = pairs.count.load(std::memory_order_acquire); i < n; ++i)
    if (costs[i].exec >= 0) {
      sum += costs[i].exec;
      ++known;
    }
  return known ? sum / static_cast<double>(known) : 0;
}

double RankPriorities::mean_copy(uint64_t bytes) const {
  if (bytes == 0) return 0;
  return mean_latency_.load(std::memory_order_relaxed) +
         static_cast<double>(bytes) * mean_seconds_per_byte_.load(std::memory_order_relaxed);
}

void RankPriorities::refresh_mean_copy(uint32_t nodes) {
  double lat = 0, spb = 0;
  size_t n = 0;
  for (uint32_t m = 1; m < nodes; ++m) {
    const double big = 1e9;
    const double l = links_.predict(0, m, 1);
    lat += l;
    spb += (links_.predict(0, m, static_cast<uint64_t>(big)) - l) / big;
    ++n;
  }
  // With every device in host memory, copies cost nothing.
  mean_latency_.store(n ? lat / static_cast<double>(n) : 0, std::memory_order_relaxed);
  mean_seconds_per_byte_.store(n ? spb / static_cast<double>(n) : 0, std::memory_order_relaxed);
}

}  // namespace hcr::sched
