// hcr.linalg: the tiled algorithms of hcr::linalg on NumPy arrays (wrapped without copying) or hcr
// buffers. Each returns an Event at once; for an output given as an array, the Event also waits
// until the result is in the array (on a device with its own memory, the copy home).
#include "binding.hpp"

#include <hcr/linalg.hpp>

#include <deque>

namespace hcrpy {

std::shared_ptr<RuntimeHolder> holder_of(py::handle rt);

namespace {

namespace la = hcr::linalg;

struct Operand {
  py::object obj;  // the hcr.Buffer (made here for an array)
  BufferObj* buf = nullptr;
  bool from_array = false;
  py::object array;
};

class Call {
 public:
  Call(const char* fn, py::handle rt) : fn_(fn), holder_(holder_of(rt)) {}

  /// `column`: a 1-d array is an n x 1 matrix (a right-hand side), not a 1 x n row.
  Operand& add(py::handle o, const char* name, bool output, bool column = false) {
    Operand op;
    if (py::isinstance<BufferObj>(o)) {
      op.obj = py::reinterpret_borrow<py::object>(o);
      op.buf = &as_buffer(o);
      if (output) op.buf->check_writable((fn_ + ": " + name).c_str(), hcr::Access::read_write);
    } else if (py::isinstance<py::array>(o)) {
      if (output && !py::reinterpret_borrow<py::array>(o).writeable())
        throw_invalid(fn_ + ": " + name + " is a read-only array (flags.writeable is False)");
      py::handle view = o;
      py::object column_view;
      if (column && py::reinterpret_borrow<py::array>(o).ndim() == 1) {
        column_view = o.attr("reshape")(-1, 1);
        view = column_view;
      }
      try {
        op.obj = wrap_array(holder_, view, output ? std::optional<bool>(false) : std::nullopt);
      } catch (const hcr::Error& e) {
        std::string msg = e.what();
        if (msg.rfind("wrap: ", 0) == 0) msg = msg.substr(6);
        throw hcr::Error(e.code(), fn_ + ": " + name + ": " + msg);
      }
      op.buf = &as_buffer(op.obj);
      op.from_array = true;
      op.array = py::reinterpret_borrow<py::object>(o);
    } else {
      throw_invalid(fn_ + ": " + name + " must be a NumPy array or an hcr.Buffer, not " +
                    py::cast<std::string>(py::type::handle_of(o).attr("__name__")));
    }
    if (output) check_overlap(op, name);
    ops_.emplace_back(name, op);
    if (output) outputs_.push_back(op);
    return ops_.back().second;
  }

  /// The element type all operands share (f32 or f64).
  hcr::DType dtype() const {
    hcr::DType t = ops_.front().second.buf->dtype;
    for (auto& [n, op] : ops_)
      if (op.buf->dtype != t)
        throw_invalid(fn_ + ": " + ops_.front().first + " is " + std::string(hcr::dtype_name(t)) +
                      ", " + n + " is " + std::string(hcr::dtype_name(op.buf->dtype)) +
                      ": the operands must share one dtype (float32 or float64)");
    if (t != hcr::DType::f32 && t != hcr::DType::f64)
      throw_invalid(fn_ + ": " + std::string(hcr::dtype_name(t)) +
                    " operands: hcr.linalg works on float32 and float64");
    return t;
  }

  hcr::Runtime& runtime() {
    rt_ = holder_->get();
    return *rt_;
  }

  /// Runs `submit` (which calls hcr::linalg) without the interpreter lock; returns the Event.
  template <class F>
  py::object run(F&& submit) {
    for (auto& [n, op] : ops_) op.buf->used = true;
    hcr::Event ev;
    {
      py::gil_scoped_release unlocked;
      ev = submit();
    }
    if (holder_->recording) {  // the graph keeps the operands' memory
      std::vector<py::object> objs;
      for (auto& [n, op] : ops_) objs.push_back(op.obj);
      note_recorded(*holder_, objs);
    }
    std::vector<std::shared_ptr<Gate>> gates;
    for (auto& op : outputs_)
      if (op.from_array) gates.push_back(home_gate(*op.buf));
    return make_event(std::move(ev), std::move(gates));
  }

