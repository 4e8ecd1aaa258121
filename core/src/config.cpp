// TOML configuration (TOML++): every key is checked; errors name the file, line and key.
#include <hcr/config.hpp>
#include <hcr/device.hpp>
#include <hcr/error.hpp>
#include <hcr/log.hpp>
#include <hcr/sched.hpp>

#include <toml++/toml.h>

#include "config_check.hpp"
#include "units.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hcr {

namespace {

// task_timeout becomes a steady_clock duration (int64 nanoseconds, some 292 years): inf, nan or
// 1e300 would overflow the conversion. The same bound as Runtime's check of a hand-built Config.
constexpr double kMaxTimeout = 1e9;

// A configuration file can be big: beyond this it is refused unread (it would be no configuration
// anyone wrote by hand, and /dev/zero must not fill memory).
constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;

// Every problem of a file is reported, in line order, in one Error: fail() records one and
// abandons only the key at hand (Skip), and parsing goes on with the next.
class Parser {
 public:
  explicit Parser(std::string origin) : origin_(std::move(origin)) {}

  struct Skip {};

  [[noreturn]] void fail(const toml::node* n, const std::string& key,
                         const std::string& what) const {
    std::string where = origin_;
    if (n != nullptr && n->source().begin.line != 0)
      where += ":" + std::to_string(n->source().begin.line);
    problems_.push_back({where, key + ": " + what});
    throw Skip{};
  }
  // Runs `f`, a step that may fail(): a failure abandons only that step.
  template <class F>
  void step(F&& f) const {
    try {
      f();
    } catch (const Skip&) {
    }
  }
  std::string at(const toml::node& n) const {
    return origin_ + ":" + std::to_string(n.source().begin.line);
  }

  static const char* type_name(const toml::node& n) {
    switch (n.type()) {
      case toml::node_type::table: return "a table";
      case toml::node_type::array: return "an array";
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a number";
      case toml::node_type::boolean: return "a boolean";
      case toml::node_type::date: return "a date";
      case toml::node_type::time: return "a time";
      case toml::node_type::date_time: return "a date-time";
      default: return "nothing";
    }
  }

  std::string string(const toml::node& n, const std::string& key) const {
    if (auto s = n.value<std::string>(); s && n.is_string()) return *s;
    fail(&n, key, std::string("expected a string, got ") + type_name(n));
  }
  bool boolean(const toml::node& n, const std::string& key) const {
    if (n.is_boolean()) return *n.value<bool>();
    fail(&n, key, std::string("expected true or false, got ") + type_name(n));
  }
  const toml::table& table(const toml::node& n, const std::string& key) const {
    if (auto* t = n.as_table()) return *t;
    fail(&n, key, std::string("expected a table, got ") + type_name(n));
  }

  // A value as the string a plugin receives.
  std::string scalar_text(const toml::node& n, const std::string& key) const {
    if (n.is_string()) return *n.value<std::string>();
    if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
    if (n.is_integer()) return std::to_string(*n.value<int64_t>());
    if (n.is_floating_point()) {
      std::ostringstream os;
      os.precision(17);
      os << *n.value<double>();
      return os.str();
    }
    std::ostringstream os;
    if (auto d = n.as_date()) os << *d;
    else if (auto t = n.as_time()) os << *t;
    else if (auto dt = n.as_date_time()) os << *dt;
    else fail(&n, key, std::string("unexpected ") + type_name(n));
    return os.str();
  }

  // Flattens a backend table's keys to dotted strings, each with the place it was written.
  void flatten(const toml::node& n, const std::string& key, BackendConfig& out) const {
    if (auto* t = n.as_table()) {
      for (auto&& kv : *t)
        step([&, &k = kv.first, &v = kv.second] {
          flatten(v, key + "." + std::string(k.str()), out);
        });
      return;
    }
    if (auto* a = n.as_array()) {
      if (!a->empty() && a->is_array_of_tables()) {
        for (size_t i = 0; i < a->size(); ++i)
          step([&] { flatten(*a->get(i), key + "." + std::to_string(i), out); });
        return;
      }
      std::string joined;
      for (size_t i = 0; i < a->size(); ++i) {
        const toml::node& e = *a->get(i);
        if (e.is_table() || e.is_array())
          fail(&e, key, "arrays may hold values or tables, not a mix or nested arrays");
        if (i) joined += ',';
        joined += scalar_text(e, key);
      }
      out.options.emplace_back(key, joined);
      out.option_origins.push_back(at(n));
      return;
    }
    out.options.emplace_back(key, scalar_text(n, key));
    out.option_origins.push_back(at(n));
  }

