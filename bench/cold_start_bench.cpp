// Cold start: the time from hcr::Runtime construction to the first task's completion, in a fresh
// process each time (plugins are loaded once per process), for several plugin sets, with empty
// ("cold") and populated ("warm") hcr caches. A bench program: it prints a table of medians.
//
//   cold_start_bench [--runs N]
//
// Each measurement re-runs this program with --child: the parent only spawns and collects.
#include <hcr/hcr.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The plugin sets measured: what a machine without a GPU loads.
hcr::Config config_for(const std::string& set, const std::string& cache) {
  hcr::Config c;
  c.use_environment = false;
  c.model_dir = cache + "/models";
  if (set == "cpu" || set == "cpu+opencl") c.backends.push_back({"cpu", true, {}, "bench"});
  // PoCL's CPU device included (device_types = all), so a context and queues are made.
  if (set == "cpu+opencl")
    c.backends.push_back(
        {"opencl", true, {{"cache_dir", cache + "/opencl"}, {"device_types", "all"}}, "bench"});
  // "all": no [[backend]] tables, every plugin in the plugin directory (the CUDA one included,
  // which finds no GPU here).
  return c;
}

// One measurement: construction, first task, both; prints "construct first_task total" in ms.
int child(const std::string& set, const std::string& cache) {
  const Clock::time_point t0 = Clock::now();
  hcr::Runtime rt(config_for(set, cache));
  const double constructed = ms_since(t0);
  const Clock::time_point t1 = Clock::now();
  hcr::Kernel k = rt.kernel("first").cpu([](hcr::TaskContext& ctx) {
    auto v = ctx.arg<float>(0);
    v(0, 0) += 1;
  });
  auto x = rt.vector<float>(1);
  rt.submit(hcr::Task(k).read_write(x)).get();
  const double first = ms_since(t1);
  const double total = ms_since(t0);
  std::printf("%.3f %.3f %.3f %zu\n", constructed, first, total, rt.devices().size());
  return 0;
}

struct Sample {
  double construct, first, total;
  size_t devices;
};

bool spawn_child(const std::string& set, const std::string& cache, Sample& out) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {self, "--child", set, cache};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return false;
  }
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
         std::sscanf(text.c_str(), "%lf %lf %lf %zu", &out.construct, &out.first, &out.total,
                     &out.devices) == 4;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
  int runs = 7;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
  ::setenv("HCR_LOG", "error", 1);

  std::printf("Runtime construction -> first task done, fresh process each, median of %d (ms)\n",
              runs);
  std::printf("%-12s %-6s %8s %12s %12s %12s\n", "plugins", "cache", "devices", "construct",
              "first task", "total");
  for (const char* set : {"cpu", "cpu+opencl", "all"}) {
    const auto cache = std::filesystem::temp_directory_path() /
                       ("hcr-cold-start-" + std::to_string(::getpid()) + "-" + set);
    for (const char* state : {"cold", "warm"}) {
      std::vector<double> construct, first, total;
      size_t devices = 0;
      for (int r = 0; r < runs; ++r) {
        // Cold: an empty cache directory every run; warm: the one the previous run filled.
        if (std::strcmp(state, "cold") == 0) std::filesystem::remove_all(cache);
        std::filesystem::create_directories(cache);
        std::filesystem::permissions(cache, std::filesystem::perms::owner_all);
        Sample s{};
        if (!spawn_child(set, cache.string(), s)) {
          std::fprintf(stderr, "run of '%s' failed\n", set);
          return 1;
        }
        construct.push_back(s.construct);
        first.push_back(s.first);
        total.push_back(s.total);
        devices = s.devices;
      }
      std::printf("%-12s %-6s %8zu %12.2f %12.3f %12.2f\n", set, state, devices, median(construct),
                  median(first), median(total));
    }
    std::filesystem::remove_all(cache);
  }
  return 0;
}
