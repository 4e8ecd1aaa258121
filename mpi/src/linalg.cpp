// hcr::mpi's tiled linear algebra: hcr::linalg's tile algorithms
// (<hcr/linalg/detail/tile_tasks.hpp>) over a sink that submits to a Cluster. Only the shape checks
// are this file's own: over a Cluster they must run on every rank before anything is submitted,
// since a task the executor's runtime refused would fail on that rank alone.
#include <hcr/error.hpp>
#include <hcr/linalg/detail/tile_tasks.hpp>
#include <hcr/mpi_linalg.hpp>

#include <string>

namespace hcr::mpi {
namespace {

namespace ld = hcr::linalg::detail;

struct ClusterSink {
  using TaskType = mpi::Task;
  Kernel kernel(const std::string& name) { return cluster.runtime().kernel(name); }
  void submit(TaskType& t) { cluster.submit(t); }
  Runtime& runtime() { return cluster.runtime(); }
  Cluster& cluster;
};

template <class T>
std::string tile_shape(const char* name, const Tiles<T>& g, size_t i, size_t j) {
  const Buffer<T> t = g(i, j);
  return std::string(name) + "(" + std::to_string(i) + ", " + std::to_string(j) + ") " +
         ld::shape(t.rows(), t.cols());
}

[[noreturn]] void refuse(const char* fn, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, std::string("hcr::mpi::") + fn + ": " + what);
}

template <class T>
void need_grid(const char* fn, const char* name, const Tiles<T>& g) {
  if (g.rows() == 0 || g.cols() == 0) refuse(fn, std::string(name) + " is not a tile grid");
}

// op(X)'s tile (i, j) and its shape: X's, or X's tile (j, i) transposed.
struct OpShape {
  size_t rows, cols;
};
template <class T>
OpShape op_tile(Op op, const Tiles<T>& g, size_t i, size_t j) {
  const Buffer<T> t = op == Op::no_trans ? g(i, j) : g(j, i);
  return op == Op::no_trans ? OpShape{t.rows(), t.cols()} : OpShape{t.cols(), t.rows()};
}

// C (mt x nt tiles) = op(A) op(B): op(A) mt x kt, op(B) kt x nt, every tile product conforming.
template <class T>
void check_product(const char* fn, Op ta, const Tiles<T>& a, Op tb, const Tiles<T>& b,
                   const Tiles<T>& c, bool lower_only = false) {
  need_grid(fn, "A", a);
  need_grid(fn, "B", b);
  need_grid(fn, "C", c);
  const size_t am = ta == Op::no_trans ? a.rows() : a.cols(),
               ak = ta == Op::no_trans ? a.cols() : a.rows(),
               bk = tb == Op::no_trans ? b.rows() : b.cols(),
               bn = tb == Op::no_trans ? b.cols() : b.rows();
  if (am != c.rows() || bn != c.cols() || ak != bk)
    refuse(fn, "tile grids do not conform: op(A) " + ld::shape(am, ak) + " tiles, op(B) " +
                   ld::shape(bk, bn) + " tiles, C " + ld::shape(c.rows(), c.cols()) + " tiles");
  for (size_t i = 0; i < c.rows(); ++i)
    for (size_t j = 0; j < (lower_only ? i + 1 : c.cols()); ++j) {
      const Buffer<T> ct = c(i, j);
      for (size_t k = 0; k < ak; ++k) {
        const OpShape x = op_tile(ta, a, i, k), y = op_tile(tb, b, k, j);
        if (x.rows != ct.rows() || y.cols != ct.cols() || x.cols != y.rows)
          refuse(fn, "tiles do not conform: op(A)(" + std::to_string(i) + ", " + std::to_string(k) +
                         ") " + ld::shape(x.rows, x.cols) + ", op(B)(" + std::to_string(k) + ", " +
                         std::to_string(j) + ") " + ld::shape(y.rows, y.cols) + ", " +
                         tile_shape("C", c, i, j));
      }
    }
}

// A square grid of tiles whose diagonal tiles are square and whose tile (i, j) is
// rows(i, i) x cols(j, j): a matrix cut the same way along both dimensions.
template <class T>
void check_square(const char* fn, const char* name, const Tiles<T>& a) {
  need_grid(fn, name, a);
  if (a.rows() != a.cols())
    refuse(fn, std::string(name) + " is " + ld::shape(a.rows(), a.cols()) +
                   " tiles: a square grid is needed");
  for (size_t i = 0; i < a.rows(); ++i)
    for (size_t j = 0; j < a.cols(); ++j)
      if (a(i, j).rows() != a(i, i).rows() || a(i, j).cols() != a(j, j).rows())
        refuse(fn, tile_shape(name, a, i, j) + " does not match the diagonal tiles " +
                       tile_shape(name, a, i, i) + " and " + tile_shape(name, a, j, j));
}

}  // namespace