 private:
  void check_overlap(const Operand& out, const char* name) {
    if (!out.from_array) return;
    py::object may_share = py::module_::import("numpy").attr("may_share_memory");
    for (auto& [n, op] : ops_)
      if (op.from_array && py::cast<bool>(may_share(out.array, op.array)))
        throw_invalid(fn_ + ": " + name + " shares memory with " + n +
                      ": the output must not alias an input");
  }

  static std::shared_ptr<Gate> home_gate(BufferObj& b) {
    auto g = std::make_shared<Gate>();
    std::visit(
        [&](auto& buf) {
          buf.acquire_async(hcr::Access::read, [g](auto access) {
            std::exception_ptr e = access.error();
            access.release();
            g->open(std::move(e));
          });
        },
        b.buf);
    return g;
  }

  std::string fn_;
  std::shared_ptr<RuntimeHolder> holder_;
  std::shared_ptr<hcr::Runtime> rt_;
  std::deque<std::pair<std::string, Operand>> ops_;  // add() hands out references
  std::vector<Operand> outputs_;
};

template <class T>
const hcr::Buffer<T>& typed(const Operand& op) {
  return std::get<hcr::Buffer<T>>(op.buf->buf);
}

la::Uplo uplo_of(const std::string& u) {
  if (u == "lower" || u == "L") return la::Uplo::lower;
  if (u == "upper" || u == "U") return la::Uplo::upper;
  throw_invalid("uplo '" + u + "': use 'lower' or 'upper'");
}

la::Op op_of(bool trans) { return trans ? la::Op::trans : la::Op::no_trans; }

size_t tile_of(long long tile, const char* fn) {
  if (tile <= 0) throw_invalid(std::string(fn) + ": tile " + std::to_string(tile) + " must be > 0");
  return static_cast<size_t>(tile);
}

}  // namespace

void register_linalg(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "linalg",
      "Tiled dense linear algebra (hcr::linalg) on NumPy arrays or hcr buffers, row-major. Each "
      "call returns an Event at once; calls chain through the tiles' dependencies.");

