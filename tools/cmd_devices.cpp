// hcr devices: what the loader searched, loaded and skipped, and the devices it found.
//
// A plugin that crashes or hangs in its static initialisers, plugin_create or device_count takes
// down the process that loads it: nothing in-process can catch that. So the listing runs in a
// child process (this program again: `hcr devices --probe-child FD`) that passes on, through FD,
// each step the loader announces before it calls into a library ("opening plugin library F",
// "initialising plugin 'N' from F", ... — core/src/plugins/ logs them). When the child dies or
// stops answering, the parent names the library and the step, leaves that library out
// (HCR_PLUGIN_DISABLE) and lists again; the last listing shows what was left out and why.
#include "cli.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

extern char** environ;

namespace hcr::cli {

namespace {

// The child tells the parent where it is, a line each: "FILE\tSTEP" while the loader is inside a
// library's code, "\tbetween" when it is back in its own, "\tlisted" once the listing is printed
// and "\tfinished" just before the child returns (anything else ending it is a crash).
// "FILE\tWHAT\n"...: found by earlier probes
constexpr const char* kProbedEnv = "HCR_DEVICES_PROBED";
constexpr int kChildFd = 3;

struct Step {
  std::string file;  // empty: not inside a library
  std::string what;  // "in plugin_create", ...
};

// The step a loader log line announces, if it announces one.
std::optional<Step> step_of(std::string_view m) {
  auto starts = [&](std::string_view p) { return m.substr(0, p.size()) == p; };
  auto ends = [&](std::string_view s) {
    return m.size() >= s.size() && m.substr(m.size() - s.size()) == s;
  };
  if (starts("opening plugin library "))
    return Step{std::string(m.substr(23)),
                "while loading (its static initialisers or " HCR_PLUGIN_ENTRY_SYMBOL ")"};
  const size_t from = m.find("' from ");
  if (starts("initialising plugin '") && from != std::string_view::npos)
    return Step{std::string(m.substr(from + 7)), "in plugin_create"};
  if (starts("plugin '") && from != std::string_view::npos) {
    const std::string_view rest = m.substr(from + 7);
    if (ends(": counting devices"))
      return Step{std::string(rest.substr(0, rest.size() - 18)), "in device_count"};
    const size_t at = rest.rfind(": describing device ");
    if (at != std::string_view::npos)
      return Step{std::string(rest.substr(0, at)), "in device_info"};
  }
  if (starts("plugin ") && (m.find(": loaded, ") != std::string_view::npos ||
                            m.find(" skipped: ") != std::string_view::npos))
    return Step{"", "between"};
  return std::nullopt;
}

void tell(int fd, const std::string& line) {
  if (fd < 0) return;
  const std::string l = line + "\n";
  for (size_t done = 0; done < l.size();) {
    ssize_t n = ::write(fd, l.data() + done, l.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent went away: nothing to tell
    done += static_cast<size_t>(n);
  }
}

// Libraries earlier probes found crashing or hanging: file -> what happened.
std::map<std::string, std::string> probed_from_environment() {
  std::map<std::string, std::string> out;
  const char* env = std::getenv(kProbedEnv);
  if (env == nullptr) return out;
  std::stringstream ss(env);
  for (std::string line; std::getline(ss, line);)
    if (auto tab = line.find('\t'); tab != std::string::npos)
      out[line.substr(0, tab)] = line.substr(tab + 1);
  return out;
}

// Loads as `config` says and prints what happened. 0 when some device loaded.
int list(const Config& config, int fd) {
  const auto probed = probed_from_environment();
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
    std::string why = p.reason;
    if (auto it = probed.find(p.path); it != probed.end() && !loaded)
      why = it->second + " (found probing in a child process; left out)";
    std::printf("  %-8s %-16s %s", loaded ? "loaded" : "skipped", what.c_str(),
                p.path.empty() ? "" : p.path.c_str());
    if (!loaded) std::printf("\n           why: %s\n", why.c_str());
    else if (p.devices == 0 && !why.empty())
      std::printf("  (0 devices)\n           why: %s\n", why.c_str());
    else std::printf("  (%zu device%s)\n", p.devices, p.devices == 1 ? "" : "s");
  }

  std::printf("\ndevices:\n");
  const std::vector<Device> devices = rt.devices();
  if (devices.empty()) std::printf("  (none)\n");
  for (const Device& d : devices)
    std::printf("  #%-2u %-11s %-32s memory %-10s compute units %-4u slots %-3u node %u  "
                "arch \"%s\"  [%s]\n",
                d.id, std::string(kind_name(d.kind)).c_str(), d.name.c_str(),
                human_bytes(d.memory_bytes).c_str(), d.compute_units, d.concurrency, d.memory_node,
                d.arch.c_str(), d.backend.c_str());
  std::printf("\nscheduler policy: %s\n", std::string(rt.policy()).c_str());
  std::fflush(stdout);
  tell(fd, "\tlisted");
  if (devices.empty()) {
    std::fprintf(stderr, "hcr devices: no device loaded (the plugins above say why)\n");
    return 1;
  }
  return 0;
}

// The child: lists, passing every loader step on to the parent through `fd`. Log lines go to
// stderr at the level the user asked for (HCR_LOG or [runtime] log_level); the steps are logged at
// info and debug, so the runtime logs at debug and this sink filters.
int child(Config config, int fd) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // not for programs a plugin may start
  LogLevel user = log::level();      // HCR_LOG, or warn
  if (config.log_level) user = *config.log_level;
  if (const char* v = std::getenv("HCR_LOG"); v && *v && config.use_environment)
    if (auto l = log::parse_level(v)) user = *l;
  ::unsetenv("HCR_LOG");
  config.log_level = LogLevel::debug;
  log::set_sink([fd, user](LogLevel l, std::string_view m) {
    if (auto s = step_of(m)) tell(fd, s->file + "\t" + s->what);
    if (l >= user && l != LogLevel::off)
      std::fprintf(stderr, "hcr: %s: %.*s\n", std::string(log::level_name(l)).c_str(),
                   static_cast<int>(m.size()), m.data());
  });
  int rc = 1;
  try {
    rc = list(config, fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hcr devices: %s\n", e.what());
  }
  std::fflush(stdout);
  tell(fd, "\tfinished");
  return rc;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// One child: what it ended with. `culprit` is set when a library killed or hung it.
struct Outcome {
  bool ran = false;  // the child could be started
  int rc = 1;
  std::optional<std::pair<std::string, std::string>> culprit;  // file, what happened
  std::string failure;  // a death outside any library; why it could not start when !ran
};

Outcome probe(const std::vector<std::string>& args, const std::vector<std::string>& env,
              unsigned timeout_s) {
  Outcome out;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.failure = std::strerror(errno);
    return out;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], kChildFd);  // dup2 clears O_CLOEXEC there
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int err =
      ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    out.failure = std::strerror(err);
    return out;
  }
  out.ran = true;