  /// The configuration; throws Error(config) listing every problem found, in line order.
  Config run(const toml::table& root) const {
    Config c;
    c.origin = origin_;
    for (auto&& kv : root)
      step([&, &k = kv.first, &v = kv.second] {
        std::string key(k.str());
        if (key == "runtime") runtime(table(v, key), c);
        else if (key == "scheduler") scheduler(table(v, key), c);
        else if (key == "data") data(table(v, key), c);
        else if (key == "trace") trace(table(v, key), c);
        else if (key == "backend") backends(v, c);
        else if (key == "context") contexts(v, c);
        else if (key == "arbiter") arbiter(table(v, key), c);
        else
          fail(&v, key,
               "unknown key (expected runtime, scheduler, data, trace, backend, context "
               "or arbiter)");
      });
    for (detail::ConfigProblem& p : detail::duplicate_tables(c.backends))
      problems_.push_back(std::move(p));
    for (size_t i = 0; i < c.contexts.size(); ++i)  // (sorted into line order by problems_text)
      for (size_t j = 0; j < i; ++j)
        if (c.contexts[i].name == c.contexts[j].name)
          problems_.push_back({c.contexts[i].origin, "context.name: '" + c.contexts[i].name +
                                                         "' names the context of " +
                                                         c.contexts[j].origin + " already"});
    if (!problems_.empty())
      throw Error(ErrorCode::config, detail::problems_text(std::move(problems_)));
    return c;
  }

  void runtime(const toml::table& t, Config& c) const {
    for (auto&& kv : t)
      step([&, &k = kv.first, &v = kv.second] {
        std::string key = "runtime." + std::string(k.str());
        if (k.str() == "plugin_paths") {
          auto* a = v.as_array();
          if (a == nullptr)
            fail(&v, key, std::string("expected an array of strings, got ") + type_name(v));
          for (auto&& e : *a) {
            std::string p = string(e, key);
            if (p.rfind("~/", 0) == 0)
              if (const char* home = std::getenv("HOME")) p = home + p.substr(1);
            if (!std::filesystem::path(p).is_absolute())
              fail(&e, key, "'" + p + "' is not an absolute directory");
            c.plugin_paths.push_back(p);
          }
        } else if (k.str() == "log_level") {
          std::string s = string(v, key);
          auto l = log::parse_level(s);
          if (!l) fail(&v, key, "'" + s + "' is not one of trace, debug, info, warn, error, off");
          c.log_level = *l;
        } else if (k.str() == "quarantine_failures") {
          if (!v.is_integer())
            fail(&v, key, std::string("expected an integer, got ") + type_name(v));
          int64_t n = *v.value<int64_t>();
          if (n < 1 || n > 1000000) fail(&v, key, std::to_string(n) + " is not 1 to 1000000");
          c.quarantine_failures = static_cast<int>(n);
        } else if (k.str() == "quarantine_window") {
          auto w = v.value<double>();
          if (!w || !(v.is_integer() || v.is_floating_point()) || !(*w > 0) || !std::isfinite(*w))
            fail(&v, key, "expected a positive number of seconds");
          c.quarantine_window = *w;
        } else if (k.str() == "task_timeout") {
          auto w = v.value<double>();
          if (!w || !(v.is_integer() || v.is_floating_point()) || !(*w >= 0 && *w <= kMaxTimeout))
            fail(&v, key, "expected a number of seconds (0: no limit), at most 1e9");
          c.task_timeout = *w;
        } else if (k.str() == "max_tasks_in_flight") {
          if (!v.is_integer())
            fail(&v, key, std::string("expected an integer, got ") + type_name(v));
          int64_t n = *v.value<int64_t>();
          if (n < 0) fail(&v, key, std::to_string(n) + " is not a number of tasks (0: no bound)");
          c.max_tasks_in_flight = static_cast<uint64_t>(n);
        } else if (k.str() == "device_graphs") {
          c.device_graphs = boolean(v, key);
        } else {
          fail(&v, key,
               "unknown key (expected plugin_paths, log_level, quarantine_failures, "
               "quarantine_window, task_timeout, max_tasks_in_flight or device_graphs)");
        }
      });
  }

