// hcr trace summary FILE: per-device utilisation, the busiest kernels, bytes per link — read back
// from the Chrome/Perfetto JSON hcr writes.
#include "cli.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

namespace hcr::cli {

namespace {

// The trace file, opened for reading only if it is a regular file: a FIFO or a device is refused
// before anything is read from it (opened non-blocking, so that a FIFO with no writer cannot
// hang the open either).
std::unique_ptr<FILE, int (*)(FILE*)> open_trace(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    throw Error(ErrorCode::invalid_argument,
                "cannot read trace '" + file + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::invalid_argument,
                "trace '" + file + "' is not a regular file (a trace is a JSON file hcr wrote)");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FILE* f = ::fdopen(fd, "r");
  if (f == nullptr) {
    ::close(fd);
    throw Error(ErrorCode::invalid_argument,
                "cannot read trace '" + file + "': " + std::strerror(errno));
  }
  return {f, &std::fclose};
}

}  // namespace

int cmd_trace_summary(const std::string& file) {
  auto in = open_trace(file);
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
  auto add = [&](const nlohmann::json& e) {
    if (!e.is_object() || e.value("ph", "") != "X") return;
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
    } else if (e.value("cat", "") == "transfer" && e.contains("args") && e["args"].is_object()) {
      auto& l = links[e["args"].value("link", std::string("?"))];
      l.first += e["args"].value("bytes", uint64_t{0});
      ++l.second;
    }
  };
  // Read as a stream: each element of traceEvents is summed up as soon as it is parsed, then
  // dropped, so memory stays that of one event (and of otherData) whatever the file's size.
  std::string top_key;
  bool events_array = false;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(
        in.get(), [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          using E = nlohmann::json::parse_event_t;
          if (depth == 1 && event == E::key) top_key = parsed.get<std::string>();
          if (top_key != "traceEvents") return true;
          if (depth == 1 && event == E::array_start) events_array = true;
          if (depth == 2 && (event == E::object_end || event == E::value)) {
            add(parsed);
            return false;  // summed up: not kept
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::invalid_argument, file + ": not JSON: " + e.what());
  } catch (const std::exception& e) {
    throw Error(ErrorCode::invalid_argument, file + ": " + e.what());
  }
  if (!events_array) throw Error(ErrorCode::invalid_argument, file + ": no traceEvents array");
  std::map<int, std::string> device_name;
  std::map<int, int> slots;
  if (j.is_object() && j.contains("otherData") && j["otherData"].is_object() &&
      j["otherData"].contains("devices") && j["otherData"]["devices"].is_array())
    for (auto& d : j["otherData"]["devices"]) {
      if (!d.is_object()) continue;
      device_name[d.value("id", 0)] = d.value("name", std::string("?"));
      slots[d.value("id", 0)] = d.value("slots", 1);
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
