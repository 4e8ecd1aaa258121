// hcr models: the learned cost tables (kernel, architecture, footprint, estimate, spread, samples)
// and, with --plot, an SVG of time against size per architecture with the fitted power laws.
#include "cli.hpp"

#include "safe_file.hpp"

#include <hcr/sched.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace hcr::cli {

namespace {

std::string fit_text(const sched::ModelRow& r) {
  if (!r.fit_valid) return "-";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3g*n^%.2f%+.3g", r.fit_a, r.fit_b, r.fit_c);
  return buf;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

// One panel per kernel: log-log axes, a colour per architecture, points for measured cells and
// a line for the fitted power law.
void write_plot(const std::vector<sched::ModelRow>& rows, const std::string& file) {
  std::map<std::string, std::vector<const sched::ModelRow*>> by_kernel;
  std::set<std::string> archs;
  for (auto& r : rows)
    if (r.size > 0 && r.seconds > 0) {
      by_kernel[r.kernel].push_back(&r);
      archs.insert(r.arch);
    }
  const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                           "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  std::map<std::string, const char*> colour;
  size_t i = 0;
  for (auto& a : archs) colour[a] = palette[i++ % 10];

  const int W = 640, H = 400, L = 80, R = 20, T = 40, B = 50;
  const int panels = std::max<int>(1, static_cast<int>(by_kernel.size()));
  const int legend = 20 * static_cast<int>(archs.size()) + 20;
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\""
      << H * panels + legend << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  int panel = 0;
  for (auto& [kernel, cells] : by_kernel) {
    double x0 = INFINITY, x1 = 0, y0 = INFINITY, y1 = 0;
    for (auto* r : cells) {
      x0 = std::min(x0, r->size);
      x1 = std::max(x1, r->size);
      y0 = std::min(y0, r->seconds);
      y1 = std::max(y1, r->seconds);
    }
    double lx0 = std::floor(std::log10(x0)), lx1 = std::ceil(std::log10(x1));
    double ly0 = std::floor(std::log10(y0)), ly1 = std::ceil(std::log10(y1));
    if (lx1 <= lx0) lx1 = lx0 + 1;
    if (ly1 <= ly0) ly1 = ly0 + 1;
    const int oy = panel * H;
    auto px = [&](double x) { return L + (std::log10(x) - lx0) / (lx1 - lx0) * (W - L - R); };
    auto py = [&](double y) {
      return oy + H - B - (std::log10(y) - ly0) / (ly1 - ly0) * (H - T - B);
    };
    svg << "<g class=\"panel\" data-kernel=\"" << escape(kernel) << "\">\n"
        << "<text x=\"" << L << "\" y=\"" << oy + 24 << "\" font-size=\"15\">" << escape(kernel)
        << ": seconds per task against task size (bytes)</text>\n"
        << "<rect x=\"" << L << "\" y=\"" << oy + T << "\" width=\"" << W - L - R << "\" height=\""
        << H - T - B << "\" fill=\"none\" stroke=\"#444\"/>\n";
    for (double e = lx0; e <= lx1; ++e)
      svg << "<line x1=\"" << px(std::pow(10, e)) << "\" y1=\"" << oy + T << "\" x2=\""
          << px(std::pow(10, e)) << "\" y2=\"" << oy + H - B << "\" stroke=\"#ddd\"/>"
          << "<text x=\"" << px(std::pow(10, e)) << "\" y=\"" << oy + H - B + 16
          << "\" text-anchor=\"middle\">1e" << e << "</text>\n";
    for (double e = ly0; e <= ly1; ++e)
      svg << "<line x1=\"" << L << "\" y1=\"" << py(std::pow(10, e)) << "\" x2=\"" << W - R
          << "\" y2=\"" << py(std::pow(10, e)) << "\" stroke=\"#ddd\"/>"
          << "<text x=\"" << L - 6 << "\" y=\"" << py(std::pow(10, e)) + 4
          << "\" text-anchor=\"end\">1e" << e << " s</text>\n";
    std::set<std::string> fitted;
    for (auto* r : cells) {
      svg << "<circle class=\"cell\" cx=\"" << px(r->size) << "\" cy=\"" << py(r->seconds)
          << "\" r=\"4\" fill=\"" << colour[r->arch] << "\"><title>" << escape(r->arch) << ": "
          << r->seconds << " s at " << r->size << " B, " << r->samples
          << " samples</title></circle>\n";
      if (r->fit_valid && fitted.insert(r->arch).second) {
        svg << "<polyline class=\"fit\" fill=\"none\" stroke=\"" << colour[r->arch]
            << "\" stroke-width=\"1.5\" points=\"";
        for (int k = 0; k <= 40; ++k) {
          double x = std::pow(10, lx0 + (lx1 - lx0) * k / 40.0);
          double y = r->fit_a * std::pow(x, r->fit_b) + r->fit_c;
          if (y > 0 && std::log10(y) >= ly0 && std::log10(y) <= ly1)
            svg << px(x) << "," << py(y) << " ";
        }
        svg << "\"/>\n";
      }
    }
    svg << "</g>\n";
    ++panel;
  }
  int y = H * panels + 10;
  for (auto& a : archs) {
    svg << "<rect x=\"" << L << "\" y=\"" << y << "\" width=\"12\" height=\"12\" fill=\""
        << colour[a] << "\"/><text x=\"" << L + 18 << "\" y=\"" << y + 11 << "\">" << escape(a)
        << "</text>\n";
    y += 20;
  }
  svg << "</svg>\n";
  try {  // replaced whole, never through a planted link; a write error (a full disk) reported
    files::write_file(file, svg.str());
  } catch (const files::FileError& e) {
    throw Error(ErrorCode::invalid_argument, std::string("cannot write the plot: ") + e.what());
  }
}

}  // namespace

int cmd_models(Args& args) {
  auto dir_arg = args.value("dir");
  auto plot = args.value("plot");
  auto kernel = args.value("kernel");
  Config config = config_from(args);
  args.check_all_used();
  std::string dir = dir_arg ? *dir_arg : sched::model_directory(config);
  if (dir.empty()) throw Error(ErrorCode::config, "model persistence is off (model_dir = \"off\")");
  // A directory asked for by name must be there (the default one appears with the first run).
  std::error_code ec;
  if (dir_arg && !std::filesystem::is_directory(dir, ec))
    throw Error(ErrorCode::invalid_argument,
                "--dir '" + dir + "': " +
                    (std::filesystem::exists(dir, ec) ? "not a directory" : "no such directory"));
  std::vector<std::string> warnings;
  auto rows = sched::read_models(dir, warnings);
  for (auto& w : warnings) std::fprintf(stderr, "hcr models: %s\n", w.c_str());
  if (kernel) {
    std::set<std::string> known;
    for (const sched::ModelRow& r : rows) known.insert(r.kernel);
    if (!known.count(*kernel)) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      throw Error(ErrorCode::invalid_argument,
                  "--kernel '" + *kernel + "': no learned costs for it in " + dir + " (" +
                      (list.empty() ? "none learned yet" : "kernels: " + list) + ")");
    }
    rows.erase(std::remove_if(rows.begin(), rows.end(),
                              [&](const sched::ModelRow& r) { return r.kernel != *kernel; }),
               rows.end());
  }
  std::printf("models in %s\n", dir.c_str());
  if (rows.empty()) {
    std::printf("(no learned costs yet: run something with policy dmda)\n");
  } else {
    // J/task: energy per launch above the device's idle draw, where one was measured or modelled.
    std::printf("%-16s %-28s %-18s %12s %12s %12s %8s %10s  %s\n", "kernel", "arch", "footprint",
                "size (B)", "mean (s)", "spread (s)", "samples", "J/task", "fit t(n)");
    for (auto& r : rows) {
      char fp[32], joules[32];
      std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(r.footprint));
      if (r.joules_samples > 0) std::snprintf(joules, sizeof joules, "%.4g", r.joules);
      else std::snprintf(joules, sizeof joules, "-");
      std::printf("%-16s %-28s %-18s %12.0f %12.4g %12.3g %8u %10s  %s\n", r.kernel.c_str(),
                  r.arch.c_str(), fp, r.size, r.seconds, r.spread, r.samples, joules,
                  fit_text(r).c_str());
    }
  }
  if (plot) {
    write_plot(rows, *plot);
    std::printf("plot: %s\n", plot->c_str());
  }
  return 0;
}

}  // namespace hcr::cli
