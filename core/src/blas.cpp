// Tiled gemm: one task per C tile and k step, on tiles (sub-buffers) of A, B and C. The tiled
// algorithms are hcr::linalg's (linalg/, which core never depends on); this product without
// transposes stays in libhcr for the programs that link it alone. It partitions its operands as
// they do (<hcr/detail/operands.hpp>, which hcr::linalg includes: core never depends on linalg).
#include "buffer_state.hpp"

#include <hcr/blas.hpp>
#include <hcr/detail/operands.hpp>

#include <string>

namespace hcr::blas {

namespace {
using detail::shape;

// What would stop partitioning an operand, found before any is partitioned: a failure half way
// would leave the others partitioned, unusable.
void check_operand(Runtime& rt, detail::BufferState& s, const char* name) {
  if (s.rt.get() != &rt.core())
    throw Error(ErrorCode::invalid_argument, std::string("gemm: ") + name + " (a " + describe(s) +
                                                 ") belongs to another runtime");
  if (s.detached.load(std::memory_order_acquire))
    throw Error(ErrorCode::invalid_argument,
                std::string("gemm: ") + name + " (a " + describe(s) +
                    ") no longer exists: the buffer was unpartitioned");
  s.lock.lock();
  const bool partitioned = s.partitioned;
  s.lock.unlock();
  if (partitioned)
    throw Error(ErrorCode::invalid_argument, std::string("gemm: ") + name + " (a " + describe(s) +
                                                 ") is partitioned: unpartition it first");
}
}  // namespace

template <class T>
Event gemm(Runtime& rt, const Buffer<T>& a, const Buffer<T>& b, const Buffer<T>& c, size_t tile,
           T alpha, T beta) {
  for (auto [x, name] : {std::pair{&a, "A"}, std::pair{&b, "B"}, std::pair{&c, "C"}})
    if (!x->valid())
      throw Error(ErrorCode::invalid_argument,
                  std::string("gemm: ") + name + " is an empty Buffer handle");
  const size_t m = a.rows(), k = a.cols(), n = b.cols();
  if (b.rows() != k || c.rows() != m || c.cols() != n)
    throw Error(ErrorCode::invalid_argument,
                "gemm: shapes do not match: A is " + shape(a.rows(), a.cols()) + ", B is " +
                    shape(b.rows(), b.cols()) + ", C is " + shape(c.rows(), c.cols()) +
                    " (need A m x k, B k x n, C m x n)");
  if (tile == 0) throw Error(ErrorCode::invalid_argument, "gemm: tile size 0");
  if (c == a || c == b) throw Error(ErrorCode::invalid_argument, "gemm: C must not alias A or B");
  check_operand(rt, *a.state(), "A");
  check_operand(rt, *b.state(), "B");
  check_operand(rt, *c.state(), "C");

  Kernel kernel = rt.kernel(gemm_kernel_name<T>());
  // B the same buffer as A is partitioned once; a failure joins what was partitioned.
  detail::Operands<T> ops("gemm");
  const size_t ia = ops.add(a, "A"), ib = ops.add(b, "B"), ic = ops.add(c, "C");
  ops.partition(tile, kernel);
  const Tiles<T>& ta = ops.tiles(ia);
  const Tiles<T>& tb = ops.tiles(ib);
  const Tiles<T>& tc = ops.tiles(ic);

  const size_t kt = ta.cols();
  for (size_t i = 0; i < tc.rows(); ++i)
    for (size_t j = 0; j < tc.cols(); ++j)
      for (size_t kk = 0; kk < kt; ++kk) {
        hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, static_cast<double>(alpha),
                            kk == 0 ? static_cast<double>(beta) : 1.0};
        // With beta = 0 the first step only writes C: nothing of C needs copying in.
        Access c_access = (kk == 0 && beta == T(0)) ? Access::write : Access::read_write;
        rt.submit(Task(kernel).read(ta(i, kk)).read(tb(kk, j)).arg(tc(i, j), c_access).param(p));
      }
  return ops.join(ic);
}

template HCR_API Event gemm<float>(Runtime&, const Buffer<float>&, const Buffer<float>&,
                                   const Buffer<float>&, size_t, float, float);
template HCR_API Event gemm<double>(Runtime&, const Buffer<double>&, const Buffer<double>&,
                                    const Buffer<double>&, size_t, double, double);

}  // namespace hcr::blas