  using Clock = std::chrono::steady_clock;
  Step at;  // where the child last said it was
  bool listed = false, finished = false, hung = false;
  std::string pending;
  auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (bool open = true; open;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      hung = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // the child's end closed: it is gone
    pending.append(buf, static_cast<size_t>(got));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      const size_t tab = line.find('\t');
      if (tab == std::string::npos) continue;
      at = {line.substr(0, tab), line.substr(tab + 1)};
      listed = listed || at.what == "listed";
      finished = finished || at.what == "finished";
      deadline = Clock::now() + std::chrono::seconds(timeout_s);  // it answered
    }
  }
  ::close(fds[0]);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (finished && !hung && WIFEXITED(status)) {
    out.rc = WEXITSTATUS(status);
    return out;
  }
  const std::string how = hung ? "hung (no answer within " + std::to_string(timeout_s) + " s)"
                          : WIFSIGNALED(status)
                              ? "crashed (" + signal_name(WTERMSIG(status)) + ")"
                              : "crashed (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
  if (!at.file.empty()) {
    out.culprit = std::make_pair(at.file, how + " " + at.what);
  } else {
    out.failure =
        "the listing process " + how +
        (listed ? " after listing, while the plugins shut down" : " outside any plugin library");
  }
  return out;
}

// Lists through probing children until one finishes, leaving out each library that killed or
// hung one. Falls back to listing here when no child can be started.
int probed_list(const Config& config, const std::optional<std::string>& config_file,
                unsigned timeout_s) {
  std::vector<std::string> args = {"hcr", "devices", "--probe-child", std::to_string(kChildFd)};
  if (config_file) {
    args.push_back("--config");
    args.push_back(*config_file);
  }
  const char* disabled_env = std::getenv("HCR_PLUGIN_DISABLE");
  std::string disabled = disabled_env ? disabled_env : "";
  std::string probed;  // kProbedEnv's value
  for (int round = 0; round < 32; ++round) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view v(*e);
      if (v.rfind("HCR_PLUGIN_DISABLE=", 0) == 0 || v.rfind(std::string(kProbedEnv) + "=", 0) == 0)
        continue;
      env.emplace_back(v);
    }
    if (!disabled.empty()) env.push_back("HCR_PLUGIN_DISABLE=" + disabled);
    if (!probed.empty()) env.push_back(std::string(kProbedEnv) + "=" + probed);
    Outcome o = probe(args, env, timeout_s);
    if (!o.ran) {
      std::fprintf(stderr,
                   "hcr devices: cannot start a probing process (%s); listing here, "
                   "unprotected from a plugin that crashes\n",
                   o.failure.c_str());
      return list(config, -1);
    }
    if (o.culprit) {
      std::fprintf(stderr, "hcr devices: %s %s; leaving it out and listing again\n",
                   o.culprit->first.c_str(), o.culprit->second.c_str());
      disabled += (disabled.empty() ? "" : ":") + o.culprit->first;
      probed += o.culprit->first + "\t" + o.culprit->second + "\n";
      continue;
    }
    if (!o.failure.empty()) {
      std::fprintf(stderr, "hcr devices: %s\n", o.failure.c_str());
      return 1;
    }
    return o.rc;
  }
  std::fprintf(stderr, "hcr devices: gave up after 32 libraries crashed or hung\n");
  return 1;
}

}  // namespace

int cmd_devices(Args& args) {
  const std::optional<std::string> child_fd = args.value("probe-child");  // internal
  const bool in_process = args.flag("no-probe");
  const uint64_t timeout_s = args.number("probe-timeout", 30);
  const std::optional<std::string> config_file = args.value("config");
  Config config = config_from(args);
  args.check_all_used();
  if (timeout_s == 0 || timeout_s > 3600)
    throw Error(ErrorCode::invalid_argument,
                "--probe-timeout " + std::to_string(timeout_s) + " is not 1 to 3600 seconds");
  // Only a listing: no trace file or learned costs that a run of the configuration would write.
  config.trace_file.clear();
  config.gantt_file.clear();
  config.model_dir = "off";
  ::unsetenv("HCR_TRACE");
  if (child_fd) return child(std::move(config), std::atoi(child_fd->c_str()));
  if (in_process) return list(config, -1);
  return probed_list(config, config_file, static_cast<unsigned>(timeout_s));
}

}  // namespace hcr::cli