  void scheduler(const toml::table& t, Config& c) const {
    for (auto&& kv : t)
      step([&, &k = kv.first, &v = kv.second] {
        std::string key = "scheduler." + std::string(k.str());
        if (k.str() == "policy") {
          c.policy = string(v, key);
          auto names = sched::policy_names();
          if (std::find(names.begin(), names.end(), c.policy) == names.end()) {
            std::string known;
            for (auto& n : names) known += (known.empty() ? "" : ", ") + n;
            fail(&v, key, "unknown policy '" + c.policy + "' (known: " + known + ")");
          }
        } else if (k.str() == "model_dir") {
          std::string dir = string(v, key);
          if (dir.rfind("~/", 0) == 0)
            if (const char* home = std::getenv("HOME")) dir = home + dir.substr(1);
          if (!dir.empty() && dir != "off" && !std::filesystem::path(dir).is_absolute())
            fail(&v, key, "'" + dir + "' is not an absolute directory (or \"off\")");
          c.model_dir = dir;
        } else if (k.str() == "calibrate") {
          c.calibrate = string(v, key);
          if (c.calibrate != "auto" && c.calibrate != "force" && c.calibrate != "off")
            fail(&v, key, "'" + c.calibrate + "' is not one of auto, force, off");
        } else if (k.str() == "calibrate_samples") {
          if (!v.is_integer())
            fail(&v, key, std::string("expected an integer, got ") + type_name(v));
          int64_t n = *v.value<int64_t>();
          if (n < 1 || n > 1000) fail(&v, key, std::to_string(n) + " is not 1 to 1000");
          c.calibrate_samples = static_cast<int>(n);
        } else if (k.str() == "seed") {
          if (!v.is_integer())
            fail(&v, key, std::string("expected an integer, got ") + type_name(v));
          c.seed = static_cast<uint64_t>(*v.value<int64_t>());
        } else if (k.str() == "objective") {
          c.objective = string(v, key);
          if (c.objective != "time" && c.objective != "energy" && c.objective != "weighted")
            fail(&v, key, "'" + c.objective + "' is not one of time, energy, weighted");
        } else if (k.str() == "max_slowdown") {
          auto w = v.value<double>();
          if (!w || !(v.is_integer() || v.is_floating_point()) || !(*w >= 1 && *w <= 100))
            fail(&v, key,
                 "expected a factor from 1 to 100 (the makespan the energy objective may "
                 "reach, over the fastest one)");
          c.max_slowdown = *w;
        } else if (k.str() == "gamma" || k.str() == "idle_power") {
          auto w = v.value<double>();
          if (!w || !(v.is_integer() || v.is_floating_point()) || !(*w >= 0) || !std::isfinite(*w))
            fail(&v, key, "expected a non-negative number");
          (k.str() == "gamma" ? c.gamma : c.idle_power) = *w;
        } else {
          fail(&v, key,
               "unknown key (expected policy, model_dir, calibrate, calibrate_samples, seed, "
               "objective, max_slowdown, gamma or idle_power)");
        }
      });
  }

  void data(const toml::table& t, Config& c) const {
    for (auto&& kv : t)
      step([&, &k = kv.first, &v = kv.second] {
        std::string key = "data." + std::string(k.str());
        if (k.str() == "prefetch") {
          c.prefetch = boolean(v, key);
        } else if (k.str() == "lookahead") {
          if (!v.is_integer())
            fail(&v, key, std::string("expected an integer, got ") + type_name(v));
          int64_t n = *v.value<int64_t>();
          if (n < -1 || n > 1024) fail(&v, key, std::to_string(n) + " is not -1 or 0 to 1024");
          c.lookahead = static_cast<int>(n);
        } else if (k.str() == "writeback") {
          c.writeback = string(v, key);
          if (c.writeback != "lazy" && c.writeback != "eager")
            fail(&v, key, "'" + c.writeback + "' is not lazy or eager");
        } else {
          fail(&v, key, "unknown key (expected prefetch, lookahead or writeback)");
        }
      });
  }

