// hcr — the command line of the heterogeneous compute runtime.
#include "cli.hpp"

#include <hcr/sched.hpp>

#include <cstdio>
#include <cstring>
#include <iostream>

namespace hcr::cli {

Args::Args(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0)
      throw Error(ErrorCode::invalid_argument, "unexpected argument '" + a + "'");
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      items_.push_back({a.substr(2, eq - 2), a.substr(eq + 1), true, false});
    } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
      items_.push_back({a.substr(2), argv[i + 1], true, false});
      ++i;
    } else {
      items_.push_back({a.substr(2), "", false, false});
    }
  }
}

std::optional<std::string> Args::value(const std::string& key) {
  for (auto& it : items_)
    if (it.key == key) {
      it.used = true;
      if (!it.has_value) throw Error(ErrorCode::invalid_argument, "--" + key + " needs a value");
      return it.value;
    }
  return std::nullopt;
}

bool Args::flag(const std::string& key) {
  for (auto& it : items_)
    if (it.key == key) {
      it.used = true;
      if (it.has_value) throw Error(ErrorCode::invalid_argument, "--" + key + " takes no value");
      return true;
    }
  return false;
}

uint64_t Args::number(const std::string& key, uint64_t fallback) {
  auto v = value(key);
  if (!v) return fallback;
  try {
    size_t pos = 0;
    unsigned long long n = std::stoull(*v, &pos);
    if (pos == v->size() && (*v)[0] != '-') return n;
  } catch (...) {
  }
  throw Error(ErrorCode::invalid_argument, "--" + key + " '" + *v + "' is not a number");
}

void Args::check_all_used() const {
  for (auto& it : items_)
    if (!it.used) throw Error(ErrorCode::invalid_argument, "unknown option --" + it.key);
}

Config config_from(Args& args) {
  if (auto file = args.value("config")) return Config::load(*file);
  return Config{};
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace hcr::cli

namespace {
const char* kUsage =
    "usage: hcr <command> [options]\n"
    "\n"
    "commands:\n"
    "  devices   plugins searched, loaded and skipped (and why); the devices found; exits 1\n"
    "            when none loads. Each library is probed in a child process: one that crashes\n"
    "            or hangs is named, left out, and the rest listed.\n"
    "            --config FILE  --probe-timeout S (30)  --no-probe (list in this process)\n"
    "  run       the main jobs across every device, checked, with GFLOP/s: --op gemm (tiled\n"
    "            matmul, Freivalds' check) or --op potrf (tiled Cholesky of a random SPD\n"
    "            matrix, ||A - L L^T||_F / ||A||_F checked; n^3/3 flops)\n"
    "            --op gemm|potrf (gemm)  --size N (2048)  --tile T (512; potrf: 256)\n"
    "            --dtype f32|f64 (f32)  --repeat R (1)\n"
    "            --config FILE  --no-check  --no-progress\n"
    "            --trace FILE.json (Chrome/Perfetto)  --gantt FILE.svg\n"
    "            --objective time|energy|weighted  --max-slowdown X (peft's objective)\n"
    "            joules per device and in total are printed where a device has figures\n"
    "  trace summary FILE.json   per-device utilisation, busiest kernels, bytes per link\n"
    "  models    the learned cost tables; --plot FILE.svg draws time against size\n"
    "            --config FILE  --dir DIR  --kernel NAME\n"
    "  serve     the node arbiter: runtimes of several processes on this node ([arbiter]\n"
    "            socket, HCR_ARBITER_SOCKET) share its devices by weight; foreground, until\n"
    "            SIGINT or SIGTERM. Peers: the allowed users and groups only (default: this\n"
    "            user), checked on accept; the socket file is mode 0600, or opened to them by\n"
    "            an ACL (one group: owned by it, 0660). Its directory must be this user's or\n"
    "            root's, writable by nobody else; a socket of another user there is refused.\n"
    "            Started by systemd's socket activation, it takes the socket handed over\n"
    "            (packaging/systemd/hcr-arbiter.socket) after the same checks\n"
    "            --socket PATH  --allow-user NAME|UID ...  --allow-group NAME|GID ...\n"
    "            --release-timeout S (drop a tenant that keeps a revoked device S seconds;\n"
    "            plain decimal, 0: never, else 0.01 to 86400; 0)\n"
    "            --max-connections N (tenants and joins at once; more are turned away; 256)\n"
    "  help      this text\n"
    "\n"
    "environment: HCR_PLUGIN_PATH (extra plugin directories), HCR_SCHED (a policy, below),\n"
    "             HCR_TRACE (write a trace there at the end),\n"
    "             HCR_ARBITER_SOCKET (join that node arbiter),\n"
    "             HCR_LOG (trace|debug|info|warn|error|off; info names each plugin library\n"
    "             before its code runs), HCR_PLUGIN_DISABLE (plugin files never opened)\n";
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0) {
    FILE* out = argc < 2 ? stderr : stdout;
    std::fputs(kUsage, out);
    // The policies registered in this build, so the list never goes stale.
    std::string names;
    for (const std::string& n : hcr::sched::policy_names())
      names += (names.empty() ? "" : ", ") + n;
    std::fprintf(out,
                 "\npolicies ([scheduler] policy, HCR_SCHED): %s\n"
                 "             auto (the default): peft where the devices are of more than one\n"
                 "             architecture, else eager\n",
                 names.c_str());
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "trace") {  // hcr trace summary FILE
      if (argc != 4 || std::strcmp(argv[2], "summary") != 0)
        throw hcr::Error(hcr::ErrorCode::invalid_argument, "usage: hcr trace summary FILE.json");
      return hcr::cli::cmd_trace_summary(argv[3]);
    }
    if (cmd == "serve") return hcr::cli::cmd_serve(argc, argv);
    hcr::cli::Args args(argc, argv, 2);
    if (cmd == "devices") return hcr::cli::cmd_devices(args);
    if (cmd == "run") return hcr::cli::cmd_run(args);
    if (cmd == "models") return hcr::cli::cmd_models(args);
    std::fprintf(stderr, "hcr: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const hcr::Error& e) {
    std::fprintf(stderr, "hcr %s: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hcr %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
