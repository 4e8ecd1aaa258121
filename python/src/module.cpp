// The extension module hcr._core: element-type conversions shared by the parts, the exit handler,
// and the registration of every class (the parts live in their own files).
#include "binding.hpp"

#include <algorithm>
#include <cctype>

namespace hcrpy {

hcr::DType dtype_from_numpy(const py::dtype& dt, const char* what) {
  const char kind = dt.kind();
  const auto size = static_cast<size_t>(dt.itemsize());
  const char order = py::cast<std::string>(dt.attr("byteorder"))[0];
  if (order ==
      '>') {  // '=' native, '<' little, '|' not applicable; the module runs on little-endian
    throw_invalid(std::string(what) + ": dtype " + text(dt) +
                  " is big-endian: convert it with .astype(dtype.newbyteorder('='))");
  }
  if (kind == 'f' && size == 2) return hcr::DType::f16;
  if (kind == 'f' && size == 4) return hcr::DType::f32;
  if (kind == 'f' && size == 8) return hcr::DType::f64;
  if (kind == 'i' && size == 4) return hcr::DType::i32;
  if (kind == 'i' && size == 8) return hcr::DType::i64;
  if (kind == 'u' && size == 1) return hcr::DType::u8;
  throw_invalid(std::string(what) + ": unsupported dtype " + text(dt) +
                " (hcr buffers hold float16, float32, float64, int32, int64 or uint8)");
}

py::dtype numpy_dtype(hcr::DType t) {
  switch (t) {
    case hcr::DType::f16: return py::dtype("float16");
    case hcr::DType::f32: return py::dtype::of<float>();
    case hcr::DType::f64: return py::dtype::of<double>();
    case hcr::DType::i32: return py::dtype::of<int32_t>();
    case hcr::DType::i64: return py::dtype::of<int64_t>();
    case hcr::DType::u8: return py::dtype::of<uint8_t>();
    default:
      throw hcr::Error(hcr::ErrorCode::unsupported,
                       "element type " + std::string(hcr::dtype_name(t)) +
                           " has no NumPy counterpart in the hcr module");
  }
}

hcr::DType dtype_from_object(py::handle o, const char* what) {
  if (py::isinstance<py::str>(o)) {
    std::string s = py::cast<std::string>(o);
    static const std::pair<const char*, hcr::DType> names[] = {
        {"f16", hcr::DType::f16}, {"f32", hcr::DType::f32}, {"f64", hcr::DType::f64},
        {"i32", hcr::DType::i32}, {"i64", hcr::DType::i64}, {"u8", hcr::DType::u8}};
    for (auto& [n, t] : names)
      if (s == n) return t;
  }
  py::dtype dt;
  try {
    dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(o));
  } catch (py::error_already_set&) {
    throw_invalid(std::string(what) + ": " + py::cast<std::string>(py::repr(o)) +
                  " is not a dtype (use 'f32', 'f64', 'f16', 'i32', 'i64', 'u8' or a NumPy dtype)");
  }
  return dtype_from_numpy(dt, what);
}

hcr::Access access_from_string(const std::string& mode) {
  if (mode == "read" || mode == "r") return hcr::Access::read;
  if (mode == "write" || mode == "w") return hcr::Access::write;
  if (mode == "read_write" || mode == "rw") return hcr::Access::read_write;
  if (mode == "commute") return hcr::Access::commute;
  if (mode == "reduce") return hcr::Access::reduce;
  throw_invalid("access mode '" + mode +
                "': use 'read', 'write', 'read_write', 'commute' or 'reduce'");
}

const char* access_name(hcr::Access a) noexcept {
  switch (a) {
    case hcr::Access::read: return "read";
    case hcr::Access::write: return "write";
    case hcr::Access::commute: return "commute";
    case hcr::Access::reduce: return "reduce";
    default: return "read_write";
  }
}

void clear_writeable(py::handle array) noexcept {
  py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
}

}  // namespace hcrpy

PYBIND11_MODULE(_core, m) {
  using namespace hcrpy;
  m.doc() =
      "The compiled part of the hcr Python module (import hcr, not this): the public C++ API of "
      "hcr, the heterogeneous compute runtime, with NumPy arrays as buffers.";
  register_errors(m);
  register_params(m);
  register_buffers(m);
  register_tasks(m);
  register_runtime(m);
  register_graphs(m);
  register_dlpack(m);
  register_linalg(m);
  m.def(
      "_shutdown",
      [] {
        close_all_runtimes();
        stop_waiters();
        drain_releases();
        set_python_finalizing();
      },
      "Closes every runtime still open and stops the event waiters (the package's atexit "
      "handler).");
  m.def(
      "_drain", [] { drain_releases(); }, "Drops references the runtime's threads let go of.");
}