  void trace(const toml::table& t, Config& c) const {
    for (auto&& kv : t)
      step([&, &k = kv.first, &v = kv.second] {
        std::string key = "trace." + std::string(k.str());
        if (k.str() == "file" || k.str() == "gantt") {
          std::string path = string(v, key);
          if (path.empty()) fail(&v, key, "an empty path");
          (k.str() == "file" ? c.trace_file : c.gantt_file) = path;
        } else if (k.str() == "counters") {
          c.counters = boolean(v, key);
        } else {
          fail(&v, key, "unknown key (expected file, gantt or counters)");
        }
      });
  }

  void arbiter(const toml::table& t, Config& c) const {
    for (auto&& kv : t)
      step([&, &k = kv.first, &v = kv.second] {
        std::string key = "arbiter." + std::string(k.str());
        if (k.str() == "socket") {
          std::string path = string(v, key);
          if (path.rfind("~/", 0) == 0)
            if (const char* home = std::getenv("HOME")) path = home + path.substr(1);
          if (path.empty() || !std::filesystem::path(path).is_absolute())
            fail(&v, key, "'" + path + "' is not an absolute path");
          if (path.size() > 107)
            fail(&v, key, "'" + path + "' is longer than 107 bytes (a Unix socket's limit)");
          c.arbiter_socket = path;
        } else if (k.str() == "weight") {
          auto w = v.value<double>();
          if (!w || !(v.is_integer() || v.is_floating_point()) || !(*w > 0) || !(*w <= 1e6))
            fail(&v, key, "expected a positive number, at most 1e6");
          c.arbiter_weight = *w;
        } else {
          fail(&v, key, "unknown key (expected socket or weight)");
        }
      });
  }

  // [[context]] tables: devices are ids or names, resolved when the runtime starts (the devices
  // are not known here).
  void contexts(const toml::node& n, Config& c) const {
    auto* a = n.as_array();
    if (a == nullptr || !a->is_array_of_tables())
      fail(&n, "context", "expected [[context]] tables");
    for (auto&& e : *a)
      step([&] {
        const toml::table& t = *e.as_table();
        ContextConfig x;
        x.origin = at(t);
        bool named = false;
        const size_t before = problems_.size();
        for (auto&& kv : t)
          step([&, &k = kv.first, &v = kv.second] {
            const std::string key = "context." + std::string(k.str());
            if (k.str() == "name") {
              named = true;
              x.name = string(v, key);
              if (x.name.empty() || x.name == "default")
                fail(&v, key,
                     "'" + x.name + "' is not a context name (not empty, not \"default\")");
            } else if (k.str() == "devices") {
              auto* d = v.as_array();
              if (d == nullptr)
                fail(&v, key,
                     std::string("expected an array of device ids or names, got ") + type_name(v));
              for (auto&& el : *d) {
                if (el.is_integer()) {
                  const int64_t id = *el.value<int64_t>();
                  if (id < 0 || id >= static_cast<int64_t>(kMaxDevices))
                    fail(&el, key,
                         std::to_string(id) + " is not a device id (0 to " +
                             std::to_string(kMaxDevices - 1) + ")");
                  x.devices.push_back(std::to_string(id));
                } else if (el.is_string()) {
                  x.devices.push_back(*el.value<std::string>());
                } else {
                  fail(&el, key, std::string("expected a device id or name, got ") + type_name(el));
                }
              }
            } else if (k.str() == "weight") {
              auto w = v.value<double>();
              if (!w || !(v.is_integer() || v.is_floating_point()) || !(*w > 0) || !(*w <= 1e6))
                fail(&v, key, "expected a positive number, at most 1e6");
              x.weight = *w;
            } else if (k.str() == "priority") {
              if (!v.is_integer())
                fail(&v, key, std::string("expected an integer, got ") + type_name(v));
              const int64_t p = *v.value<int64_t>();
              if (p < -1000000 || p > 1000000)
                fail(&v, key, std::to_string(p) + " is not -1e6 to 1e6");
              x.priority = static_cast<int>(p);
            } else if (k.str() == "memory_quota") {
              const std::string text = scalar_text(v, key);
              auto bytes = detail::parse_bytes(text);
              if (!bytes || *bytes == 0 || !(v.is_integer() || v.is_string()))
                fail(&v, key, "'" + text + "' is not a size (\"2GiB\", \"512MB\", bytes)");
              x.memory_quota = *bytes;
            } else if (k.str() == "reserve") {
              if (!v.is_integer())
                fail(&v, key, std::string("expected an integer, got ") + type_name(v));
              const int64_t r = *v.value<int64_t>();
              if (r < 0 || r > static_cast<int64_t>(kMaxDevices))
                fail(&v, key,
                     std::to_string(r) + " is not a number of devices (0 to " +
                         std::to_string(kMaxDevices) + ")");
              x.reserve = static_cast<uint32_t>(r);
            } else {
              fail(&v, key,
                   "unknown key (expected name, devices, weight, priority, memory_quota or "
                   "reserve)");
            }
          });
        if (!named) fail(&t, "context.name", "every [[context]] needs a name");
        if (problems_.size() == before) c.contexts.push_back(std::move(x));
      });
  }

