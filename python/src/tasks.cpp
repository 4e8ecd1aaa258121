// Kernels (Python functions as CPU kernels, sources, binaries, the module's native helpers), task
// building and events. The interpreter lock is taken only around a Python kernel's call: built-in
// and compiled kernels, waits and submits run without it.
#include "binding.hpp"

#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

namespace hcrpy {

namespace {

thread_local const RuntimeHolder* tls_kernel_runtime = nullptr;

/// Keeps this thread's interpreter state for the thread's life: taking the lock then costs no
/// thread-state creation per kernel call (pybind11 would delete it at each scope's end).
void keep_thread_state(py::gil_scoped_acquire& gil) {
  thread_local bool kept = false;
  if (!kept) {
    gil.inc_ref();
    kept = true;
  }
}

std::string type_name(py::handle o) {
  return py::cast<std::string>(py::type::handle_of(o).attr("__name__"));
}

/// str(o), or a placeholder when its __str__ raises.
std::string safe_str(py::handle o) {
  PyObject* s = PyObject_Str(o.ptr());
  if (s == nullptr) {
    PyErr_Clear();
    return "<str() failed>";
  }
  const char* text = PyUnicode_AsUTF8(s);
  std::string out = text ? text : "<not UTF-8>";
  if (text == nullptr) PyErr_Clear();
  Py_DECREF(s);
  return out;
}

// --- Python kernels -----------------------------------------------------------------------------

struct PythonImpl {
  PyRef fn;
  std::string name;
  std::vector<hcr::DType> params;
  const RuntimeHolder* holder = nullptr;
};

py::object decode_param(hcr::TaskContext& ctx, size_t j, hcr::DType t) {
  switch (t) {
    case hcr::DType::f32: return py::float_(ctx.param<float>(j));
    case hcr::DType::f64: return py::float_(ctx.param<double>(j));
    case hcr::DType::i32: return py::int_(ctx.param<int32_t>(j));
    case hcr::DType::i64: return py::int_(ctx.param<int64_t>(j));
    case hcr::DType::u8: return py::int_(ctx.param<uint8_t>(j));
    default: throw_invalid("parameter type " + std::string(hcr::dtype_name(t)));
  }
}

hcr::CpuFunction python_kernel(std::shared_ptr<PythonImpl> impl) {
  return [impl](hcr::TaskContext& ctx) {
    if (python_finalizing())
      throw hcr::Error(hcr::ErrorCode::kernel,
                       "kernel '" + impl->name + "': the Python interpreter has shut down");
    py::gil_scoped_acquire gil;
    keep_thread_state(gil);
    const RuntimeHolder* outer = std::exchange(tls_kernel_runtime, impl->holder);
    struct Restore {
      const RuntimeHolder* outer;
      ~Restore() { tls_kernel_runtime = outer; }
    } restore{outer};

    const hcr_exec_context_t& raw = ctx.raw();
    const size_t np = impl->params.size();
    if (raw.num_params != np)
      throw hcr::Error(hcr::ErrorCode::invalid_argument,
                       "kernel '" + impl->name + "' declares " + std::to_string(np) +
                           " parameter(s); the task has " + std::to_string(raw.num_params));
    // Every Python error, from the call or from making its arguments, leaves as a
    // PythonKernelError: the exception objects must not travel through the runtime's threads
    // inside pybind11's error_already_set, whose destructor would wait for the lock.
    py::tuple args(raw.num_args + np);
    size_t made = 0;
    try {
      for (; made < raw.num_args; ++made) {
        const hcr_arg_t& a = raw.args[made];
        if (a.host == nullptr)
          throw hcr::Error(hcr::ErrorCode::internal, "kernel '" + impl->name + "': argument " +
                                                         std::to_string(made) +
                                                         " has no host address");
        args[made] = make_view(static_cast<hcr::DType>(a.dtype), a.host, a.rows, a.cols, a.ld, 2,
                               hcr::writes(static_cast<hcr::Access>(a.access)), py::handle());
      }
      for (size_t j = 0; j < np; ++j)
        args[raw.num_args + j] = decode_param(ctx, j, impl->params[j]);
      impl->fn.get()(*args);
    } catch (py::error_already_set& e) {
      for (size_t i = 0; i < made; ++i) clear_writeable(args[i]);
      py::object value = py::reinterpret_borrow<py::object>(e.value());
      std::string text = type_name(value) + ": " + safe_str(value);
      throw PythonKernelError("kernel '" + impl->name + "' raised " + text,
                              std::make_shared<PyRef>(std::move(value)));
    } catch (...) {
      for (size_t i = 0; i < made; ++i) clear_writeable(args[i]);
      throw;
    }
    // The views outlive the call only as read-only memory.
    for (size_t i = 0; i < made; ++i) clear_writeable(args[i]);
  };
}

// --- the module's native helper kernels ---------------------------------------------------------

hcr::CpuFunction native_helper(const std::string& which) {
  if (which == "noop") return [](hcr::TaskContext&) {};
  if (which == "fill")
    return [](hcr::TaskContext& ctx) {
      const hcr_exec_context_t& raw = ctx.raw();
      if (raw.num_params != 1)
        throw hcr::Error(
            hcr::ErrorCode::invalid_argument,
            "fill: takes 1 parameter (the value), not " + std::to_string(raw.num_params));
      for (size_t i = 0; i < raw.num_args; ++i) {
        const hcr_arg_t& a = raw.args[i];
        if (!hcr::writes(static_cast<hcr::Access>(a.access))) continue;
        visit_dtype(static_cast<hcr::DType>(a.dtype), [&](auto tag) {
          using T = typename decltype(tag)::type;
          if (raw.params_size != sizeof(T))  // exact: the one parameter runs to the end
            throw hcr::Error(hcr::ErrorCode::invalid_argument,
                             "fill: the value is " + std::to_string(raw.params_size) +
                                 " bytes; buffer " + std::to_string(i) + " holds " +
                                 std::string(hcr::dtype_name(static_cast<hcr::DType>(a.dtype))) +
                                 " (" + std::to_string(sizeof(T)) + " bytes): pass hcr." +
                                 std::string(hcr::dtype_name(static_cast<hcr::DType>(a.dtype))) +
                                 "(value)");
          const T v = ctx.param<T>(0);
          auto* p = static_cast<T*>(a.host);
          for (size_t r = 0; r < a.rows; ++r)
            for (size_t c = 0; c < a.cols; ++c) p[r * a.ld + c] = v;
        });
      }
    };
  if (which == "copy")
    return [](hcr::TaskContext& ctx) {
      const hcr_exec_context_t& raw = ctx.raw();
      if (raw.num_args != 2)
        throw hcr::Error(hcr::ErrorCode::invalid_argument,
                         "copy: takes 2 buffers (source read, destination written), not " +
                             std::to_string(raw.num_args));
      const hcr_arg_t &s = raw.args[0], &d = raw.args[1];
      if (s.dtype != d.dtype || s.rows != d.rows || s.cols != d.cols)
        throw hcr::Error(hcr::ErrorCode::invalid_argument,
                         "copy: source " + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                             " and destination " + std::to_string(d.rows) + "x" +
                             std::to_string(d.cols) + " differ in shape or type");
      const size_t isz = hcr::dtype_size(static_cast<hcr::DType>(s.dtype));
      for (size_t r = 0; r < s.rows; ++r)
        std::memcpy(static_cast<char*>(d.host) + r * d.ld * isz,
                    static_cast<const char*>(s.host) + r * s.ld * isz, s.cols * isz);
    };
  throw_invalid("Kernel.cpu: '" + which +
                "' is not one of the module's native kernels ('noop', 'fill', 'copy'); pass a "
                "Python function for your own");
}

// --- waiting for events on other threads --------------------------------------------------------

/// Waits without ever throwing: Event::wait refuses a task a paused runtime holds, so that case
/// polls until it has finished.
void wait_quietly(const hcr::Event& ev) {
  try {
    ev.wait();
    return;
  } catch (...) {
  }
  for (int us = 100; !ev.ready(); us = std::min(us * 2, 20000))
    std::this_thread::sleep_for(std::chrono::microseconds(us));
}

/// Threads that wait for events on behalf of Event.add_done_callback (and so `await`): one per
/// event waited for at once, so that no event's callback waits behind another's (a callback may be
/// what lets a paused runtime go); a thread idle for a while ends.
class Waiters {
 public:
  struct Job {
    hcr::Event ev;
    std::vector<std::shared_ptr<Gate>> gates;
    PyRef event;
    PyRef callback;
  };

