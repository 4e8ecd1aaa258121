// Trace exports: Chrome/Perfetto JSON (nlohmann::json) and an SVG Gantt chart. Tasks of a device
// that runs several at once are laid out on lanes, each task on the first lane free at its start.
#include "trace_recorder.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace hcr::detail {

namespace {

// Lane of each event within its track (device or link), in event order (sorted by start).
std::vector<uint32_t> lanes(const std::vector<TraceEvent>& events, bool tasks) {
  std::vector<uint32_t> lane(events.size(), 0);
  std::map<uint64_t, std::vector<double>> free_at;  // track -> end time per lane
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.kind != (tasks ? TraceEvent::Kind::task : TraceEvent::Kind::transfer)) continue;
    uint64_t track = tasks ? e.device : (uint64_t{e.from} << 32 | e.to);
    auto& ends = free_at[track];
    uint32_t l = 0;
    while (l < ends.size() && ends[l] > e.start + 1e-9) ++l;
    if (l == ends.size()) ends.push_back(0);
    ends[l] = e.end;
    lane[i] = l;
  }
  return lane;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

std::string trace_json(const std::vector<TraceEvent>& events,
                       const std::vector<std::string>& devices, const std::vector<uint32_t>& slots,
                       const std::vector<std::string>& nodes) {
  using nlohmann::json;
  json out = json::object();
  json& ev = out["traceEvents"] = json::array();
  const int kLinks = 100000;  // pid of the links "process"
  for (size_t d = 0; d < devices.size(); ++d) {
    std::string name = "#";  // appended, not "#" + ...: GCC 12 warns falsely (-Wrestrict, PR105329)
    name += std::to_string(d);
    name += ' ';
    name += devices[d];
    ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", d}, {"args", {{"name", name}}}});
    ev.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", d}, {"args", {{"sort_index", d}}}});
  }
  ev.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", kLinks}, {"args", {{"name", "links"}}}});
  auto task_lane = lanes(events, true), link_lane = lanes(events, false);
  std::set<std::pair<uint32_t, uint32_t>> named;
  std::map<std::pair<uint32_t, uint32_t>, int> link_tid;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    const double ts = e.start * 1e6, dur = std::max(0.0, e.end - e.start) * 1e6;
    if (e.kind == TraceEvent::Kind::task) {
      if (named.insert({e.device, task_lane[i]}).second)
        ev.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", e.device},
                      {"tid", task_lane[i]},
                      {"args", {{"name", "slot " + std::to_string(task_lane[i])}}}});
      json args = {{"footprint", hex(e.footprint)}, {"bytes", e.bytes}};
      if (e.predicted >= 0) args["predicted_us"] = e.predicted * 1e6;
      if (e.priority != 0) args["priority"] = e.priority;
      if (e.measured >= 0) args["measured_us"] = e.measured * 1e6;
      if (e.failed) args["failed"] = true;
      if (!e.context.empty()) args["context"] = e.context;
      ev.push_back({{"name", e.kernel},
                    {"cat", "task"},
                    {"ph", "X"},
                    {"pid", e.device},
                    {"tid", task_lane[i]},
                    {"ts", ts},
                    {"dur", dur},
                    {"args", args}});
    } else if (e.kind == TraceEvent::Kind::power) {  // a counter track on the device's process
      ev.push_back({{"name", "power"},
                    {"cat", "energy"},
                    {"ph", "C"},
                    {"pid", e.device},
                    {"ts", ts},
                    {"args", {{"watts", e.measured}}}});
    } else {
      auto key = std::make_pair(e.from, e.to);
      if (!link_tid.count(key)) {
        int tid = static_cast<int>(link_tid.size()) * 16;
        link_tid[key] = tid;
      }
      int tid = link_tid[key] + static_cast<int>(link_lane[i]);
      std::string name = (e.from < nodes.size() ? nodes[e.from] : "?") + " -> " +
                         (e.to < nodes.size() ? nodes[e.to] : "?");
      if (named.insert({kLinks + tid, 0}).second)
        ev.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kLinks},
                      {"tid", tid},
                      {"args", {{"name", name}}}});
      ev.push_back(
          {{"name", "copy"},
           {"cat", "transfer"},
           {"ph", "X"},
           {"pid", kLinks},
           {"tid", tid},
           {"ts", ts},
           {"dur", dur},
           {"args", {{"bytes", e.bytes}, {"from", e.from}, {"to", e.to}, {"link", name}}}});
    }
  }
  json devs = json::array();
  for (size_t d = 0; d < devices.size(); ++d)
    devs.push_back({{"id", d}, {"name", devices[d]}, {"slots", slots[d]}});
  out["displayTimeUnit"] = "ms";
  out["otherData"] = {{"producer", "hcr"}, {"devices", devs}, {"nodes", nodes}};
  return out.dump(1);
}