  void backends(const toml::node& n, Config& c) const {
    auto* a = n.as_array();
    if (a == nullptr || !a->is_array_of_tables())
      fail(&n, "backend", "expected [[backend]] tables");
    for (auto&& e : *a)
      step([&] {
        const toml::table& t = *e.as_table();
        BackendConfig b;
        b.origin = at(t);
        bool named = false, bad = false;
        for (auto&& kv : t) {
          const size_t before = problems_.size();
          step([&, &k = kv.first, &v = kv.second] {
            std::string key(k.str());
            if (key == "name") {
              named = true;
              b.name = string(v, "backend.name");
            } else if (key == "enabled") {
              b.enabled = boolean(v, "backend.enabled");
            } else if (key == "memory_limit") {
              b.memory_limit = scalar_text(v, "backend.memory_limit");
              if (!detail::parse_memory_limit(b.memory_limit))
                fail(&v, "backend.memory_limit",
                     "'" + b.memory_limit +
                         "' is not a size (\"4GiB\", \"512MB\", bytes) or a "
                         "share (\"75%\")");
            } else if (key == "idle_watts" || key == "busy_watts") {
              auto w = v.value<double>();
              if (!w || !(v.is_integer() || v.is_floating_point()) || !(*w >= 0) || !(*w <= 1e6))
                fail(&v, "backend." + key, "expected a number of watts from 0 to 1e6");
              (key == "idle_watts" ? b.idle_watts : b.busy_watts) = *w;
            } else {
              flatten(v, key, b);
            }
          });
          bad = bad || problems_.size() != before;
        }
        if (!named || (b.name.empty() && !bad))
          fail(&t, "backend.name", "every [[backend]] needs a name");
        // A table with a mistake stays out: the loader would only add confusion about it.
        if (!bad) c.backends.push_back(std::move(b));
      });
  }

 private:
  std::string origin_;
  mutable std::vector<detail::ConfigProblem> problems_;
};

}  // namespace

Config Config::parse(std::string_view text, std::string origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw Error(ErrorCode::config, origin + ":" + std::to_string(b.line) + ":" +
                                       std::to_string(b.column) + ": " +
                                       std::string(e.description()));
  }
  return Parser(origin).run(root);
}

Config Config::load(const std::filesystem::path& file) {
  // What the path is, before opening it: a FIFO would block the open, /dev/zero never end.
  const std::string name = "configuration file '" + file.string() + "'";
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0)
    throw Error(ErrorCode::config, "cannot read " + name + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::config, name + " is a directory");
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorCode::config, name + " is not a regular file (" +
                                       (S_ISFIFO(st.st_mode)   ? "a FIFO"
                                        : S_ISCHR(st.st_mode)  ? "a character device"
                                        : S_ISBLK(st.st_mode)  ? "a block device"
                                        : S_ISSOCK(st.st_mode) ? "a socket"
                                                               : "not a file") +
                                       "): refused");
  auto too_big = [&] {
    return Error(ErrorCode::config, name + " is larger than " +
                                        std::to_string(kMaxConfigBytes >> 20) + " MiB: refused");
  };
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxConfigBytes) throw too_big();
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(ErrorCode::config, "cannot read " + name + ": " + std::strerror(errno));
  // At most one byte past the cap: a file that grew since stat is refused all the same.
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw Error(ErrorCode::config, "cannot read " + name);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) throw too_big();
  return parse(text, file.string());
}

}  // namespace hcr