  void add(Job job) {
    std::lock_guard lock(m_);
    if (stopped_)
      throw hcr::Error(hcr::ErrorCode::shutdown, "add_done_callback: the module is shutting down");
    jobs_.push_back(std::move(job));
    if (jobs_.size() > idle_) {
      std::thread t([this] { loop(); });
      auto id = t.get_id();
      threads_.emplace(id, std::move(t));
    } else {
      cv_.notify_one();
    }
  }

  void stop() {
    std::map<std::thread::id, std::thread> threads;
    {
      std::lock_guard lock(m_);
      stopped_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    py::gil_scoped_release unlocked;  // their callbacks take the lock
    for (auto& [id, t] : threads) t.join();
  }

 private:
  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(m_);
        ++idle_;
        bool woken = cv_.wait_for(lock, std::chrono::seconds(10),
                                  [&] { return stopped_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) {
          if (!stopped_ && !woken) {  // idle: this thread ends (it holds no Python state)
            if (auto it = threads_.find(std::this_thread::get_id()); it != threads_.end()) {
              it->second.detach();
              threads_.erase(it);
            }
          }
          if (stopped_ || !woken) return;
          continue;
        }
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      wait_quietly(job.ev);
      for (auto& g : job.gates) g->wait();
      if (python_finalizing()) continue;  // leak rather than touch Python
      py::gil_scoped_acquire gil;
      try {
        job.callback.get()(job.event.get());
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("hcr.Event done callback");
      }
      job.callback.reset();
      job.event.reset();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::map<std::thread::id, std::thread> threads_;
  size_t idle_ = 0;
  bool stopped_ = false;
};

Waiters& waiters() {
  static auto* w = new Waiters;  // never destroyed: stopped by the exit handler
  return *w;
}

// --- tasks --------------------------------------------------------------------------------------

/// hcr.Task: a task under construction; Runtime.submit consumes it.
struct TaskObj {
  std::shared_ptr<RuntimeHolder> holder;
  std::shared_ptr<KernelInfo> info;
  std::optional<hcr::Task> task;
  std::vector<py::object> buffers;  // alive until submitted
  size_t params = 0;

  hcr::Task& get(const char* what) {
    if (!task)
      throw_invalid(std::string("Task.") + what + ": the task of kernel '" + info->name +
                    "' was submitted already");
    return *task;
  }
};

KernelObj& as_kernel(py::handle o) {
  if (!py::isinstance<KernelObj>(o)) throw_invalid("expected an hcr.Kernel, got " + type_name(o));
  return py::cast<KernelObj&>(o);
}

/// Adds a buffer argument; a NumPy array is wrapped (rt.wrap) first. Returns the Buffer object,
/// which the caller keeps until the task is submitted.
py::object add_arg(hcr::Task& t, const std::shared_ptr<RuntimeHolder>& holder, py::handle arg,
                   hcr::Access mode) {
  py::object obj =
      py::isinstance<py::array>(arg)
          ? wrap_array(holder, arg, hcr::writes(mode) ? std::optional<bool>(false) : std::nullopt)
          : py::reinterpret_borrow<py::object>(arg);
  BufferObj& b = as_buffer(obj);
  b.check_writable("task argument", mode);
  b.used = true;
  t.arg(b.state(), mode);
  return obj;
}

/// A workspace for the task (hcr::Task::scratch): `n` bytes as a uint8 vector, or (shape, dtype)
/// with shape n or (rows, cols); its contents are undefined when the kernel starts.
void add_scratch(hcr::Task& t, py::handle spec) {
  if (py::isinstance<py::int_>(spec)) {
    const auto n = py::cast<int64_t>(spec);
    if (n <= 0) throw_invalid("scratch: " + std::to_string(n) + " bytes: a workspace needs some");
    t.scratch(hcr::DType::u8, 1, static_cast<size_t>(n));
    return;
  }
  if (!py::isinstance<py::tuple>(spec) || py::len(spec) != 2)
    throw_invalid("scratch: " + py::str(spec).cast<std::string>() +
                  " is not a byte count or a (shape, dtype) pair");
  py::tuple pair = py::reinterpret_borrow<py::tuple>(spec);
  const hcr::DType dtype = dtype_from_object(pair[1], "scratch");
  size_t rows = 1, cols = 0;
  if (py::isinstance<py::int_>(pair[0])) {
    cols = py::cast<size_t>(pair[0]);
  } else {
    py::tuple shape = py::cast<py::tuple>(pair[0]);
    if (py::len(shape) == 1) {
      cols = py::cast<size_t>(shape[0]);
    } else if (py::len(shape) == 2) {
      rows = py::cast<size_t>(shape[0]);
      cols = py::cast<size_t>(shape[1]);
    } else {
      throw_invalid("scratch: a shape of " + std::to_string(py::len(shape)) +
                    " dimensions (n or (rows, cols))");
    }
  }
  t.scratch(dtype, rows, cols);
}

void add_param_checked(hcr::Task& t, const KernelInfo& info, py::handle v, size_t index) {
  std::optional<hcr::DType> declared;
  if (info.python) {
    if (!info.params || index >= info.params->size())
      throw_invalid("kernel '" + info.name + "', param " + std::to_string(index) +
                    ": its Python implementation declares " +
                    std::to_string(info.params ? info.params->size() : 0) +
                    " parameter(s) (Kernel.cpu(fn, params=[...]))");
    declared = (*info.params)[index];
  }
  add_param(t, v, declared, index, info.name);
}

void check_param_count(const KernelInfo& info, size_t given) {
  if (info.python && info.params && given != info.params->size())
    throw_invalid("kernel '" + info.name + "' declares " + std::to_string(info.params->size()) +
                  " parameter(s) for its Python implementation; the task has " +
                  std::to_string(given));
}

void set_geometry(hcr::Task& t, py::handle v, bool grid) {
  uint64_t d[3] = {1, 1, 1};
  if (py::isinstance<py::int_>(v)) {
    d[0] = py::cast<uint64_t>(v);
  } else {
    auto seq = py::cast<std::vector<uint64_t>>(v);
    if (seq.empty() || seq.size() > 3)
      throw_invalid(std::string(grid ? "grid" : "block") + ": 1 to 3 extents, not " +
                    std::to_string(seq.size()));
    for (size_t i = 0; i < seq.size(); ++i) d[i] = seq[i];
  }
  if (grid) t.grid(d[0], d[1], d[2]);
  else
    t.block(static_cast<uint32_t>(d[0]), static_cast<uint32_t>(d[1]), static_cast<uint32_t>(d[2]));
}

void add_after(hcr::Task& t, py::handle after) {
  if (after.is_none()) return;
  if (py::isinstance<EventObj>(after)) {
    t.after(py::cast<EventObj&>(after).ev);
    return;
  }
  for (py::handle e : after) {
    if (!py::isinstance<EventObj>(e))
      throw_invalid("after: expected hcr.Event, got " + type_name(e));
    t.after(py::cast<EventObj&>(e).ev);
  }
}

py::object submit_task(RuntimeHolder& holder, hcr::Task& task) {
  auto rt = holder.get();
  hcr::Event ev;
  {
    py::gil_scoped_release unlocked;  // submit waits under back-pressure
    ev = rt->submit(task);
  }
  return make_event(std::move(ev));
}

}  // namespace

bool in_kernel_of(const RuntimeHolder* h) noexcept { return h && tls_kernel_runtime == h; }

void Gate::open(std::exception_ptr e) {
  {
    std::lock_guard lock(m);
    done = true;
    error = std::move(e);
  }
  cv.notify_all();
}

void Gate::wait() {
  std::unique_lock lock(m);
  cv.wait(lock, [&] { return done; });
}

bool EventObj::ready() const {
  if (!ev.ready()) return false;
  for (auto& g : gates) {
    std::lock_guard lock(g->m);
    if (!g->done) return false;
  }
  return true;
}

void EventObj::wait_done() const {
  {
    py::gil_scoped_release unlocked;
    ev.wait();
    for (auto& g : gates) g->wait();
  }
  drain_releases();
}

std::exception_ptr EventObj::error() const {
  if (auto e = ev.error()) return e;
  for (auto& g : gates) {
    std::lock_guard lock(g->m);
    if (g->error) return g->error;
  }
  return nullptr;
}

py::object make_event(hcr::Event ev, std::vector<std::shared_ptr<Gate>> gates) {
  auto e = std::make_unique<EventObj>();
  e->ev = std::move(ev);
  e->gates = std::move(gates);
  return py::cast(std::move(e), py::return_value_policy::take_ownership);
}

void notify_when_done(py::object event, py::object callback) {
  EventObj& e = py::cast<EventObj&>(event);
  if (e.ready()) {
    callback(event);
    return;
  }
  Waiters::Job job;
  job.ev = e.ev;
  job.gates = e.gates;
  job.event = PyRef(std::move(event));
  job.callback = PyRef(std::move(callback));
  waiters().add(std::move(job));
}

void stop_waiters() { waiters().stop(); }

/// Submits rt.submit(kernel, reads=..., ...) without a Task object.
py::object submit_call(const std::shared_ptr<RuntimeHolder>& holder, py::handle what,
                       py::handle reads, py::handle writes, py::handle read_writes,
                       py::handle params, py::handle priority, py::handle after, py::handle on,
                       py::handle grid, py::handle block, py::handle commutes, py::handle scratch,
                       py::handle reduces) {
  if (py::isinstance<TaskObj>(what)) {
    TaskObj& t = py::cast<TaskObj&>(what);
    if (!reads.is_none() || !writes.is_none() || !read_writes.is_none() || !commutes.is_none() ||
        !reduces.is_none() || !scratch.is_none() || !params.is_none() || !priority.is_none() ||
        !after.is_none() || !on.is_none() || !grid.is_none() || !block.is_none())
      throw_invalid("submit: a Task carries its own arguments: pass it alone");
    if (t.holder.get() != holder.get())
      throw_invalid("submit: the task's kernel '" + t.info->name + "' belongs to another runtime");
    hcr::Task& task = t.get("submit");
    check_param_count(*t.info, t.params);
    py::object ev = submit_task(*holder, task);
    note_recorded(*holder, t.buffers);
    t.task.reset();
    t.buffers.clear();
    return ev;
  }
  KernelObj& k = as_kernel(what);
  if (k.holder.get() != holder.get())
    throw_invalid("submit: kernel '" + k.info->name + "' belongs to another runtime");
  hcr::Task task(k.kernel);
  std::vector<py::object> made;  // wraps of arrays, alive until submitted
  if (!reads.is_none())
    for (py::handle b : reads) made.push_back(add_arg(task, holder, b, hcr::Access::read));
  if (!writes.is_none())
    for (py::handle b : writes) made.push_back(add_arg(task, holder, b, hcr::Access::write));
  if (!read_writes.is_none())
    for (py::handle b : read_writes)
      made.push_back(add_arg(task, holder, b, hcr::Access::read_write));
  if (!commutes.is_none())
    for (py::handle b : commutes) made.push_back(add_arg(task, holder, b, hcr::Access::commute));
  if (!reduces.is_none())
    for (py::handle b : reduces) made.push_back(add_arg(task, holder, b, hcr::Access::reduce));
  if (!scratch.is_none())
    for (py::handle s : scratch) add_scratch(task, s);
  size_t n = 0;
  if (!params.is_none())
    for (py::handle v : params) add_param_checked(task, *k.info, v, n++);
  check_param_count(*k.info, n);
  if (!priority.is_none()) task.priority(py::cast<int>(priority));
  add_after(task, after);
  if (!on.is_none()) task.on(py::cast<uint32_t>(on));
  if (!grid.is_none()) set_geometry(task, grid, true);
  if (!block.is_none()) set_geometry(task, block, false);
  py::object ev = submit_task(*holder, task);
  note_recorded(*holder, made);
  return ev;
}

void register_tasks(py::module_& m) {
  py::class_<EventObj>(m, "Event",
                       R"doc(Completion of a submitted task (or of an operation made of tasks,
such as hcr.linalg.gemm). wait() blocks without the interpreter lock; result() re-raises the
task's error (a Python kernel's own exception object); `await event` works in asyncio.)doc")
      .def("wait", &EventObj::wait_done,
           "Blocks until the task has finished. Raises InvalidArgumentError instead when it never "
           "would (the task waits for a host view this thread holds, or a paused runtime holds "
           "it).")
      .def(
          "result",
          [](const EventObj& e) {
            e.wait_done();
            if (auto err = e.error()) {
              raise_exception_ptr(err);
              throw py::error_already_set();
            }
          },
          "Waits, then raises the task's error, if any (returns None).")
      .def(
          "exception",
          [](const EventObj& e) {
            e.wait_done();
            return exception_object(e.error());
          },
          "Waits, then returns the task's error as an exception object, or None.")
      .def("done", &EventObj::ready, "True once the task has finished, successfully or not.")
      .def_property_readonly(
          "device", [](const EventObj& e) { return e.ev.device(); },
          "Id of the device that ran it; -1 before it ran or for joins.")
      .def(
          "add_done_callback",
          [](py::object self, py::object fn) { notify_when_done(std::move(self), std::move(fn)); },
          py::arg("fn"),
          "Calls fn(event) once the task has finished: at once when it has, else from a waiter "
          "thread (with the interpreter lock).")
      .def("__repr__", [](const EventObj& e) {
        return std::string("hcr.Event(") + (e.ready() ? "done" : "pending") + ")";
      });