std::string gantt_svg(const std::vector<TraceEvent>& events,
                      const std::vector<std::string>& devices, const std::vector<uint32_t>& slots,
                      const std::vector<std::string>& nodes) {
  const double W = 1100, label = 190, right = 20, top = 50, row = 20, gap = 8;
  // The chart spans the events, from the first start (not the runtime's start) to the last end.
  double t0 = INFINITY, t1 = 0;
  for (const TraceEvent& e : events) t0 = std::min(t0, e.start);
  if (!std::isfinite(t0)) t0 = 0;
  std::set<std::string> kernels;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> link_rows;  // link -> lanes used
  auto task_lane = lanes(events, true), link_lane = lanes(events, false);
  std::vector<uint32_t> lanes_used(devices.size(), 0);
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    t1 = std::max(t1, e.end - t0);
    if (e.kind == TraceEvent::Kind::task) {
      kernels.insert(e.kernel);
      if (e.device < lanes_used.size())
        lanes_used[e.device] = std::max(lanes_used[e.device], task_lane[i] + 1);
    } else if (e.kind == TraceEvent::Kind::transfer) {
      auto& n = link_rows[{e.from, e.to}];
      n = std::max(n, link_lane[i] + 1);
    }
  }
  if (t1 <= 0) t1 = 1e-3;
  const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  std::map<std::string, const char*> colour;
  size_t ci = 0;
  for (auto& k : kernels) colour[k] = palette[ci++ % 10];
  auto x = [&](double t) { return label + (t - t0) / t1 * (W - label - right); };

  // Row positions: each device gets max(slots, lanes used) lanes; then each link.
  std::vector<double> device_y(devices.size());
  double y = top;
  for (size_t d = 0; d < devices.size(); ++d) {
    device_y[d] = y;
    y += std::max<uint32_t>(std::max<uint32_t>(slots[d], lanes_used[d]), 1) * row + gap;
  }
  std::map<std::pair<uint32_t, uint32_t>, double> link_y;
  for (auto& [link, n] : link_rows) {
    link_y[link] = y;
    y += n * row + gap;
  }
  const double legend_y = y + 10;
  const double H = legend_y + 20 * (1 + (static_cast<double>(kernels.size()) + 4) / 5) + 20;

  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<title>hcr run: tasks per device, copies per link</title>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << label << "\" y=\"20\" font-size=\"14\">hcr run: " << events.size()
    << " events over " << t1 * 1e3 << " ms (from " << t0 * 1e3
    << " ms after the runtime started)</text>\n";
  // Time axis: about eight ticks at round values.
  double step = std::pow(10, std::floor(std::log10(t1 / 8)));  // 8 to 80 ticks
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (t1 / (step * m) <= 10) {  // the first round step giving at most ten
      step *= m;
      break;
    }
  for (double t = 0; t <= t1 + 1e-12; t += step) {
    s << "<line x1=\"" << x(t0 + t) << "\" y1=\"" << top - 6 << "\" x2=\"" << x(t0 + t)
      << "\" y2=\"" << y << "\" stroke=\"#e4e4e4\"/>"
      << "<text x=\"" << x(t0 + t) << "\" y=\"" << top - 10 << "\" text-anchor=\"middle\">"
      << t * 1e3 << " ms</text>\n";
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    uint32_t n = std::max<uint32_t>(std::max<uint32_t>(slots[d], lanes_used[d]), 1);
    s << "<g class=\"device-row\" data-device=\"" << d << "\">\n"
      << "<rect x=\"" << label << "\" y=\"" << device_y[d] << "\" width=\"" << W - label - right
      << "\" height=\"" << n * row << "\" fill=\"#f7f7f7\"/>\n"
      << "<text x=\"" << label - 8 << "\" y=\"" << device_y[d] + 14 << "\" text-anchor=\"end\">#"
      << d << " " << escape(devices[d]) << "</text>\n";
    for (size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      if (e.kind != TraceEvent::Kind::task || e.device != d) continue;
      double w = std::max(0.5, x(e.end) - x(e.start));
      s << "<rect class=\"task\" x=\"" << x(e.start) << "\" y=\""
        << device_y[d] + task_lane[i] * row + 1 << "\" width=\"" << w << "\" height=\"" << row - 2
        << "\" fill=\"" << (e.failed ? "#000000" : colour[e.kernel]) << "\"><title>"
        << escape(e.kernel) << ": " << (e.end - e.start) * 1e3 << " ms";
      if (e.predicted >= 0) s << " (predicted " << e.predicted * 1e3 << " ms)";
      s << "</title></rect>\n";
    }
    s << "</g>\n";
  }
  for (auto& [link, n] : link_rows) {
    std::string name = (link.first < nodes.size() ? nodes[link.first] : "?") + " \xe2\x86\x92 " +
                       (link.second < nodes.size() ? nodes[link.second] : "?");
    s << "<g class=\"link-row\">\n"
      << "<rect x=\"" << label << "\" y=\"" << link_y[link] << "\" width=\"" << W - label - right
      << "\" height=\"" << n * row << "\" fill=\"#eef3f8\"/>\n"
      << "<text x=\"" << label - 8 << "\" y=\"" << link_y[link] + 14 << "\" text-anchor=\"end\">"
      << escape(name) << "</text>\n";
    for (size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      if (e.kind != TraceEvent::Kind::transfer || e.from != link.first || e.to != link.second)
        continue;
      double w = std::max(0.5, x(e.end) - x(e.start));
      s << "<rect class=\"copy\" x=\"" << x(e.start) << "\" y=\""
        << link_y[link] + link_lane[i] * row + 4 << "\" width=\"" << w << "\" height=\"" << row - 8
        << "\" fill=\"#7f7f7f\"><title>" << e.bytes << " bytes in " << (e.end - e.start) * 1e3
        << " ms</title></rect>\n";
    }
    s << "</g>\n";
  }
  double lx = label;
  double ly = legend_y;
  int k = 0;
  for (auto& [kernel, c] : colour) {
    s << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"12\" height=\"12\" fill=\"" << c
      << "\"/><text x=\"" << lx + 16 << "\" y=\"" << ly + 10 << "\">" << escape(kernel)
      << "</text>\n";
    lx += 170;
    if (++k % 5 == 0) {
      lx = label;
      ly += 20;
    }
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace hcr::detail
