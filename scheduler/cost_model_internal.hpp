// What the cost model's parts share: the caps on the cells kept, and TOML parsing. Private to
// the scheduler (cost_model.cpp, model_toml.cpp, link_model.cpp).
#pragma once

#include "cost_model.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hcr::sched::internal {

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

/// TOML text parsed, or an error naming the origin and the line.
toml::table parse_toml(std::string_view text, const std::string& origin);

}  // namespace hcr::sched::internal