  py::class_<KernelObj>(m, "Kernel",
                        R"doc(A kernel of one runtime: a plugin's built-in (rt.kernel("gemm_f32"))
or one you add implementations to (.cpu(fn), .opencl(source), .cuda(source), ...).)doc")
      .def_property_readonly("name", [](const KernelObj& k) { return k.kernel.name(); })
      .def(
          "cpu",
          [](py::object self, py::object fn, py::object params) {
            KernelObj& k = as_kernel(self);
            if (py::isinstance<py::str>(fn)) {
              if (!params.is_none()) throw_invalid("Kernel.cpu: params= is for Python functions");
              k.kernel.cpu(native_helper(py::cast<std::string>(fn)));
              return self;
            }
            if (!PyCallable_Check(fn.ptr()))
              throw_invalid("Kernel.cpu: expected a function, got " + type_name(fn));
            auto impl = std::make_shared<PythonImpl>();
            impl->name = k.kernel.name();
            impl->holder = k.holder.get();
            if (!params.is_none())
              for (py::handle t : params)
                impl->params.push_back(dtype_from_object(t, "Kernel.cpu params"));
            for (auto t : impl->params)
              if (t == hcr::DType::f16)
                throw_invalid("Kernel.cpu params: f16 parameters are not supported");
            impl->fn = PyRef(fn);
            k.kernel.cpu(python_kernel(impl));
            k.info->python = true;
            k.info->params = impl->params;
            return self;
          },
          py::arg("fn"), py::arg("params") = py::none(),
          R"doc(Adds a host implementation: a Python function, or the name of one of the module's
native kernels ('noop'; 'fill': every written buffer = param 0, of the buffer's type; 'copy':
buffer 0 -> buffer 1), which run without the interpreter lock.

A Python function is called as fn(*arrays, *params): one NumPy view per buffer argument, in task
order (2-d, rows x cols; read-only for 'read' arguments), then the parameters, which `params`
declares (['f32', 'i64'], NumPy dtypes also do): submit converts and range-checks them. The
interpreter lock is held for the call only. An exception it raises fails the task and is what
Event.result() raises. Views are valid for the call: they turn read-only when it returns.)doc")
      .def(
          "opencl",
          [](py::object self, std::string src, std::string options, std::string entry) {
            as_kernel(self).kernel.source("opencl", std::move(src), std::move(options),
                                          std::move(entry));
            return self;
          },
          py::arg("source"), py::arg("build_options") = "", py::arg("entry") = "",
          "Adds OpenCL C source (buffers first, then each parameter as its own kernel argument).")
      .def(
          "cuda",
          [](py::object self, std::string src, std::string options, std::string entry) {
            as_kernel(self).kernel.source("cuda", std::move(src), std::move(options),
                                          std::move(entry));
            return self;
          },
          py::arg("source"), py::arg("build_options") = "", py::arg("entry") = "",
          "Adds CUDA C++ source, compiled by the CUDA backend (NVRTC).")
      .def(
          "source",
          [](py::object self, std::string api, std::string src, std::string options,
             std::string entry) {
            as_kernel(self).kernel.source(std::move(api), std::move(src), std::move(options),
                                          std::move(entry));
            return self;
          },
          py::arg("api"), py::arg("source"), py::arg("build_options") = "", py::arg("entry") = "",
          "Adds source code for the backend named `api`.")
      .def(
          "binary",
          [](py::object self, std::string api, std::string path, std::string options,
             std::string entry) {
            as_kernel(self).kernel.binary(std::move(api), std::move(path), std::move(options),
                                          std::move(entry));
            return self;
          },
          py::arg("api"), py::arg("path"), py::arg("build_options") = "", py::arg("entry") = "",
          "Adds a prebuilt binary (an OpenCL program binary, an FPGA bitstream) for `api`.")
      .def(
          "native",
          [](py::object self, std::string api, uintptr_t fn, uintptr_t user_data) {
            if (fn == 0) throw_invalid("Kernel.native: a null function address");
            as_kernel(self).kernel.native(std::move(api), reinterpret_cast<hcr_kernel_fn>(fn),
                                          reinterpret_cast<void*>(user_data));
            return self;
          },
          py::arg("api"), py::arg("fn"), py::arg("user_data") = 0,
          "Adds a native launcher: the address of a C function hcr_kernel_fn (e.g. from ctypes) "
          "called with the backend's queue; user_data must outlive the runtime.")
      .def("__repr__", [](const KernelObj& k) { return "hcr.Kernel('" + k.kernel.name() + "')"; });

