/// \file config.hpp
/// Runtime configuration, usually parsed from a TOML file:
///
/// \code
/// [runtime]
/// plugin_paths = ["/opt/hcr/plugins"]   # searched before HCR_PLUGIN_PATH and the install's own
/// log_level = "warn"                    # trace | debug | info | warn | error | off
/// quarantine_failures = 3               # failures within quarantine_window seconds that take
/// quarantine_window = 10                # a device out of scheduling
/// task_timeout = 0                      # seconds before a launch counts as hung (0: never)
/// max_tasks_in_flight = 1000000         # submit waits while this many are unfinished (0: never)
/// device_graphs = true                  # a replay whose tasks all ran on one device: one launch
///
/// [scheduler]
/// policy = "auto"                       # auto | eager | random | ws | dmda | dmdas | peft
/// model_dir = "~/.cache/hcr/models"     # learned costs persist here ("off": not at all)
/// calibrate = "auto"                    # auto | force | off
/// calibrate_samples = 3
///
/// [trace]
/// file = "/tmp/run.json"                # Chrome/Perfetto trace, written at the end
/// gantt = "/tmp/run.svg"                # and a Gantt chart
/// counters = false                      # busy/idle time per device even without dmda or a trace
///
/// [data]
/// writeback = "lazy"                    # lazy | eager (copy results home at once)
/// prefetch = true                       # copy inputs as soon as a task is placed
/// lookahead = -1                        # queued tasks per device beyond its slots (-1: slots)
///
/// [[context]]                           # a scheduling context created at the start
/// name = "batch"                        # (context.hpp); tasks join it with Task::in
/// devices = [0, "sim-gpu"]              # ids or device names (default: every device)
/// weight = 3                            # share of device time within its priority class
/// priority = 0                          # priority class: higher is served first
/// memory_quota = "2GiB"                 # per device: over it, it evicts its own data only
/// reserve = 0                           # devices held back for it while active (lower classes
///                                       # get none of their time meanwhile)
///
/// [arbiter]                             # join the node arbiter (`hcr serve`); without this
/// socket = "/run/hcr/arbiter.sock"      # table (and HCR_ARBITER_SOCKET) none is used
/// weight = 1                            # this process's share of the node's devices
///
/// [[backend]]                           # one table per plugin instance
/// name = "cpu"                          # the plugin's name
/// memory_limit = "75%"                  # per device: bytes ("4GiB") or a share; read by hcr
/// threads = 0                           # any other key reaches the plugin as a string
/// \endcode
///
/// Every key has a default. Unknown keys and wrong types throw hcr::Error naming the file, the line
/// and the key; every problem of a file is in that one Error, a line each, in line order. Keys the
/// plugin reads are checked when the runtime creates it: one it refuses, a table naming no plugin
/// in the search path, or two tables of one plugin with the same options, is an Error of the
/// runtime's constructor named the same way.
#pragma once

#include <hcr/export.hpp>
#include <hcr/types.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hcr {

/// One [[backend]] table: which plugin to instantiate, with what options.
struct BackendConfig {
  std::string name;     ///< the plugin's name (its table's `name`)
  bool enabled = true;  ///< `enabled = false` keeps the table but loads nothing
  /// Every other key, as strings; nested tables flatten to dotted keys ("device.0.gflops").
  std::vector<std::pair<std::string, std::string>> options;
  std::string origin;  ///< "file:line" of the table, for diagnostics
  /// Memory hcr may use on each of this backend's devices: bytes ("4GiB") or a share ("75%").
  /// Empty: 90% of what the device reports. Read by the runtime, not passed to the plugin.
  std::string memory_limit;
  /// "file:line" of each option, in the order of `options` (the parser fills it; may be empty in
  /// a table built by hand): a mistake the plugin reports is named at its key's line.
  std::vector<std::string> option_origins;
  /// Declared power of each of this backend's devices, for those without an energy meter (< 0:
  /// not declared): idle, and with every slot busy. Read by the runtime, not passed to the plugin.
  double idle_watts = -1;
  double busy_watts = -1;
};

/// One [[context]] table: a context (hcr::Context) the runtime creates at its start.
struct ContextConfig {
  std::string name;
  std::vector<std::string> devices;  ///< ids ("0") or device names; empty: every device
  double weight = 1;
  int priority = 0;
  std::optional<uint64_t> memory_quota;  ///< bytes per device (ContextSpec::memory_quota)
  uint32_t reserve = 0;                  ///< ContextSpec::reserve
  std::string origin;                    ///< "file:line" of the table, for diagnostics
};

