// Checks of a configuration's [[backend]] tables taken together, shared by the TOML parser (which
// reports them with the file's other errors) and the plugin loader (for a Config built by hand).
#pragma once

#include <hcr/config.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace hcr::detail {

/// One problem found in a configuration: where ("file:line", or the table's origin), then what.
struct ConfigProblem {
  std::string where;
  std::string text;  ///< "key: what is wrong"
};

/// The line number at the end of an origin ("devices.toml:12" -> 12; 0 when there is none).
inline size_t origin_line(const std::string& origin) {
  const size_t colon = origin.rfind(':');
  if (colon == std::string::npos || colon + 1 == origin.size()) return 0;
  size_t line = 0;
  for (size_t i = colon + 1; i < origin.size(); ++i) {
    if (origin[i] < '0' || origin[i] > '9') return 0;
    line = line * 10 + static_cast<size_t>(origin[i] - '0');
  }
  return line;
}

/// The problems as one message, in line order: one "where: key: what" line each, the first 50
/// (a file of a million mistakes is refused with a readable message, not a huge one).
inline std::string problems_text(std::vector<ConfigProblem> problems) {
  constexpr size_t kShown = 50;
  std::stable_sort(problems.begin(), problems.end(), [](const auto& a, const auto& b) {
    return origin_line(a.where) < origin_line(b.where);
  });
  std::string text;
  for (size_t i = 0; i < problems.size() && i < kShown; ++i)
    text += (text.empty() ? "" : "\n") + problems[i].where + ": " + problems[i].text;
  if (problems.size() > kShown)
    text += "\n(and " + std::to_string(problems.size() - kShown) + " more)";
  return text;
}

/// Two enabled tables of one plugin make two instances. Core cannot tell which keys select a
/// backend's devices (it never branches on a backend), but two tables whose options are the same
/// certainly drive the same devices twice: each later such table is a problem. Tables that differ
/// in some option are taken to select different devices (memory_limit and enabled are hcr's own
/// keys and do not count).
inline std::vector<ConfigProblem> duplicate_tables(const std::vector<BackendConfig>& tables) {
  std::vector<ConfigProblem> out;
  auto sorted = [](std::vector<std::pair<std::string, std::string>> o) {
    std::sort(o.begin(), o.end());
    return o;
  };
  for (size_t i = 0; i < tables.size(); ++i) {
    if (!tables[i].enabled) continue;
    const auto mine = sorted(tables[i].options);
    for (size_t j = 0; j < i; ++j)
      if (tables[j].enabled && tables[j].name == tables[i].name &&
          sorted(tables[j].options) == mine) {
        out.push_back({tables[i].origin,
                       "backend: a second table for plugin '" + tables[i].name +
                           "' with the same options as the one at " + tables[j].origin +
                           ": the two would drive the same devices twice (remove one, or give "
                           "them different options that select devices)"});
        break;
      }
  }
  return out;
}

}  // namespace hcr::detail