template <class T>
void gemm(Cluster& cluster, Op trans_a, Op trans_b, double alpha, const Tiles<T>& a,
          const Tiles<T>& b, double beta, const Tiles<T>& c) {
  check_product("gemm", trans_a, a, trans_b, b, c);
  ld::TileTasks<T, ClusterSink> t(ClusterSink{cluster});
  ld::gemm_tiles(t, trans_a, trans_b, alpha, a, b, beta, c);
}

template <class T>
void syrk(Cluster& cluster, Uplo uplo, Op trans, double alpha, const Tiles<T>& a, double beta,
          const Tiles<T>& c) {
  check_square("syrk", "C", c);
  // The triangle's tiles as op(A) op(A)^T: checked on the lower side (the upper mirrors it).
  check_product("syrk", trans, a, trans == Op::no_trans ? Op::trans : Op::no_trans, a, c, true);
  ld::TileTasks<T, ClusterSink> t(ClusterSink{cluster});
  ld::syrk_tiles(t, uplo, trans, alpha, a, beta, c);
}

template <class T>
void potrf(Cluster& cluster, Uplo uplo, const Tiles<T>& a) {
  check_square("potrf", "A", a);
  ld::TileTasks<T, ClusterSink> t(ClusterSink{cluster});
  ld::potrf_tiles(t, uplo, a);
}

template <class T>
void potrs(Cluster& cluster, Uplo uplo, const Tiles<T>& a, const Tiles<T>& b) {
  check_square("potrs", "A", a);
  need_grid("potrs", "B", b);
  if (b.rows() != a.rows())
    refuse("potrs",
           "B has " + std::to_string(b.rows()) + " tile rows, A " + std::to_string(a.rows()));
  for (size_t i = 0; i < b.rows(); ++i)
    for (size_t j = 0; j < b.cols(); ++j)
      if (b(i, j).rows() != a(i, i).rows() || b(i, j).cols() != b(0, j).cols())
        refuse("potrs", tile_shape("B", b, i, j) + " does not match " + tile_shape("A", a, i, i) +
                            " and " + tile_shape("B", b, 0, j));
  ld::TileTasks<T, ClusterSink> t(ClusterSink{cluster});
  ld::potrs_tiles(t, uplo, a, b);
}

template HCR_MPI_API void gemm<float>(Cluster&, Op, Op, double, const Tiles<float>&,
                                      const Tiles<float>&, double, const Tiles<float>&);
template HCR_MPI_API void gemm<double>(Cluster&, Op, Op, double, const Tiles<double>&,
                                       const Tiles<double>&, double, const Tiles<double>&);
template HCR_MPI_API void syrk<float>(Cluster&, Uplo, Op, double, const Tiles<float>&, double,
                                      const Tiles<float>&);
template HCR_MPI_API void syrk<double>(Cluster&, Uplo, Op, double, const Tiles<double>&, double,
                                       const Tiles<double>&);
template HCR_MPI_API void potrf<float>(Cluster&, Uplo, const Tiles<float>&);
template HCR_MPI_API void potrf<double>(Cluster&, Uplo, const Tiles<double>&);
template HCR_MPI_API void potrs<float>(Cluster&, Uplo, const Tiles<float>&, const Tiles<float>&);
template HCR_MPI_API void potrs<double>(Cluster&, Uplo, const Tiles<double>&, const Tiles<double>&);

}  // namespace hcr::mpi
