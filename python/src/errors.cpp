// hcr::Error as Python exceptions: hcr.Error (a RuntimeError) with .code, one subclass per code,
// those of misuse also subclasses of the matching built-in (InvalidArgumentError is a ValueError).
// The message is the C++ one, unchanged.
#include "binding.hpp"

namespace hcrpy {

namespace {

struct CodeClass {
  hcr::ErrorCode code;
  const char* member;  // the ErrorCode enum's name: the C++ enumerator's
  const char* name;
  PyObject* builtin;  // a second base, or null
  const char* doc;
};

// Filled at module init (the built-in exception objects are not constants).
std::vector<CodeClass> code_classes() {
  using C = hcr::ErrorCode;
  return {
      {C::unknown, "unknown", "UnknownError", nullptr, "An error the runtime could not classify."},
      {C::invalid_argument, "invalid_argument", "InvalidArgumentError", PyExc_ValueError,
       "Misuse: a value, shape, mode or call that is not allowed (also a ValueError)."},
      {C::not_found, "not_found", "NotFoundError", PyExc_LookupError,
       "Something named does not exist (also a LookupError)."},
      {C::unsupported, "unsupported", "UnsupportedError", PyExc_NotImplementedError,
       "An operation hcr does not offer here (also a NotImplementedError)."},
      {C::out_of_memory, "out_of_memory", "OutOfMemoryError", PyExc_MemoryError,
       "A device or the host ran out of memory (also a MemoryError)."},
      {C::device_lost, "device_lost", "DeviceLostError", nullptr, "A device went away."},
      {C::backend, "backend", "BackendError", nullptr, "A backend's native API failed."},
      {C::internal, "internal", "InternalError", nullptr, "A bug in hcr."},
      {C::timeout, "timeout", "TimeoutError", PyExc_TimeoutError,
       "A launch took longer than [runtime] task_timeout (also the built-in TimeoutError)."},
      {C::kernel, "kernel", "KernelError", nullptr, "A kernel failed."},
      {C::config, "config", "ConfigError", PyExc_ValueError,
       "A configuration file or value is wrong (also a ValueError)."},
      {C::plugin, "plugin", "PluginError", nullptr, "A plugin could not be used."},
      {C::dependency, "dependency", "DependencyError", nullptr,
       "A task this one depends on failed."},
      {C::shutdown, "shutdown", "ShutdownError", nullptr, "The runtime has been closed."},
      {C::no_device, "no_device", "NoDeviceError", nullptr, "No device can run the task."},
      {C::communication, "communication", "CommunicationError", nullptr,
       "A message between processes failed or never came."},
  };
}

PyObject* g_base = nullptr;                        // hcr.Error
std::vector<std::pair<int, PyObject*>> g_by_code;  // code -> class
PyObject* g_code_enum = nullptr;                   // hcr.ErrorCode

PyObject* class_for(hcr::ErrorCode c) {
  for (auto& [code, cls] : g_by_code)
    if (code == static_cast<int>(c)) return cls;
  return g_base;
}

py::object make_error(const hcr::Error& e) {
  py::handle cls = class_for(e.code());
  py::object exc = py::reinterpret_borrow<py::object>(cls)(py::str(e.what()));
  py::object code = py::reinterpret_borrow<py::object>(g_code_enum)(static_cast<int>(e.code()));
  exc.attr("code") = code;
  return exc;
}

}  // namespace

void throw_invalid(const std::string& message) {
  throw hcr::Error(hcr::ErrorCode::invalid_argument, message);
}

void raise_exception_ptr(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const PythonKernelError& k) {
    py::handle exc = k.exception();
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (const hcr::Error& err) {
    py::object exc = make_error(err);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& err) {
    err.restore();
  } catch (const py::builtin_exception& err) {
    err.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "out of memory");
  } catch (const std::exception& err) {
    PyErr_SetString(PyExc_RuntimeError, err.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

py::object exception_object(std::exception_ptr e) {
  if (!e) return py::none();
  raise_exception_ptr(e);
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return py::reinterpret_steal<py::object>(value);
}

void register_errors(py::module_& m) {
  py::enum_<hcr::ErrorCode> code(m, "ErrorCode", py::arithmetic(),
                                 "What went wrong: hcr::ErrorCode (Error.code).");
  for (const auto& c : code_classes()) code.value(c.member, c.code);
  g_code_enum = code.ptr();
  Py_INCREF(g_code_enum);

  g_base = PyErr_NewExceptionWithDoc(
      "hcr.Error",
      "The error of every hcr misuse and failed task: hcr::Error's message, and its code in .code "
      "(an ErrorCode). Subclasses name the codes.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(g_base);
  for (const auto& c : code_classes()) {
    py::tuple bases = c.builtin ? py::make_tuple(py::handle(g_base), py::handle(c.builtin))
                                : py::make_tuple(py::handle(g_base));
    std::string qual = std::string("hcr.") + c.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), c.doc, bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    g_by_code.emplace_back(static_cast<int>(c.code), cls);
    m.attr(c.name) = py::handle(cls);
  }

  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const PythonKernelError&) {
      raise_exception_ptr(p);
    } catch (const hcr::Error&) {
      raise_exception_ptr(p);
    }
    // Anything else: rethrown to pybind11's own translators.
  });
}

}  // namespace hcrpy