  py::class_<TaskObj>(m, "Task",
                      R"doc(A task under construction, for any order of arguments:

    rt.submit(hcr.Task(k).read(a).write(b).param(hcr.f32(2)).priority(1))

Each method returns the task. Runtime.submit consumes it.)doc")
      .def(py::init([](py::handle kernel) {
             KernelObj& k = as_kernel(kernel);
             auto t = std::make_unique<TaskObj>();
             t->holder = k.holder;
             t->info = k.info;
             t->task.emplace(k.kernel);
             return t;
           }),
           py::arg("kernel"))
      .def(
          "read",
          [](py::object self, py::object b) {
            TaskObj& t = py::cast<TaskObj&>(self);
            t.buffers.push_back(add_arg(t.get("read"), t.holder, b, hcr::Access::read));
            return self;
          },
          py::arg("buffer"))
      .def(
          "write",
          [](py::object self, py::object b) {
            TaskObj& t = py::cast<TaskObj&>(self);
            t.buffers.push_back(add_arg(t.get("write"), t.holder, b, hcr::Access::write));
            return self;
          },
          py::arg("buffer"))
      .def(
          "read_write",
          [](py::object self, py::object b) {
            TaskObj& t = py::cast<TaskObj&>(self);
            t.buffers.push_back(add_arg(t.get("read_write"), t.holder, b, hcr::Access::read_write));
            return self;
          },
          py::arg("buffer"))
      .def(
          "commute",
          [](py::object self, py::object b) {
            TaskObj& t = py::cast<TaskObj&>(self);
            t.buffers.push_back(add_arg(t.get("commute"), t.holder, b, hcr::Access::commute));
            return self;
          },
          py::arg("buffer"))
      .def(
          "reduce",
          [](py::object self, py::object b) {
            TaskObj& t = py::cast<TaskObj&>(self);
            t.buffers.push_back(add_arg(t.get("reduce"), t.holder, b, hcr::Access::reduce));
            return self;
          },
          py::arg("buffer"),
          "Contributes to the buffer through its reduction (Buffer.set_reduction): the kernel sees "
          "a private copy holding the identity, to update in place.")
      .def(
          "scratch",
          [](py::object self, py::object spec) {
            TaskObj& t = py::cast<TaskObj&>(self);
            add_scratch(t.get("scratch"), spec);
            return self;
          },
          py::arg("spec"),
          "Adds a workspace argument: n bytes (a uint8 vector), or (shape, dtype). Allocated on "
          "the device the task runs on, never copied, its contents undefined at the start.")
      .def(
          "arg",
          [](py::object self, py::object b, const std::string& mode) {
            TaskObj& t = py::cast<TaskObj&>(self);
            t.buffers.push_back(add_arg(t.get("arg"), t.holder, b, access_from_string(mode)));
            return self;
          },
          py::arg("buffer"), py::arg("mode"))
      .def(
          "param",
          [](py::object self, py::handle v) {
            TaskObj& t = py::cast<TaskObj&>(self);
            add_param_checked(t.get("param"), *t.info, v, t.params);
            ++t.params;
            return self;
          },
          py::arg("value"),
          "Appends a scalar: hcr.f32(x), ..., a NumPy scalar (its dtype), a float (f64), an int "
          "(i64), bytes or hcr.Param; for a Python kernel, converted to its declared type.")
      .def(
          "priority",
          [](py::object self, int p) {
            py::cast<TaskObj&>(self).get("priority").priority(p);
            return self;
          },
          py::arg("priority"))
      .def(
          "after",
          [](py::object self, py::handle e) {
            add_after(py::cast<TaskObj&>(self).get("after"), e);
            return self;
          },
          py::arg("event"), "Runs only after the event(s) have finished (fails if one failed).")
      .def(
          "on",
          [](py::object self, uint32_t device) {
            py::cast<TaskObj&>(self).get("on").on(device);
            return self;
          },
          py::arg("device"), "Runs only on this device (an id from Runtime.devices).")
      .def(
          "grid",
          [](py::object self, py::handle g) {
            set_geometry(py::cast<TaskObj&>(self).get("grid"), g, true);
            return self;
          },
          py::arg("extents"), "Work items per dimension for source and binary kernels.")
      .def(
          "block",
          [](py::object self, py::handle b) {
            set_geometry(py::cast<TaskObj&>(self).get("block"), b, false);
            return self;
          },
          py::arg("extents"), "Work-group (OpenCL) or block (CUDA) size.")
      .def_property_readonly("submitted", [](const TaskObj& t) { return !t.task.has_value(); });
}

}  // namespace hcrpy
