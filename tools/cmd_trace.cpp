// hcr trace summary FILE: per-device utilisation, the busiest kernels, bytes per link — read back
// from the Chrome/Perfetto JSON hcr writes.
#include "cli.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

namespace hcr::cli {

int cmd_trace_summary(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw Error(ErrorCode::invalid_argument, "cannot read trace '" + file + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::invalid_argument, file + ": not JSON: " + e.what());
  }
  if (!j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw Error(ErrorCode::invalid_argument, file + ": no traceEvents array");
  std::map<int, std::string> device_name;
  std::map<int, int> slots;
  if (j.contains("otherData") && j["otherData"].contains("devices"))
    for (auto& d : j["otherData"]["devices"]) {
      device_name[d.value("id", 0)] = d.value("name", std::string("?"));
      slots[d.value("id", 0)] = d.value("slots", 1);
    }
  double t0 = 1e300, t1 = 0;
  struct Use {
    double busy = 0;
    uint64_t tasks = 0;
  };
  std::map<int, Use> devices;
  struct Kernel {
    double seconds = 0;
    uint64_t tasks = 0;
  };
  std::map<std::string, Kernel> kernels;
  std::map<std::string, std::pair<uint64_t, uint64_t>> links;  // bytes, copies
  for (auto& e : j["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    double ts = e.value("ts", 0.0) * 1e-6, dur = e.value("dur", 0.0) * 1e-6;
    t0 = std::min(t0, ts);
    t1 = std::max(t1, ts + dur);
    if (e.value("cat", "") == "task") {
      Use& u = devices[e.value("pid", 0)];
      u.busy += dur;
      ++u.tasks;
      Kernel& k = kernels[e.value("name", std::string("?"))];
      k.seconds += dur;
      ++k.tasks;
    } else if (e.value("cat", "") == "transfer") {
      auto& l = links[e["args"].value("link", std::string("?"))];
      l.first += e["args"].value("bytes", uint64_t{0});
      ++l.second;
    }
  }
  const double span = t1 > t0 ? t1 - t0 : 0;
  std::printf("trace %s: %.3f s from first to last event\n\n", file.c_str(), span);
  std::printf("utilisation per device:\n");
  for (auto& [id, u] : devices) {
    int s = std::max(1, slots.count(id) ? slots[id] : 1);
    std::string name = "#";  // (piecewise: GCC 12 warns falsely, -Wrestrict, of "#" + ...)
    name += std::to_string(id) + " " + device_name[id];
    std::printf("  %-36s %8llu tasks  busy %9.4f s  %5.1f%% of %d slot%s\n", name.c_str(),
                static_cast<unsigned long long>(u.tasks), u.busy,
                span > 0 ? 100.0 * u.busy / (span * s) : 0.0, s, s == 1 ? "" : "s");
  }
  std::vector<std::pair<std::string, Kernel>> busiest(kernels.begin(), kernels.end());
  std::sort(busiest.begin(), busiest.end(),
            [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  std::printf("\nbusiest kernels:\n");
  for (size_t i = 0; i < busiest.size() && i < 10; ++i)
    std::printf("  %-24s %9.4f s in %llu tasks (%.3g ms each)\n", busiest[i].first.c_str(),
                busiest[i].second.seconds, static_cast<unsigned long long>(busiest[i].second.tasks),
                busiest[i].second.seconds / static_cast<double>(busiest[i].second.tasks) * 1e3);
  std::printf("\nbytes per link:\n");
  if (links.empty()) std::printf("  (no copies)\n");
  for (auto& [name, l] : links)
    std::printf("  %-40s %11s in %llu copies\n", name.c_str(), human_bytes(l.first).c_str(),
                static_cast<unsigned long long>(l.second));
  return 0;
}

}  // namespace hcr::cli
