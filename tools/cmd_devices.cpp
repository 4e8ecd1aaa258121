// hcr devices: what the loader searched, loaded and skipped, and the devices it found.
#include "cli.hpp"

#include <cstdio>

namespace hcr::cli {

int cmd_devices(Args& args) {
  Config config = config_from(args);
  args.check_all_used();
  Runtime rt(config);
  const LoadReport& r = rt.load_report();

  std::printf("plugin directories (in search order):\n");
  for (auto& d : r.dirs)
    std::printf("  %-9s %s  [%s]%s%s\n", d.used ? "searched" : "skipped", d.path.c_str(),
                d.origin.c_str(), d.reason.empty() ? "" : ": ", d.reason.c_str());

  std::printf("\nplugins:\n");
  if (r.plugins.empty()) std::printf("  (none found)\n");
  for (auto& p : r.plugins) {
    bool loaded = p.status == PluginRecord::Status::loaded;
    std::string what = p.name.empty() ? std::string("?") : p.name;
    if (!p.version.empty()) what += " " + p.version;
    std::printf("  %-8s %-16s %s", loaded ? "loaded" : "skipped", what.c_str(),
                p.path.empty() ? "" : p.path.c_str());
    if (loaded) std::printf("  (%zu device%s)\n", p.devices, p.devices == 1 ? "" : "s");
    else std::printf("\n           why: %s\n", p.reason.c_str());
  }

  std::printf("\ndevices:\n");
  if (rt.devices().empty()) std::printf("  (none)\n");
  for (const Device& d : rt.devices())
    std::printf("  #%-2u %-11s %-32s memory %-10s compute units %-4u slots %-3u node %u  "
                "arch \"%s\"  [%s]\n",
                d.id, std::string(kind_name(d.kind)).c_str(), d.name.c_str(),
                human_bytes(d.memory_bytes).c_str(), d.compute_units, d.concurrency,
                d.memory_node, d.arch.c_str(), d.backend.c_str());
  std::printf("\nscheduler policy: %s\n", std::string(rt.policy()).c_str());
  return 0;
}

}  // namespace hcr::cli
