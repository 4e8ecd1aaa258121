// hcr.Runtime: configuration (None, a TOML file, or a dict of its tables), devices, buffers,
// kernels, submit, waits (without the interpreter lock), pause, traces, statistics, and closing:
// explicitly, at the end of a with block, when the object is collected, or at interpreter exit.
#include "binding.hpp"

#include <chrono>
#include <thread>

namespace hcrpy {

namespace {

std::mutex g_live_mutex;
std::vector<std::weak_ptr<RuntimeHolder>> g_live;  // every runtime not yet closed
std::vector<std::thread> g_closers;                // runtimes dropped inside their own kernels

/// Destroys a runtime once no call holds it, without the interpreter lock (its end waits for
/// tasks, Python kernels among them).
void destroy(std::shared_ptr<hcr::Runtime> r) {
  auto end = [&] {
    while (r.use_count() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    r.reset();
  };
  if (PyGILState_Check()) {
    py::gil_scoped_release unlocked;
    end();
  } else {
    end();
  }
}

hcr::Config make_config(py::handle config, bool use_environment) {
  hcr::Config c;
  if (config.is_none()) {
  } else if (py::isinstance<py::dict>(config)) {
    auto text = py::cast<std::string>(py::module_::import("hcr._toml").attr("dumps")(config));
    c = hcr::Config::parse(text, "<dict>");
  } else if (py::isinstance<py::str>(config) || py::hasattr(config, "__fspath__")) {
    auto path = py::cast<std::string>(py::module_::import("os").attr("fspath")(config));
    c = hcr::Config::load(path);
  } else {
    throw_invalid("Runtime: config must be None, a path to a TOML file or a dict of its tables, "
                  "not " +
                  py::cast<std::string>(py::type::handle_of(config).attr("__name__")));
  }
  c.use_environment = use_environment;
  return c;
}

const char* health_name(hcr::DeviceHealth h) {
  switch (h) {
    case hcr::DeviceHealth::active: return "active";
    case hcr::DeviceHealth::quarantined: return "quarantined";
    case hcr::DeviceHealth::lost: return "lost";
    case hcr::DeviceHealth::removed: return "removed";
    default: return "withheld";
  }
}

py::dict stats_dict(const hcr::RuntimeStats& s) {
  py::dict d;
  d["submitted"] = s.submitted;
  d["completed"] = s.completed;
  d["failed"] = s.failed;
  d["throttled"] = s.throttled;
  d["wall_seconds"] = s.wall_seconds;
  d["decisions"] = s.decisions;
  d["decision_seconds"] = s.decision_seconds;
  d["energy_joules"] = s.energy_joules;
  py::list devices;
  for (const auto& c : s.devices) {
    py::dict x;
    x["health"] = health_name(c.health);
    x["last_fault"] = c.last_fault;
    x["tasks"] = c.tasks;
    x["failed"] = c.failed;
    x["protocol_errors"] = c.protocol_errors;
    x["busy_seconds"] = c.busy_seconds;
    x["idle_seconds"] = c.idle_seconds;
    x["bytes_in"] = c.bytes_in;
    x["bytes_out"] = c.bytes_out;
    x["energy_joules"] = c.energy_joules;
    x["energy_source"] = c.energy_source;
    x["watts"] = c.watts;
    devices.append(x);
  }
  d["devices"] = devices;
  py::dict data;
  py::list nodes, links;
  for (const auto& n : s.data.nodes) {
    py::dict x;
    x["id"] = n.id;
    x["name"] = n.name;
    x["limit"] = n.limit;
    x["used"] = n.used;
    nodes.append(x);
  }
  for (const auto& l : s.data.links) {
    py::dict x;
    x["from"] = l.from;
    x["to"] = l.to;
    x["bytes"] = l.bytes;
    x["transfers"] = l.transfers;
    links.append(x);
  }
  data["nodes"] = nodes;
  data["links"] = links;
  data["hits"] = s.data.hits;
  data["misses"] = s.data.misses;
  data["evictions"] = s.data.evictions;
  data["writebacks"] = s.data.writebacks;
  data["bytes_moved"] = s.data.bytes_moved();
  d["data"] = data;
  py::list accuracy;
  for (const auto& a : s.accuracy) {
    py::dict x;
    x["kernel"] = a.kernel;
    x["device"] = a.device;
    x["median_abs_pct_error"] = a.median_abs_pct_error;
    x["samples"] = a.samples;
    accuracy.append(x);
  }
  d["accuracy"] = accuracy;
  py::list contexts;
  for (const auto& c : s.contexts) {
    py::dict x;
    x["name"] = c.name;
    x["devices"] = c.devices;
    x["weight"] = c.weight;
    x["priority"] = c.priority;
    x["tasks"] = c.tasks;
    x["failed"] = c.failed;
    x["busy_seconds"] = c.busy_seconds;
    x["wait_seconds"] = c.wait_seconds;
    x["queued"] = c.queued;
    contexts.append(x);
  }
  d["contexts"] = contexts;
  return d;
}

/// hcr.Runtime: the Python object; closing is shared with every buffer, kernel and task of it
/// through the holder.
struct RuntimeObj {
  std::shared_ptr<RuntimeHolder> holder;

  RuntimeObj() = default;
  RuntimeObj(const RuntimeObj&) = delete;
  ~RuntimeObj() {
    if (!holder || holder->closed()) return;
    if (in_kernel_of(holder.get())) {
      // Dropped inside one of its own kernels: its end waits for that kernel, so another thread
      // ends it (joined at exit).
      std::shared_ptr<hcr::Runtime> r;
      {
        std::lock_guard lock(holder->mutex);
        r = std::move(holder->rt);
      }
      std::lock_guard lock(g_live_mutex);
      g_closers.emplace_back([r = std::move(r)]() mutable { destroy(std::move(r)); });
      return;
    }
    try {
      holder->close();
    } catch (...) {
    }
  }
};

/// `with rt.paused():` — pause() on entry, resume() on exit.
struct PausedScope {
  std::shared_ptr<RuntimeHolder> holder;
  void enter() { holder->get()->pause(); }
  void exit() {
    auto rt = holder->get();
    py::gil_scoped_release unlocked;
    rt->resume();
  }
};

}  // namespace

std::shared_ptr<RuntimeHolder> holder_of(py::handle rt) {
  if (!py::isinstance<RuntimeObj>(rt))
    throw_invalid("expected an hcr.Runtime, got " +
                  py::cast<std::string>(py::type::handle_of(rt).attr("__name__")));
  return py::cast<RuntimeObj&>(rt).holder;
}

RuntimeHolder::RuntimeHolder() = default;
RuntimeHolder::~RuntimeHolder() = default;

std::shared_ptr<hcr::Runtime> RuntimeHolder::get() const {
  std::lock_guard lock(mutex);
  if (!rt) throw hcr::Error(hcr::ErrorCode::shutdown, "the runtime has been closed");
  return rt;
}

bool RuntimeHolder::closed() const {
  std::lock_guard lock(mutex);
  return !rt;
}

void RuntimeHolder::close() {
  if (in_kernel_of(this))
    throw_invalid("close: inside a kernel of this runtime (its end waits for that kernel)");
  // Tasks first, while kernels may still submit theirs (the runtime's end waits for those too,
  // but a kernel calling into a closed holder would fail). wait_all refuses where it would never
  // return (a view this thread holds, a pause): the runtime's end then releases and resumes.
  if (auto r = [&] {
        std::lock_guard lock(mutex);
        return rt;
      }()) {
    auto quiet_wait = [&] {
      try {
        r->wait_all();
      } catch (const hcr::Error&) {
      }
    };
    if (PyGILState_Check()) {
      py::gil_scoped_release unlocked;
      quiet_wait();
    } else {
      quiet_wait();
    }
  }
  std::shared_ptr<hcr::Runtime> r;
  {
    std::lock_guard lock(mutex);
    r = std::move(rt);
  }
  if (r) destroy(std::move(r));
  std::vector<std::unique_ptr<KeepAlive>> keep;
  {
    std::lock_guard lock(mutex);
    keep.swap(parked);
  }
  keep.clear();
  if (PyGILState_Check()) drain_releases();
}

void RuntimeHolder::park(std::unique_ptr<KeepAlive> k) {
  std::lock_guard lock(mutex);
  if (rt) {
    parked.push_back(std::move(k));
    return;
  }
  // closed meanwhile: nothing uses the memory any more; k is dropped on return
}

std::shared_ptr<KernelInfo> RuntimeHolder::kernel_info(hcr::detail::KernelState* k,
                                                       const std::string& name) {
  std::lock_guard lock(mutex);
  for (auto& [state, info] : kernels)
    if (state == k) return info;
  auto info = std::make_shared<KernelInfo>();
  info->name = name;
  kernels.emplace_back(k, info);
  return info;
}

void close_all_runtimes() {
  std::vector<std::shared_ptr<RuntimeHolder>> live;
  std::vector<std::thread> closers;
  {
    std::lock_guard lock(g_live_mutex);
    for (auto& w : g_live)
      if (auto h = w.lock()) live.push_back(std::move(h));
    g_live.clear();
    closers.swap(g_closers);
  }
  for (auto& h : live) {
    try {
      h->close();
    } catch (...) {
    }
  }
  py::gil_scoped_release unlocked;
  for (auto& t : closers) t.join();
}

void register_runtime(py::module_& m) {
  py::class_<hcr::Device>(m, "Device", "A device of the runtime (a snapshot).")
      .def_readonly("id", &hcr::Device::id)
      .def_readonly("name", &hcr::Device::name)
      .def_readonly("arch", &hcr::Device::arch)
      .def_readonly("backend", &hcr::Device::backend)
      .def_property_readonly(
          "kind", [](const hcr::Device& d) { return std::string(hcr::kind_name(d.kind)); })
      .def_readonly("memory_bytes", &hcr::Device::memory_bytes)
      .def_readonly("compute_units", &hcr::Device::compute_units)
      .def_readonly("concurrency", &hcr::Device::concurrency)
      .def_readonly("memory_node", &hcr::Device::memory_node)
      .def_readonly("peak_gflops", &hcr::Device::peak_gflops)
      .def("__repr__", [](const hcr::Device& d) {
        return "hcr.Device(" + std::to_string(d.id) + ", '" + d.name + "', " +
               std::string(hcr::kind_name(d.kind)) + ", backend '" + d.backend + "')";
      });

  py::class_<hcr::TraceEvent>(m, "TraceEvent", "One recorded task execution or copy.")
      .def_property_readonly("kind",
                             [](const hcr::TraceEvent& e) {
                               switch (e.kind) {
                                 case hcr::TraceEvent::Kind::task: return "task";
                                 case hcr::TraceEvent::Kind::transfer: return "transfer";
                                 default: return "power";
                               }
                             })
      .def_readonly("device", &hcr::TraceEvent::device)
      .def_readonly("source_node", &hcr::TraceEvent::from)
      .def_readonly("target_node", &hcr::TraceEvent::to)
      .def_readonly("kernel", &hcr::TraceEvent::kernel)
      .def_readonly("footprint", &hcr::TraceEvent::footprint)
      .def_readonly("bytes", &hcr::TraceEvent::bytes)
      .def_readonly("start", &hcr::TraceEvent::start)
      .def_readonly("end", &hcr::TraceEvent::end)
      .def_readonly("predicted", &hcr::TraceEvent::predicted)
      .def_readonly("measured", &hcr::TraceEvent::measured)
      .def_readonly("priority", &hcr::TraceEvent::priority)
      .def_readonly("failed", &hcr::TraceEvent::failed)
      .def_readonly("context", &hcr::TraceEvent::context)
      .def("__repr__", [](const hcr::TraceEvent& e) {
        return "hcr.TraceEvent(" + e.kernel + ", device " + std::to_string(e.device) + ", " +
               std::to_string(e.end - e.start) + " s)";
      });

  py::class_<PausedScope>(m, "_PausedScope")
      .def("__enter__", [](PausedScope& s) { s.enter(); })
      .def("__exit__", [](PausedScope& s, py::args) { s.exit(); });

  py::class_<RuntimeObj>(m, "Runtime", R"doc(The runtime: plugins, devices, the task graph, data and
the scheduler.

    rt = hcr.Runtime()                                    # every installed plugin
    rt = hcr.Runtime("devices.toml")                      # a TOML file
    rt = hcr.Runtime({"scheduler": {"model_dir": "off"},  # the TOML's tables as dicts
                      "backend": [{"name": "cpu", "threads": 2}]})

HCR_* environment variables override keys unless use_environment=False. close() (or the end of a
with block, or the object's collection, or interpreter exit) waits for every task and ends it;
buffers, kernels and events of a closed runtime raise ShutdownError.)doc")
      .def(py::init([](py::object config, bool use_environment) {
             auto obj = std::make_unique<RuntimeObj>();
             hcr::Config c = make_config(config, use_environment);
             std::shared_ptr<hcr::Runtime> rt;
             {
               py::gil_scoped_release unlocked;
               rt = std::make_shared<hcr::Runtime>(std::move(c));
             }
             obj->holder = std::make_shared<RuntimeHolder>();
             obj->holder->rt = std::move(rt);
             std::lock_guard lock(g_live_mutex);
             std::erase_if(g_live, [](auto& w) { return w.expired(); });
             g_live.push_back(obj->holder);
             return obj;
           }),
           py::arg("config") = py::none(), py::kw_only(), py::arg("use_environment") = true)
      .def_property_readonly(
          "devices", [](const RuntimeObj& r) { return r.holder->get()->devices(); },
          "The devices (a snapshot); Device.id indexes it.")
      .def_property_readonly(
          "policy", [](const RuntimeObj& r) { return std::string(r.holder->get()->policy()); },
          "The scheduling policy in use.")
      .def_property_readonly("closed", [](const RuntimeObj& r) { return r.holder->closed(); })
      .def(
          "load_report",
          [](const RuntimeObj& r) {
            auto rep = r.holder->get()->load_report();
            py::list plugins;
            for (auto& p : rep.plugins) {
              py::dict x;
              x["path"] = p.path;
              x["name"] = p.name;
              x["version"] = p.version;
              x["loaded"] = p.status == hcr::PluginRecord::Status::loaded;
              x["reason"] = p.reason;
              x["devices"] = p.devices;
              plugins.append(x);
            }
            py::list dirs;
            for (auto& d : rep.dirs) {
              py::dict x;
              x["path"] = d.path;
              x["origin"] = d.origin;
              x["used"] = d.used;
              x["reason"] = d.reason;
              dirs.append(x);
            }
            py::dict out;
            out["dirs"] = dirs;
            out["plugins"] = plugins;
            return out;
          },
          "What the plugin loader did: {'dirs': [...], 'plugins': [...]}.")
      .def(
          "kernel",
          [](const RuntimeObj& r, const std::string& name) {
            auto k = std::make_unique<KernelObj>();
            k->holder = r.holder;
            k->kernel = r.holder->get()->kernel(name);
            k->info = r.holder->kernel_info(k->kernel.state(), name);
            return k;
          },
          py::arg("name"),
          "The kernel called `name`: a plugin's built-in (gemm_f32, potrf_f64, ...) or a new one "
          "to add implementations to.")
      .def(
          "wrap",
          [](const RuntimeObj& r, py::handle array, std::optional<bool> readonly) {
            return wrap_array(r.holder, array, readonly);
          },
          py::arg("array"), py::kw_only(), py::arg("readonly") = py::none(),
          R"doc(A buffer over a NumPy array's memory, without copying: 1-d (a vector) or 2-d,
C-contiguous or with a row stride (a slice a[:, :k] of a wider array), of float16, float32,
float64, int32, int64 or uint8. Fortran order, a column stride, another dtype or more dimensions
raise InvalidArgumentError naming them. A read-only array (or readonly=True) gives a buffer
tasks may only read. The buffer keeps the array alive while tasks may use it; read the array
after buf.acquire() (or an Event of a task writing it on a CPU) to see results.)doc")
      .def(
          "buffer",
          [](const RuntimeObj& r, py::object shape, py::object dtype, bool zero) {
            py::module_ np = py::module_::import("numpy");
            hcr::DType t = dtype_from_object(dtype, "buffer");
            py::object a = np.attr(zero ? "zeros" : "empty")(shape, numpy_dtype(t));
            return wrap_array(r.holder, a, false);
          },
          py::arg("shape"), py::arg("dtype") = "f32", py::kw_only(), py::arg("zero") = true,
          "A new buffer of `shape` ((n,) or (rows, cols)) and dtype, zeroed unless zero=False. "
          "Its memory is a NumPy array the buffer owns, so views of it never dangle.")
      .def(
          "from_dlpack",
          [](const RuntimeObj& r, py::object obj) { return runtime_from_dlpack(r.holder, obj); },
          py::arg("tensor"),
          "A buffer over a DLPack tensor's host memory (an object with __dlpack__, or a "
          "'dltensor' capsule), without copying. A device tensor raises UnsupportedError: the C++ "
          "API cannot register device memory.")
      .def(
          "submit",
          [](const RuntimeObj& r, py::handle what, py::handle reads, py::handle writes,
             py::handle read_writes, py::handle params, py::handle priority, py::handle after,
             py::handle on, py::handle grid, py::handle block, py::handle commutes,
             py::handle scratch, py::handle reduces) {
            return submit_call(r.holder, what, reads, writes, read_writes, params, priority, after,
                               on, grid, block, commutes, scratch, reduces);
          },
          py::arg("task"), py::arg("reads") = py::none(), py::arg("writes") = py::none(),
          py::arg("read_writes") = py::none(), py::arg("params") = py::none(),
          py::arg("priority") = py::none(), py::arg("after") = py::none(),
          py::arg("on") = py::none(), py::arg("grid") = py::none(), py::arg("block") = py::none(),
          py::arg("commutes") = py::none(), py::arg("scratch") = py::none(),
          py::arg("reduces") = py::none(),
          R"doc(Submits a task and returns its Event at once:

    rt.submit(kernel, reads=[a, b], read_writes=[c], params=[hcr.gemm_params()])
    rt.submit(hcr.Task(kernel).write(x).read(y))

The keyword form orders the buffer arguments reads, then writes, then read_writes, then commutes
(a Task takes any order); commutes are updated in place in any order among the tasks next to each
other that commute on them too, one at a time (Task.commute, hcr::Access::commute), then reduces
(Task.reduce, hcr::Access::reduce: each task updates a private copy holding the identity of the
buffer's reduction, Buffer.set_reduction; they are combined before its next other access); scratch
workspaces come last, each n bytes or (shape, dtype), allocated where the task runs and never
copied (Task.scratch, hcr::Task::scratch); a NumPy
array among them is wrapped (Runtime.wrap). Params: hcr.f32(x), hcr.i32(n), ... say the type; a float is an f64, an int an i64, a
NumPy scalar keeps its dtype; a Python kernel's declared types convert them. Waits without the
interpreter lock when max_tasks_in_flight tasks are unfinished.)doc")
      .def(
          "wait_all",
          [](const RuntimeObj& r) {
            auto rt = r.holder->get();
            {
              py::gil_scoped_release unlocked;
              rt->wait_all();
            }
            drain_releases();
          },
          "Blocks (without the interpreter lock) until every task submitted before the call has "
          "finished.")
      .def(
          "pause", [](const RuntimeObj& r) { r.holder->get()->pause(); },
          "Holds back every kernel task submitted from now on until resume().")
      .def(
          "resume",
          [](const RuntimeObj& r) {
            auto rt = r.holder->get();
            py::gil_scoped_release unlocked;  // it places the held tasks
            rt->resume();
          },
          "Ends a pause(); the held tasks start, most urgent first.")
      .def(
          "begin_recording", [](const RuntimeObj& r) { begin_recording(r.holder); },
          "Records the tasks submitted from now on (they run as usual) until end_recording(), "
          "which returns them as an hcr.Graph to replay. Recordings do not nest.")
      .def(
          "end_recording", [](const RuntimeObj& r) { return end_recording(r.holder); },
          "Ends the recording begin_recording() opened; returns its hcr.Graph.")
      .def(
          "paused", [](const RuntimeObj& r) { return PausedScope{r.holder}; },
          "A context manager: pause() on entry, resume() on exit (`with rt.paused(): ...`).")
      .def(
          "start_trace", [](const RuntimeObj& r) { r.holder->get()->start_trace(); },
          "Starts recording task and copy events; clears earlier ones.")
      .def("stop_trace", [](const RuntimeObj& r) { r.holder->get()->stop_trace(); })
      .def(
          "trace_events", [](const RuntimeObj& r) { return r.holder->get()->trace_events(); },
          "The events recorded so far, ordered by start time.")
      .def(
          "write_trace",
          [](const RuntimeObj& r, py::object path) {
            r.holder->get()->write_trace(
                py::cast<std::string>(py::module_::import("os").attr("fspath")(path)));
          },
          py::arg("path"), "Writes the events as Chrome/Perfetto trace JSON.")
      .def(
          "write_gantt",
          [](const RuntimeObj& r, py::object path) {
            r.holder->get()->write_gantt(
                py::cast<std::string>(py::module_::import("os").attr("fspath")(path)));
          },
          py::arg("path"), "Writes a Gantt chart of the events as SVG.")
      .def(
          "stats", [](const RuntimeObj& r) { return stats_dict(r.holder->get()->stats()); },
          "Counters since the start, as a dict (tasks, devices, data, accuracy, contexts).")
      .def(
          "close", [](RuntimeObj& r) { r.holder->close(); },
          "Waits for every task, writes data home and ends the runtime. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](RuntimeObj& r, py::args) { r.holder->close(); })
      .def("__repr__", [](const RuntimeObj& r) {
        if (r.holder->closed()) return std::string("hcr.Runtime(closed)");
        auto rt = r.holder->get();
        return "hcr.Runtime(" + std::to_string(rt->devices().size()) + " devices, policy " +
               std::string(rt->policy()) + ")";
      });
}

}  // namespace hcrpy
