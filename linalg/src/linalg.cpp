// The entry points of hcr::linalg: check the arguments (naming the values), partition the
// operands, submit the tile tasks (tile_tasks.hpp), join the operands again.
#include <hcr/linalg.hpp>
#include <hcr/linalg/detail/tile_tasks.hpp>

#include <string>

namespace hcr::linalg {

namespace {

using detail::Operands;
using detail::shape;
using detail::TileTasks;

// An enumeration cast from an integer the API does not know.
template <class T, class E>
void check_enum(const Operands<T>& ops, E value, const char* what, const char* first,
                const char* second) {
  const auto v = static_cast<int32_t>(value);
  if (v != 0 && v != 1)
    ops.fail(std::string(what) + " = " + std::to_string(v) + " is not " + first + " or " + second);
}
template <class T>
void check(const Operands<T>& ops, Op v, const char* what) {
  check_enum(ops, v, what, "Op::no_trans", "Op::trans");
}
template <class T>
void check(const Operands<T>& ops, Uplo v) {
  check_enum(ops, v, "uplo", "Uplo::lower", "Uplo::upper");
}

// "A is 3x4", or "A^T is 4x3" under Op::trans.
template <class T>
std::string op_shape(const Buffer<T>& b, Op op, const char* name) {
  return op == Op::no_trans ? std::string(name) + " is " + shape(b)
                            : std::string(name) + "^T is " + shape(b.cols(), b.rows());
}

template <class T>
void require_square(const Operands<T>& ops, const Buffer<T>& a, const char* name) {
  if (a.rows() != a.cols()) ops.fail(std::string(name) + " is " + shape(a) + ": it must be square");
}

}  // namespace

template <Real T>
Event gemm(Runtime& rt, Op trans_a, Op trans_b, Scalar<T> alpha, const Buffer<T>& a,
           const Buffer<T>& b, Scalar<T> beta, const Buffer<T>& c, size_t tile) {
  Operands<T> ops("linalg::gemm");
  const size_t ia = ops.add(a, "A"), ib = ops.add(b, "B"), ic = ops.add(c, "C");
  check(ops, trans_a, "trans_a");
  check(ops, trans_b, "trans_b");
  const bool na = trans_a == Op::no_trans, nb = trans_b == Op::no_trans;
  const size_t m = na ? a.rows() : a.cols(), k = na ? a.cols() : a.rows();
  const size_t kb = nb ? b.rows() : b.cols(), n = nb ? b.cols() : b.rows();
  if (kb != k || c.rows() != m || c.cols() != n)
    ops.fail("shapes do not match: " + op_shape(a, trans_a, "A") + ", " +
             op_shape(b, trans_b, "B") + ", C is " + shape(c) +
             " (need op(A) m x k, op(B) k x n, C m x n)");
  ops.no_alias(ic, ia);
  ops.no_alias(ic, ib);
  TileTasks<T> t(rt);
  ops.partition(tile, t.gemm_kernel());
  detail::gemm_tiles(t, trans_a, trans_b, alpha, ops.tiles(ia), ops.tiles(ib), beta, ops.tiles(ic));
  return ops.join(ic);
}

template <Real T>
Event syrk(Runtime& rt, Uplo uplo, Op trans, Scalar<T> alpha, const Buffer<T>& a, Scalar<T> beta,
           const Buffer<T>& c, size_t tile) {
  Operands<T> ops("linalg::syrk");
  const size_t ia = ops.add(a, "A"), ic = ops.add(c, "C");
  check(ops, uplo);
  check(ops, trans, "trans");
  require_square(ops, c, "C");
  const size_t n = trans == Op::no_trans ? a.rows() : a.cols();
  if (n != c.rows())
    ops.fail("shapes do not match: " + op_shape(a, trans, "A") + ", C is " + shape(c) +
             " (need op(A) n x k, C n x n)");
  ops.no_alias(ic, ia);
  TileTasks<T> t(rt);
  ops.partition(tile, t.syrk_kernel());
  detail::syrk_tiles(t, uplo, trans, alpha, ops.tiles(ia), beta, ops.tiles(ic));
  return ops.join(ic);
}

template <Real T>
Event trsm(Runtime& rt, Side side, Uplo uplo, Op trans, Diag diag, Scalar<T> alpha,
           const Buffer<T>& a, const Buffer<T>& b, size_t tile) {
  Operands<T> ops("linalg::trsm");
  const size_t ia = ops.add(a, "A"), ib = ops.add(b, "B");
  check_enum(ops, side, "side", "Side::left", "Side::right");
  check(ops, uplo);
  check(ops, trans, "trans");
  check_enum(ops, diag, "diag", "Diag::non_unit", "Diag::unit");
  const bool left = side == Side::left;
  const size_t need = left ? b.rows() : b.cols();
  if (a.rows() != need || a.cols() != need)
    ops.fail("shapes do not match: A is " + shape(a) + ", B is " + shape(b) + " (side " +
             (left ? "left: A must be m x m for B m x n" : "right: A must be n x n for B m x n") +
             ")");
  ops.no_alias(ib, ia);
  TileTasks<T> t(rt);
  ops.partition(tile, t.trsm_kernel());
  detail::trsm_tiles(t, side, uplo, trans, diag, alpha, ops.tiles(ia), ops.tiles(ib));
  return ops.join(ib);
}

template <Real T>
Event potrf(Runtime& rt, Uplo uplo, const Buffer<T>& a, size_t tile) {
  Operands<T> ops("linalg::potrf");
  const size_t ia = ops.add(a, "A");
  check(ops, uplo);
  require_square(ops, a, "A");
  TileTasks<T> t(rt);
  ops.partition(tile, t.potrf_kernel());
  detail::potrf_tiles(t, uplo, ops.tiles(ia));
  return ops.join(ia);
}

template <Real T>
Event potrs(Runtime& rt, Uplo uplo, const Buffer<T>& a, const Buffer<T>& b, size_t tile) {
  Operands<T> ops("linalg::potrs");
  const size_t ia = ops.add(a, "A"), ib = ops.add(b, "B");
  check(ops, uplo);
  require_square(ops, a, "A");
  if (b.rows() != a.rows())
    ops.fail("shapes do not match: A is " + shape(a) + ", B is " + shape(b) +
             " (need A n x n, B n x r)");
  ops.no_alias(ib, ia);
  TileTasks<T> t(rt);
  ops.partition(tile, t.trsm_kernel());
  detail::potrs_tiles(t, uplo, ops.tiles(ia), ops.tiles(ib));
  return ops.join(ib);
}

template <Real T>
Event getrf_nopiv(Runtime& rt, const Buffer<T>& a, size_t tile) {
  Operands<T> ops("linalg::getrf_nopiv");
  const size_t ia = ops.add(a, "A");
  require_square(ops, a, "A");
  TileTasks<T> t(rt);
  ops.partition(tile, t.getrf_kernel());
  detail::getrf_tiles(t, ops.tiles(ia));
  return ops.join(ia);
}

#define HCR_LINALG_INSTANTIATE(T)                                                                \
  template HCR_LINALG_API Event gemm<T>(Runtime&, Op, Op, T, const Buffer<T>&, const Buffer<T>&, \
                                        T, const Buffer<T>&, size_t);                            \
  template HCR_LINALG_API Event syrk<T>(Runtime&, Uplo, Op, T, const Buffer<T>&, T,              \
                                        const Buffer<T>&, size_t);                               \
  template HCR_LINALG_API Event trsm<T>(Runtime&, Side, Uplo, Op, Diag, T, const Buffer<T>&,     \
                                        const Buffer<T>&, size_t);                               \
  template HCR_LINALG_API Event potrf<T>(Runtime&, Uplo, const Buffer<T>&, size_t);              \
  template HCR_LINALG_API Event potrs<T>(Runtime&, Uplo, const Buffer<T>&, const Buffer<T>&,     \
                                         size_t);                                                \
  template HCR_LINALG_API Event getrf_nopiv<T>(Runtime&, const Buffer<T>&, size_t);
HCR_LINALG_INSTANTIATE(float)
HCR_LINALG_INSTANTIATE(double)
#undef HCR_LINALG_INSTANTIATE

}  // namespace hcr::linalg
