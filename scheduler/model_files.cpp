// The model directory as <hcr/sched.hpp> shows it: where learned models persist for a
// configuration on this host, and their cells for reports (`hcr models`).
#include "cost_model.hpp"

#include <hcr/sched.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace hcr::sched {

std::string model_directory(const Config& config) {
  std::string dir = config.model_dir;
  if (dir == "off") return {};
  if (dir.empty()) {
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg && xdg[0] == '/')
      dir = std::string(xdg) + "/hcr/models";
    else if (const char* home = std::getenv("HOME"); home && *home)
      dir = std::string(home) + "/.cache/hcr/models";
    else return {};
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  return (std::filesystem::path(dir) / host).string();
}

std::vector<ModelRow> read_models(const std::string& dir, std::vector<std::string>& warnings) {
  CostModel model;
  model.load(dir, warnings);
  std::vector<ModelRow> rows;
  for (auto& r : model.rows())
    rows.push_back({r.kernel, r.arch, r.footprint, r.size, r.estimate, r.spread, r.samples,
                    r.fit.valid, r.fit.a, r.fit.b, r.fit.c, r.joules, r.joules_samples});
  return rows;
}

}  // namespace hcr::sched