  m.def(
      "gemm",
      [](py::handle rt, py::handle a, py::handle b, py::handle c, double alpha, double beta,
         bool trans_a, bool trans_b, long long tile) {
        Call call("linalg.gemm", rt);
        auto& A = call.add(a, "A", false);
        auto& B = call.add(b, "B", false);
        auto& C = call.add(c, "C", true);
        const size_t t = tile_of(tile, "linalg.gemm");
        hcr::Runtime& r = call.runtime();
        return visit_dtype(call.dtype(), [&](auto tag) -> py::object {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            return call.run([&] {
              return la::gemm<T>(r, op_of(trans_a), op_of(trans_b), static_cast<T>(alpha),
                                 typed<T>(A), typed<T>(B), static_cast<T>(beta), typed<T>(C), t);
            });
          } else {
            return py::none();
          }
        });
      },
      py::arg("runtime"), py::arg("a"), py::arg("b"), py::arg("c"), py::kw_only(),
      py::arg("alpha") = 1.0, py::arg("beta") = 0.0, py::arg("trans_a") = false,
      py::arg("trans_b") = false, py::arg("tile") = 512,
      "C = alpha op(A) op(B) + beta C, one task per C tile and k step. With beta == 0, C's old "
      "contents are not read.");

  m.def(
      "syrk",
      [](py::handle rt, py::handle a, py::handle c, const std::string& uplo, bool trans,
         double alpha, double beta, long long tile) {
        Call call("linalg.syrk", rt);
        auto& A = call.add(a, "A", false);
        auto& C = call.add(c, "C", true);
        const size_t t = tile_of(tile, "linalg.syrk");
        hcr::Runtime& r = call.runtime();
        const la::Uplo u = uplo_of(uplo);
        return visit_dtype(call.dtype(), [&](auto tag) -> py::object {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            return call.run([&] {
              return la::syrk<T>(r, u, op_of(trans), static_cast<T>(alpha), typed<T>(A),
                                 static_cast<T>(beta), typed<T>(C), t);
            });
          } else {
            return py::none();
          }
        });
      },
      py::arg("runtime"), py::arg("a"), py::arg("c"), py::kw_only(), py::arg("uplo") = "lower",
      py::arg("trans") = false, py::arg("alpha") = 1.0, py::arg("beta") = 0.0,
      py::arg("tile") = 512,
      "C = alpha op(A) op(A)^T + beta C on the `uplo` triangle of C (the other is untouched).");

  m.def(
      "trsm",
      [](py::handle rt, py::handle a, py::handle b, const std::string& side,
         const std::string& uplo, bool trans, bool unit_diag, double alpha, long long tile) {
        Call call("linalg.trsm", rt);
        auto& A = call.add(a, "A", false);
        auto& B = call.add(b, "B", true, true);
        const size_t t = tile_of(tile, "linalg.trsm");
        la::Side s;
        if (side == "left") s = la::Side::left;
        else if (side == "right") s = la::Side::right;
        else throw_invalid("linalg.trsm: side '" + side + "': use 'left' or 'right'");
        const la::Uplo u = uplo_of(uplo);
        hcr::Runtime& r = call.runtime();
        return visit_dtype(call.dtype(), [&](auto tag) -> py::object {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            return call.run([&] {
              return la::trsm<T>(r, s, u, op_of(trans),
                                 unit_diag ? la::Diag::unit : la::Diag::non_unit,
                                 static_cast<T>(alpha), typed<T>(A), typed<T>(B), t);
            });
          } else {
            return py::none();
          }
        });
      },
      py::arg("runtime"), py::arg("a"), py::arg("b"), py::kw_only(), py::arg("side") = "left",
      py::arg("uplo") = "lower", py::arg("trans") = false, py::arg("unit_diag") = false,
      py::arg("alpha") = 1.0, py::arg("tile") = 512,
      "Solves op(A) X = alpha B (side 'left') or X op(A) = alpha B ('right'); X overwrites B.");

  m.def(
      "potrf",
      [](py::handle rt, py::handle a, const std::string& uplo, long long tile) {
        Call call("linalg.potrf", rt);
        auto& A = call.add(a, "A", true);
        const size_t t = tile_of(tile, "linalg.potrf");
        const la::Uplo u = uplo_of(uplo);
        hcr::Runtime& r = call.runtime();
        return visit_dtype(call.dtype(), [&](auto tag) -> py::object {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            return call.run([&] { return la::potrf<T>(r, u, typed<T>(A), t); });
          } else {
            return py::none();
          }
        });
      },
      py::arg("runtime"), py::arg("a"), py::kw_only(), py::arg("uplo") = "lower",
      py::arg("tile") = 256,
      "Cholesky factorisation in place: A = L L^T (lower) or U^T U (upper) in that triangle; the "
      "other is left as it was. A matrix that is not positive definite fails the Event.");

  m.def(
      "potrs",
      [](py::handle rt, py::handle a, py::handle b, const std::string& uplo, long long tile) {
        Call call("linalg.potrs", rt);
        auto& A = call.add(a, "A", false);
        auto& B = call.add(b, "B", true, true);
        const size_t t = tile_of(tile, "linalg.potrs");
        const la::Uplo u = uplo_of(uplo);
        hcr::Runtime& r = call.runtime();
        return visit_dtype(call.dtype(), [&](auto tag) -> py::object {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            return call.run([&] { return la::potrs<T>(r, u, typed<T>(A), typed<T>(B), t); });
          } else {
            return py::none();
          }
        });
      },
      py::arg("runtime"), py::arg("a"), py::arg("b"), py::kw_only(), py::arg("uplo") = "lower",
      py::arg("tile") = 256,
      "Solves A X = B from the factor potrf left in A; X overwrites B (n x r, or a vector).");

  m.def(
      "getrf_nopiv",
      [](py::handle rt, py::handle a, long long tile) {
        Call call("linalg.getrf_nopiv", rt);
        auto& A = call.add(a, "A", true);
        const size_t t = tile_of(tile, "linalg.getrf_nopiv");
        hcr::Runtime& r = call.runtime();
        return visit_dtype(call.dtype(), [&](auto tag) -> py::object {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            return call.run([&] { return la::getrf_nopiv<T>(r, typed<T>(A), t); });
          } else {
            return py::none();
          }
        });
      },
      py::arg("runtime"), py::arg("a"), py::kw_only(), py::arg("tile") = 256,
      "LU factorisation without pivoting, in place (L unit lower, U upper).");
}

}  // namespace hcrpy
