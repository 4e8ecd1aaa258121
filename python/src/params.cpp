// Scalar parameters from Python: explicit types (hcr.f32(2.0), hcr.Param(bytes)), inferred ones
// (float -> f64, int -> i64, a NumPy scalar keeps its dtype), the declared types of a Python
// kernel, and the parameter blocks of the plugins' built-in kernels (hcr.gemm_params, ...).
#include "binding.hpp"

#include <climits>
#include <cmath>
#include <cstring>

namespace hcrpy {

namespace {

std::string repr_of(py::handle v) { return py::cast<std::string>(py::repr(v)); }

std::string where(size_t index, const std::string& kernel) {
  return "kernel '" + kernel + "', param " + std::to_string(index);
}

template <class T>
ParamObj typed(T v, hcr::DType t) {
  ParamObj p;
  p.bytes.assign(reinterpret_cast<const char*>(&v), sizeof(T));
  p.align = alignof(T);
  p.dtype = t;
  return p;
}

int64_t to_int(py::handle v, const std::string& what) {
  if (PyFloat_Check(v.ptr()))
    throw_invalid(what + ": " + repr_of(v) + " is a float where an integer type is declared");
  PyObject* idx = PyNumber_Index(v.ptr());
  if (idx == nullptr) {
    PyErr_Clear();
    throw_invalid(what + ": " + repr_of(v) + " is not an integer");
  }
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
  Py_DECREF(idx);
  if (overflow != 0) throw_invalid(what + ": " + repr_of(v) + " does not fit in 64 bits");
  return x;
}

double to_float(py::handle v, const std::string& what) {
  double x = PyFloat_AsDouble(v.ptr());
  if (x == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw_invalid(what + ": " + repr_of(v) + " is not a number");
  }
  return x;
}

/// `v` as a parameter of type `t`, checking the range.
ParamObj convert(py::handle v, hcr::DType t, const std::string& what) {
  switch (t) {
    case hcr::DType::f32: {
      double x = to_float(v, what);
      if (std::isfinite(x) && std::fabs(x) > 3.4028234663852886e38)
        throw_invalid(what + ": " + repr_of(v) + " is out of range for f32");
      return typed(static_cast<float>(x), t);
    }
    case hcr::DType::f64: return typed(to_float(v, what), t);
    case hcr::DType::i32: {
      int64_t x = to_int(v, what);
      if (x < INT32_MIN || x > INT32_MAX)
        throw_invalid(what + ": " + repr_of(v) + " is out of range for i32");
      return typed(static_cast<int32_t>(x), t);
    }
    case hcr::DType::i64: return typed(to_int(v, what), t);
    case hcr::DType::u8: {
      int64_t x = to_int(v, what);
      if (x < 0 || x > 255) throw_invalid(what + ": " + repr_of(v) + " is out of range for u8");
      return typed(static_cast<uint8_t>(x), t);
    }
    default:
      throw_invalid(what + ": parameters of type " + std::string(hcr::dtype_name(t)) +
                    " are not supported (f32, f64, i32, i64, u8)");
  }
}

/// A parameter from a value without a declared type.
ParamObj infer(py::handle v, const std::string& what) {
  if (py::isinstance<ParamObj>(v)) return py::cast<ParamObj>(v);
  if (PyBool_Check(v.ptr()))
    throw_invalid(what + ": " + repr_of(v) + " is a bool: say which type, e.g. hcr.i32(" +
                  repr_of(v) + ") or hcr.u8(" + repr_of(v) + ")");
  if (PyFloat_CheckExact(v.ptr())) return typed(PyFloat_AS_DOUBLE(v.ptr()), hcr::DType::f64);
  if (PyLong_CheckExact(v.ptr())) return convert(v, hcr::DType::i64, what);
  if (py::isinstance<py::bytes>(v) || PyByteArray_Check(v.ptr())) {
    ParamObj p;
    p.bytes = py::cast<std::string>(py::bytes(py::reinterpret_borrow<py::object>(v)));
    p.align = 8;
    return p;
  }
  // A NumPy scalar keeps its dtype (numpy.float32(2) is an f32).
  if (py::hasattr(v, "dtype") && !py::isinstance<py::array>(v)) {
    py::dtype dt = py::reinterpret_borrow<py::object>(v.attr("dtype"));
    hcr::DType t;
    try {
      t = dtype_from_numpy(dt, what.c_str());
    } catch (const hcr::Error&) {
      throw_invalid(what + ": " + repr_of(v) + " of dtype " + text(dt) +
                    " is not a supported parameter type (f32, f64, i32, i64, u8)");
    }
    return convert(v, t, what);
  }
  if (PyFloat_Check(v.ptr())) return typed(to_float(v, what), hcr::DType::f64);
  if (PyLong_Check(v.ptr())) return convert(v, hcr::DType::i64, what);
  throw_invalid(what + ": cannot pass " + repr_of(v) + " (" +
                py::cast<std::string>(py::type::handle_of(v).attr("__name__")) +
                ") as a parameter: use a number, a NumPy scalar, bytes or hcr.Param");
}

ParamObj make_struct(const void* data, size_t size) {
  ParamObj p;
  p.bytes.assign(static_cast<const char*>(data), size);
  p.align = 8;
  return p;
}

int32_t uplo_value(const std::string& u) {
  if (u == "lower" || u == "L") return HCR_LOWER;
  if (u == "upper" || u == "U") return HCR_UPPER;
  throw_invalid("uplo '" + u + "': use 'lower' or 'upper'");
}

}  // namespace

void add_param(hcr::Task& task, py::handle value, const std::optional<hcr::DType>& declared,
               size_t index, const std::string& kernel) {
  const std::string what = where(index, kernel);
  ParamObj p;
  if (declared) {
    if (py::isinstance<ParamObj>(value)) {
      p = py::cast<ParamObj>(value);
      if (p.dtype != declared)
        throw_invalid(what + ": " + repr_of(value) + " where the kernel declares " +
                      std::string(hcr::dtype_name(*declared)));
    } else {
      p = convert(value, *declared, what);
    }
  } else {
    p = infer(value, what);
  }
  task.param_bytes(p.bytes.data(), p.bytes.size(), p.align);
}

void register_params(py::module_& m) {
  py::class_<ParamObj>(m, "Param",
                       R"doc(One scalar parameter of a task: its bytes, their alignment, and its
type for the typed ones (hcr.f32(2.0), ...). Param(data, align=8) passes raw bytes, e.g. a
parameter block of your own kernel.)doc")
      .def(py::init([](py::bytes data, size_t align) {
             if (align == 0 || (align & (align - 1)) != 0 || align > 64)
               throw_invalid("Param: align " + std::to_string(align) +
                             " is not a power of two up to 64");
             ParamObj p;
             p.bytes = data;
             p.align = align;
             return p;
           }),
           py::arg("data"), py::arg("align") = 8)
      .def_property_readonly("data", [](const ParamObj& p) { return py::bytes(p.bytes); })
      .def_property_readonly("align", [](const ParamObj& p) { return p.align; })
      .def_property_readonly("dtype",
                             [](const ParamObj& p) -> py::object {
                               if (!p.dtype) return py::none();
                               return py::str(std::string(hcr::dtype_name(*p.dtype)));
                             })
      .def("__repr__", [](const ParamObj& p) {
        if (p.dtype) return "hcr.Param(" + std::string(hcr::dtype_name(*p.dtype)) + ")";
        return "hcr.Param(" + std::to_string(p.bytes.size()) + " bytes)";
      });

  const std::pair<const char*, hcr::DType> scalars[] = {{"f32", hcr::DType::f32},
                                                        {"f64", hcr::DType::f64},
                                                        {"i32", hcr::DType::i32},
                                                        {"i64", hcr::DType::i64},
                                                        {"u8", hcr::DType::u8}};
  for (auto [name, t] : scalars) {
    std::string doc = std::string("A parameter of type ") + name + " (range-checked).";
    m.def(
        name, [t = t, name = std::string(name)](py::handle v) { return convert(v, t, name); },
        py::arg("value"), doc.c_str());
  }

  m.def(
      "gemm_params",
      [](double alpha, double beta, bool trans_a, bool trans_b) {
        hcr_gemm_params_t p{};
        p.struct_size = HCR_GEMM_PARAMS_STRUCT_SIZE;
        p.alpha = alpha;
        p.beta = beta;
        p.trans_a = trans_a ? HCR_TRANS : HCR_NO_TRANS;
        p.trans_b = trans_b ? HCR_TRANS : HCR_NO_TRANS;
        return make_struct(&p, sizeof p);
      },
      py::arg("alpha") = 1.0, py::arg("beta") = 0.0, py::arg("trans_a") = false,
      py::arg("trans_b") = false,
      "The parameter block of the built-in gemm_<t> kernels (hcr_gemm_params_t): C = alpha "
      "op(A) op(B) + beta C, buffers A (read), B (read), C (read_write).");
  m.def(
      "syrk_params",
      [](double alpha, double beta, const std::string& uplo, bool trans) {
        hcr_syrk_params_t p{};
        p.struct_size = HCR_SYRK_PARAMS_STRUCT_SIZE;
        p.alpha = alpha;
        p.beta = beta;
        p.uplo = uplo_value(uplo);
        p.trans = trans ? HCR_TRANS : HCR_NO_TRANS;
        return make_struct(&p, sizeof p);
      },
      py::arg("alpha") = 1.0, py::arg("beta") = 0.0, py::arg("uplo") = "lower",
      py::arg("trans") = false, "The parameter block of syrk_<t> (hcr_syrk_params_t).");
  m.def(
      "trsm_params",
      [](double alpha, const std::string& side, const std::string& uplo, bool trans,
         bool unit_diag) {
        hcr_trsm_params_t p{};
        p.struct_size = HCR_TRSM_PARAMS_STRUCT_SIZE;
        p.alpha = alpha;
        if (side == "left") p.side = HCR_LEFT;
        else if (side == "right") p.side = HCR_RIGHT;
        else throw_invalid("side '" + side + "': use 'left' or 'right'");
        p.uplo = uplo_value(uplo);
        p.trans = trans ? HCR_TRANS : HCR_NO_TRANS;
        p.diag = unit_diag ? HCR_UNIT : HCR_NON_UNIT;
        return make_struct(&p, sizeof p);
      },
      py::arg("alpha") = 1.0, py::arg("side") = "left", py::arg("uplo") = "lower",
      py::arg("trans") = false, py::arg("unit_diag") = false,
      "The parameter block of trsm_<t> (hcr_trsm_params_t).");
  m.def(
      "potrf_params",
      [](const std::string& uplo) {
        hcr_potrf_params_t p{};
        p.struct_size = HCR_POTRF_PARAMS_STRUCT_SIZE;
        p.uplo = uplo_value(uplo);
        return make_struct(&p, sizeof p);
      },
      py::arg("uplo") = "lower", "The parameter block of potrf_<t> (hcr_potrf_params_t).");
}

}  // namespace hcrpy