/// The whole configuration. Plain data: build one by hand or with load()/parse(). The Runtime
/// refuses a number or word out of range in a hand-built one as the parser would.
struct HCR_API Config {
  std::vector<std::string> plugin_paths;  ///< absolute directories, searched first
  /// Unset: leave the process-wide level alone (HCR_LOG, or warn).
  std::optional<LogLevel> log_level;
  /// Scheduler policy name. "auto": peft when the devices at the start are of more than one
  /// architecture, else eager (sched::default_policy).
  std::string policy = "auto";
  /// [scheduler] model_dir: where learned costs persist ("" = $XDG_CACHE_HOME/hcr/models or
  /// ~/.cache/hcr/models; "off" = learn in memory only). Files go under a directory per host.
  std::string model_dir;
  /// [scheduler] calibrate: "auto" explores a (kernel, device architecture) until it has
  /// calibrate_samples measurements; "force" explores every footprint that far; "off" never.
  std::string calibrate = "auto";
  int calibrate_samples = 3;
  /// [scheduler] seed: for policies that draw at random.
  uint64_t seed = 1;
  /// [scheduler] objective (peft): "time" — the earliest finish; "energy" — the least energy
  /// (the devices' work and every device's idle draw over the makespan) whose predicted makespan
  /// stays within max_slowdown of the fastest; "weighted" — StarPU's form, finish time + gamma x
  /// joules, with idle_power watts charged for lengthening the makespan.
  std::string objective = "time";
  double max_slowdown = 1.1;
  double gamma = 0;       ///< seconds per joule (objective "weighted")
  double idle_power = 0;  ///< watts (objective "weighted")
  /// [data] prefetch: start copying a task's inputs as soon as the policy places it.
  bool prefetch = true;
  /// [data] lookahead: tasks handed to a device beyond the ones it runs at once, so that their
  /// inputs arrive while the device computes (-1: as many as it runs at once).
  int lookahead = -1;
  /// [data] writeback: "lazy" copies a device's results home when the host or another memory
  /// needs them; "eager" copies each one home as soon as its task commits, so that losing the
  /// device loses no data (at the cost of that traffic).
  std::string writeback = "lazy";
  /// [runtime] quarantine_failures / quarantine_window: a device with this many failed launches
  /// or copies within the window (seconds) is taken out of scheduling (a lost device at once).
  int quarantine_failures = 3;
  double quarantine_window = 10;
  /// [runtime] task_timeout: seconds a launch may take before the runtime gives up on it and
  /// places the task elsewhere (a hung device); 0: no limit.
  double task_timeout = 0;
  /// [runtime] max_tasks_in_flight: Runtime::submit waits while this many tasks are submitted and
  /// unfinished (back-pressure: a task costs about a KiB until it finishes); 0: no bound.
  uint64_t max_tasks_in_flight = 1000000;
  /// [runtime] device_graphs: a replayed graph whose tasks all ran on one device, whose plugin
  /// runs device graphs (ABI 1.2), is handed to that plugin once and then run by it with one call
  /// per replay (graph.hpp says when); false: every replay runs task by task.
  bool device_graphs = true;
  std::vector<BackendConfig> backends;  ///< empty: every plugin found, default options
  /// [[context]] tables: contexts created at the start (see context.hpp); tasks reach them through
  /// Runtime::find_context(name).
  std::vector<ContextConfig> contexts;
  std::string origin = "<defaults>";  ///< the file it came from
  /// [trace] file: record a trace from the start and write it (Chrome/Perfetto JSON) when the
  /// runtime ends; HCR_TRACE overrides. [trace] gantt: also write a Gantt chart (SVG) there.
  std::string trace_file;
  std::string gantt_file;
  /// [trace] counters: measure every task's execution time for the busy/idle counters even when
  /// neither the policy (dmda measures anyway) nor a trace needs it; two clock reads per task.
  bool counters = false;
  /// [arbiter] socket: the node arbiter's Unix socket (`hcr serve --socket PATH`). Empty (the
  /// default): no arbiter, nothing of it runs. When set, the runtime joins it at the start with its
  /// devices and uses the ones it is granted; an arbiter that does not answer is a warning, and
  /// the runtime runs on every device. HCR_ARBITER_SOCKET overrides.
  std::string arbiter_socket;
  /// [arbiter] weight: this runtime's share against the other processes' (> 0, at most 1e6).
  double arbiter_weight = 1;
  /// When true (the default), HCR_LOG, HCR_SCHED, HCR_TRACE, HCR_PLUGIN_PATH and
  /// HCR_ARBITER_SOCKET override the values above.
  bool use_environment = true;

  /// Parses a TOML file. Throws Error(ErrorCode::config) naming file, line and key. A path that is
  /// not a regular file (a directory, a FIFO, /dev/zero) or is larger than 16 MiB is refused
  /// without being read.
  static Config load(const std::filesystem::path& file);
  /// Parses TOML text; `origin` names it in messages.
  static Config parse(std::string_view toml, std::string origin = "<string>");
};

}  // namespace hcr
