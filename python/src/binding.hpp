// What the parts of the hcr Python module share: the objects Python holds (runtime, buffer,
// kernel, task, event), references that may be dropped without the interpreter lock, and the
// conversions between NumPy and hcr element types. Only the public C++ API is used.
#pragma once

#include <hcr/hcr.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace hcrpy {

namespace py = pybind11;

// --- references dropped from any thread (release.cpp) -------------------------------------------

/// Queues a reference to be dropped by the interpreter's main thread (Py_AddPendingCall) or at the
/// next call into the module: for threads of the runtime, which must never wait for the lock.
/// Steals `o`.
void defer_decref(PyObject* o) noexcept;
/// Drops the queued references; the caller holds the interpreter lock.
void drain_releases() noexcept;
/// Set once the module's exit handler has run: nothing may take the lock any more.
bool python_finalizing() noexcept;
void set_python_finalizing() noexcept;

/// A strong reference that may be dropped on any thread: with the lock held it is dropped at once,
/// otherwise it is queued (defer_decref). Runtime threads drop kernels and errors this way.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(py::object o) noexcept : p_(o.release().ptr()) {}
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  PyRef(PyRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PyRef& operator=(PyRef&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~PyRef() { reset(); }
  void reset() noexcept;
  py::handle get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

// --- errors (errors.cpp) ------------------------------------------------------------------------

/// A Python exception raised by a Python kernel, carried through the runtime to the task's Event
/// (and re-raised there as the very same exception object).
class PythonKernelError : public std::runtime_error {
 public:
  PythonKernelError(const std::string& message, std::shared_ptr<PyRef> exception)
      : std::runtime_error(message), exception_(std::move(exception)) {}
  py::handle exception() const noexcept { return exception_->get(); }

 private:
  std::shared_ptr<PyRef> exception_;
};

/// Sets the Python error for a C++ exception (hcr::Error -> hcr.<Code>Error with .code, a Python
/// kernel's exception -> itself, anything else -> RuntimeError).
void raise_exception_ptr(std::exception_ptr e);
/// The Python exception object for `e`, not raised.
py::object exception_object(std::exception_ptr e);
void register_errors(py::module_& m);
[[noreturn]] void throw_invalid(const std::string& message);

// --- element types ------------------------------------------------------------------------------

template <class T>
struct TypeTag {
  using type = T;
};

template <class B>
struct ElemOfImpl;
template <class T>
struct ElemOfImpl<hcr::Buffer<T>> {
  using type = T;
};
/// The element type of an hcr::Buffer<T> (or a reference to one).
template <class B>
using ElemOf = typename ElemOfImpl<std::remove_cvref_t<B>>::type;

/// Calls f(TypeTag<T>{}) for the C++ element type of `t`; throws for types the module lacks.
template <class F>
decltype(auto) visit_dtype(hcr::DType t, F&& f) {
  switch (t) {
    case hcr::DType::f16: return f(TypeTag<hcr::half>{});
    case hcr::DType::f32: return f(TypeTag<float>{});
    case hcr::DType::f64: return f(TypeTag<double>{});
    case hcr::DType::i32: return f(TypeTag<int32_t>{});
    case hcr::DType::i64: return f(TypeTag<int64_t>{});
    case hcr::DType::u8: return f(TypeTag<uint8_t>{});
    default:
      throw hcr::Error(hcr::ErrorCode::unsupported,
                       "element type " + std::string(hcr::dtype_name(t)) +
                           " has no NumPy counterpart in the hcr module");
  }
}

/// str(o).
inline std::string text(py::handle o) {
  return py::reinterpret_steal<py::str>(PyObject_Str(o.ptr())).cast<std::string>();
}

/// The hcr element type of a NumPy dtype; throws Error(invalid_argument) naming it otherwise.
hcr::DType dtype_from_numpy(const py::dtype& dt, const char* what);
py::dtype numpy_dtype(hcr::DType t);
/// hcr::DType from a user's spelling: "f32", "float32", numpy.float32, numpy.dtype(...).
hcr::DType dtype_from_object(py::handle o, const char* what);
hcr::Access access_from_string(const std::string& mode);
const char* access_name(hcr::Access a) noexcept;

/// Marks a NumPy array read-only (no Python-level call).
void clear_writeable(py::handle array) noexcept;

// --- the runtime holder (runtime.cpp) -----------------------------------------------------------

struct KernelInfo;
struct KeepAlive;
struct BufferObj;

using AnyBuffer = std::variant<hcr::Buffer<hcr::half>, hcr::Buffer<float>, hcr::Buffer<double>,
                               hcr::Buffer<int32_t>, hcr::Buffer<int64_t>, hcr::Buffer<uint8_t>>;

/// What identifies a wrap of NumPy memory: the same memory in the same layout is one buffer, so
/// that tasks on it (and hcr.linalg calls given the array) are ordered.
struct WrapKey {
  uintptr_t data;
  size_t rows, cols, ld;
  int dtype, ndim;
  bool readonly;
  auto operator<=>(const WrapKey&) const = default;
};

/// The buffer of one wrapped memory: its live Python object, or, once that object is gone, the
/// handle kept until the tasks submitted before have finished (a new wrap of the memory adopts it,
/// so that its tasks are ordered after those).
struct WrapEntry {
  BufferObj* live = nullptr;
  std::optional<AnyBuffer> retiring;
  uint64_t retiring_since =
      0;  ///< which retirement `retiring` is (its release clears only its own)
};

/// What Python objects of one runtime share: the C++ runtime (null once closed), references kept
/// until it closes, and what the module knows of its kernels.
struct RuntimeHolder {
  RuntimeHolder();
  ~RuntimeHolder();

  /// The runtime, or Error(shutdown) once closed. Callers hold the copy only for the call.
  std::shared_ptr<hcr::Runtime> get() const;
  bool closed() const;
  /// Waits for every task, writes data home and ends the runtime (interpreter lock released).
  void close();
  /// Keeps `k` until the runtime is closed (memory the runtime may still use).
  void park(std::unique_ptr<KeepAlive> k);
  std::shared_ptr<KernelInfo> kernel_info(hcr::detail::KernelState* k, const std::string& name);

  mutable std::mutex mutex;
  std::shared_ptr<hcr::Runtime> rt;
  std::vector<std::unique_ptr<KeepAlive>> parked;
  std::vector<std::pair<hcr::detail::KernelState*, std::shared_ptr<KernelInfo>>> kernels;
  std::map<WrapKey, WrapEntry> wraps;  // under `mutex`
  uint64_t retirements = 0;            // under `mutex`
  // Runtime.begin_recording to end_recording: the Buffer objects given to the tasks submitted
  // meanwhile, which the Graph keeps (graphs.cpp). Under the interpreter lock.
  bool recording = false;
  std::vector<PyRef> recorded;
};

/// True on a thread running a Python kernel of `h`'s runtime (the lock is held there).
bool in_kernel_of(const RuntimeHolder* h) noexcept;
/// Closes every live runtime; the module's exit handler.
void close_all_runtimes();

// --- buffers (buffers.cpp) ----------------------------------------------------------------------

/// References a buffer's memory needs until the runtime no longer uses it.
struct KeepAlive {
  PyRef owner;
  PyRef parent;
};

/// hcr.Buffer: a runtime buffer over memory that Python owns (a NumPy array or a DLPack tensor).
struct BufferObj {
  std::shared_ptr<RuntimeHolder> holder;
  AnyBuffer buf;
  hcr::DType dtype = hcr::DType::f32;
  size_t rows = 0, cols = 0, ld = 0;
  int ndim = 2;           ///< of the views handed out: 1 for a vector made from a 1-D array
  bool readonly = false;  ///< wraps memory that must not be written
  py::object owner;       ///< keeps the memory alive
  py::object parent;      ///< a tile's parent Buffer
  bool used = false;      ///< a task, partition or linalg call may have touched it
  bool is_tile = false;
  std::optional<WrapKey> wrap_key;  ///< registered in holder->wraps

  BufferObj() = default;
  BufferObj(const BufferObj&) = delete;
  ~BufferObj();

  hcr::detail::BufferState* state() const;
  void check_writable(const char* what, hcr::Access mode) const;
  std::string describe() const;
};

/// Wraps a NumPy array (no copy) as a buffer of `holder`'s runtime.
py::object wrap_array(const std::shared_ptr<RuntimeHolder>& holder, py::handle array,
                      std::optional<bool> readonly);
/// Wraps memory at `data` owned by `owner` (a DLPack tensor's owner).
py::object wrap_memory(const std::shared_ptr<RuntimeHolder>& holder, void* data, hcr::DType dtype,
                       size_t rows, size_t cols, size_t ld, int ndim, py::object owner);
BufferObj& as_buffer(py::handle o);
/// A NumPy view of host memory (no copy); `base` keeps the memory alive.
py::array make_view(hcr::DType dtype, void* data, size_t rows, size_t cols, size_t ld, int ndim,
                    bool writeable, py::handle base);
void register_buffers(py::module_& m);
void register_dlpack(py::module_& m);

// --- events, kernels, tasks (tasks.cpp, params.cpp) ---------------------------------------------

/// Completion of the host copy of an output (hcr.linalg on NumPy arrays): an asynchronous access
/// that is granted once the writers are done and the data is home.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  void open(std::exception_ptr e);
  void wait();
};

/// hcr.Event.
struct EventObj {
  hcr::Event ev;
  std::vector<std::shared_ptr<Gate>> gates;
  bool ready() const;
  /// Blocks (lock released) until finished; never throws for the task's own error.
  void wait_done() const;
  /// The task's error or the first gate's.
  std::exception_ptr error() const;
};

/// Starts waiting for `e` on a waiter thread; calls `callback(event)` with the lock held.
void notify_when_done(py::object event, py::object callback);
void stop_waiters();

/// What the module knows of a kernel: whether it has a Python implementation, and the parameter
/// types that implementation declares (submit converts to them).
struct KernelInfo {
  std::string name;
  bool python = false;  ///< has a Python implementation
  std::optional<std::vector<hcr::DType>> params;
};

/// hcr.Kernel.
struct KernelObj {
  std::shared_ptr<RuntimeHolder> holder;
  hcr::Kernel kernel;
  std::shared_ptr<KernelInfo> info;
};

/// hcr.Param: bytes of one scalar parameter, with their alignment and (for typed ones) type.
struct ParamObj {
  std::string bytes;
  size_t align = 1;
  std::optional<hcr::DType> dtype;
};

/// Appends parameter `index` to `task`: converted to `declared` when given (a Python kernel's
/// declaration), else as inferred (float -> f64, int -> i64, NumPy scalars keep their type).
void add_param(hcr::Task& task, py::handle value, const std::optional<hcr::DType>& declared,
               size_t index, const std::string& kernel);
void register_params(py::module_& m);
void register_tasks(py::module_& m);
void register_runtime(py::module_& m);
void register_linalg(py::module_& m);

/// Runtime.submit: a Task, or a kernel with its arguments by keyword.
py::object submit_call(const std::shared_ptr<RuntimeHolder>& holder, py::handle what,
                       py::handle reads, py::handle writes, py::handle read_writes,
                       py::handle params, py::handle priority, py::handle after, py::handle on,
                       py::handle grid, py::handle block, py::handle commutes, py::handle scratch,
                       py::handle reduces);
/// Runtime.from_dlpack.
py::object runtime_from_dlpack(const std::shared_ptr<RuntimeHolder>& holder, py::object obj);

/// hcr.Event from a C++ event.
py::object make_event(hcr::Event ev, std::vector<std::shared_ptr<Gate>> gates = {});

// --- recorded graphs (graphs.cpp) ---------------------------------------------------------------

/// Runtime.begin_recording, end_recording (an hcr.Graph).
void begin_recording(const std::shared_ptr<RuntimeHolder>& holder);
py::object end_recording(const std::shared_ptr<RuntimeHolder>& holder);
/// After a submit (a task, an hcr.linalg call): while `holder`'s runtime records, its Buffer
/// objects are kept for the graph.
void note_recorded(RuntimeHolder& holder, const std::vector<py::object>& buffers);
void register_graphs(py::module_& m);

}  // namespace hcrpy
