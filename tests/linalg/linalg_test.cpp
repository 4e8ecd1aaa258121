// hcr::linalg against naive references: Cholesky (potrf) and its solve (potrs) on random SPD
// matrices at odd sizes and ragged tiles, lower and upper, f32 and f64, under every policy on the
// CPU backend and on a simulated machine whose devices have their own memories; gemm with every
// transpose, syrk, trsm with every side/uplo/trans/diag, LU without pivoting; the critical path's
// priorities; and each misuse named in its error. Each runs on the plugins' built-in tile kernels,
// and again on the stub plugin (devices with their own memory) with reference kernels written from
// <hcr/plugin.h> (reference_kernels.hpp): the tiling checked apart from any backend's BLAS.
#include "reference_kernels.hpp"
#include "../test_support.hpp"

#include <hcr/linalg.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <random>

namespace hcr {
namespace {

namespace la = linalg;
using la::Diag;
using la::Op;
using la::Side;
using la::Uplo;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- dense matrices on the host, in double ----------------------------------------------------

struct Dense {
  size_t rows = 0, cols = 0;
  std::vector<double> v;
  Dense() = default;
  Dense(size_t r, size_t c, double fill = 0) : rows(r), cols(c), v(r * c, fill) {}
  double& operator()(size_t i, size_t j) { return v[i * cols + j]; }
  double operator()(size_t i, size_t j) const { return v[i * cols + j]; }
};

Dense random_dense(size_t r, size_t c, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  Dense m(r, c);
  for (double& x : m.v) x = d(gen);
  return m;
}

Dense transpose(const Dense& a) {
  Dense t(a.cols, a.rows);
  for (size_t i = 0; i < a.rows; ++i)
    for (size_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

Dense multiply(const Dense& a, const Dense& b) {
  Dense c(a.rows, b.cols);
  for (size_t i = 0; i < a.rows; ++i)
    for (size_t p = 0; p < a.cols; ++p)
      for (size_t j = 0; j < b.cols; ++j) c(i, j) += a(i, p) * b(p, j);
  return c;
}

double frobenius(const Dense& a) {
  double s = 0;
  for (double x : a.v) s += x * x;
  return std::sqrt(s);
}

// ||a - b||_F
double distance(const Dense& a, const Dense& b) {
  double s = 0;
  for (size_t i = 0; i < a.v.size(); ++i) s += (a.v[i] - b.v[i]) * (a.v[i] - b.v[i]);
  return std::sqrt(s);
}

// A random symmetric positive definite matrix, well conditioned: R R^T / n + I.
Dense random_spd(size_t n, unsigned seed) {
  Dense r = random_dense(n, n, seed);
  Dense a = multiply(r, transpose(r));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) a(i, j) = a(i, j) / static_cast<double>(n) + (i == j ? 1 : 0);
  return a;
}

// Whether (i, j) lies in the strict triangle opposite `uplo`: what must be neither read nor
// written.
bool opposite(Uplo uplo, size_t i, size_t j) { return uplo == Uplo::lower ? j > i : j < i; }

template <class T>
Buffer<T> upload(Runtime& rt, const Dense& m) {
  auto b = rt.buffer<T>(m.rows, m.cols, uninitialized);
  auto v = b.acquire(Access::write);
  for (size_t i = 0; i < m.rows; ++i)
    for (size_t j = 0; j < m.cols; ++j) v(i, j) = static_cast<T>(m(i, j));
  return b;
}

template <class T>
Dense download(const Buffer<T>& b) {
  auto v = b.acquire(Access::read);
  Dense m(v.rows(), v.cols());
  for (size_t i = 0; i < m.rows; ++i)
    for (size_t j = 0; j < m.cols; ++j) m(i, j) = static_cast<double>(v(i, j));
  return m;
}

template <class T>
double eps() {
  return std::numeric_limits<T>::epsilon();
}

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "f32" : "f64";
}

// ---- machines and policies --------------------------------------------------------------------

// Two simulated devices with memories of their own (so tiles move to them and back) and a third
// in host memory that runs only gemm: every potrf, trsm and syrk tile needs a copy, and gemm tiles
// may run where their inputs are not. Real results on the host (compute defaults to true).
Config sim_machine(std::string policy) {
  Config c;
  c.use_environment = false;
  c.policy = std::move(policy);
  c.backends.push_back({"sim",
                        true,
                        {{"time_scale", "0.001"},
                         {"device.0.name", "gpu0"},
                         {"device.0.gflops", "400"},
                         {"device.0.memory", "64MiB"},
                         {"device.0.concurrency", "2"},
                         {"device.1.name", "gpu1"},
                         {"device.1.gflops", "200"},
                         {"device.1.memory", "64MiB"},
                         {"device.2.name", "host"},
                         {"device.2.kind", "cpu"},
                         {"device.2.host_memory", "true"},
                         {"device.2.gflops", "50"},
                         {"device.2.kernels", "gemm_f32,gemm_f64"}},
                        "test"});
  return c;
}

// Two stub devices with memories of their own, running launches on their own threads.
Config stub_machine(std::string policy) {
  Config c = test::stub_config({{"devices", "2"}, {"own_memory", "true"}, {"async", "true"}});
  c.policy = std::move(policy);
  return c;
}

enum class Kind { cpu, sim, reference };
struct Machine {
  Kind kind;
  std::string policy;
};

std::unique_ptr<Runtime> make_runtime(Kind kind, const std::string& policy = "eager") {
  switch (kind) {
    case Kind::cpu: return std::make_unique<Runtime>(test::cpu_config(2, policy));
    case Kind::sim: return std::make_unique<Runtime>(sim_machine(policy));
    case Kind::reference: break;
  }
  auto rt = std::make_unique<Runtime>(stub_machine(policy));
  test::add_reference_kernels(*rt);
  return rt;
}

const char* kind_name(Kind k) {
  return k == Kind::cpu ? "cpu" : k == Kind::sim ? "sim" : "reference";
}

std::string machine_name(const ::testing::TestParamInfo<Machine>& info) {
  return std::string(kind_name(info.param.kind)) + "_" + info.param.policy;
}

void PrintTo(const Machine& m, std::ostream* os) { *os << kind_name(m.kind) << " " << m.policy; }

// Every policy hcr offers (not this file's own recording policy).
std::vector<Machine> every_policy_on_every_machine() {
  std::vector<Machine> out;
  for (const std::string& p : sched::policy_names())
    if (p != "linalg_priorities")
      for (Kind k : {Kind::cpu, Kind::sim, Kind::reference}) out.push_back({k, p});
  return out;
}

class OnEveryPolicy : public ::testing::TestWithParam<Machine> {};

// ---- potrf and potrs --------------------------------------------------------------------------

struct Size {
  size_t n, tile;
};
// Odd sizes, tiles that do not divide them (ragged last tiles), one tile bigger than the matrix.
const Size kSizes[] = {{1, 1}, {37, 8}, {64, 16}, {20, 64}, {101, 24}};

// Factors a random SPD matrix whose opposite triangle holds NaN (never to be read), solves A X = B
// for three right-hand sides without waiting in between (potrs waits for the factor through the
// tiles), and checks the factor's residual, the solve's residual and the NaN left untouched.
template <class T>
void check_cholesky(Runtime& rt, Uplo uplo, Size s) {
  SCOPED_TRACE(std::string(type_name<T>()) + (uplo == Uplo::lower ? " lower" : " upper") +
               " n=" + std::to_string(s.n) + " tile=" + std::to_string(s.tile));
  const size_t n = s.n, r = 3;
  const Dense a = random_spd(n, static_cast<unsigned>(n * 7 + s.tile));
  Dense given = a;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (opposite(uplo, i, j)) given(i, j) = kNaN;
  const Dense b = random_dense(n, r, static_cast<unsigned>(n + 1));
  Buffer<T> A = upload<T>(rt, given), B = upload<T>(rt, b);

  Event factored = la::potrf(rt, uplo, A, s.tile);
  Event solved = la::potrs(rt, uplo, A, B, s.tile);
  factored.get();
  solved.get();

  const Dense f = download(A), x = download(B);
  Dense l(n, n);  // the factor, as L (lower) or U^T (upper)
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (opposite(uplo, i, j)) {
        EXPECT_TRUE(std::isnan(f(i, j)))
            << "the opposite triangle was written at (" << i << ", " << j << "): " << f(i, j);
        continue;
      }
      if (uplo == Uplo::lower) l(i, j) = f(i, j);
      else l(j, i) = f(i, j);
    }
  const double tol = 8.0 * static_cast<double>(n) * eps<T>();
  const double factor_residual = distance(a, multiply(l, transpose(l))) / frobenius(a);
  EXPECT_LE(factor_residual, tol) << "||A - L L^T||_F / ||A||_F";
  const double solve_residual =
      distance(multiply(a, x), b) / (frobenius(a) * frobenius(x) + frobenius(b));
  EXPECT_LE(solve_residual, tol) << "||A X - B||_F / (||A|| ||X|| + ||B||)";
}

TEST_P(OnEveryPolicy, CholeskyAndSolveOfRandomSpdMatrices) {
  auto rt = make_runtime(GetParam().kind, GetParam().policy);
  for (Uplo uplo : {Uplo::lower, Uplo::upper})
    for (const Size& s : kSizes) {
      check_cholesky<float>(*rt, uplo, s);
      check_cholesky<double>(*rt, uplo, s);
    }
  if (GetParam().kind != Kind::cpu) {
    // Tiles went to the devices' own memories and came back.
    EXPECT_GT(rt->stats().data.bytes_moved(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Linalg, OnEveryPolicy,
                         ::testing::ValuesIn(every_policy_on_every_machine()), machine_name);

TEST(Potrf, MatrixNotPositiveDefiniteFailsTheEvent) {
  for (Kind kind : {Kind::reference, Kind::cpu}) {
    SCOPED_TRACE(kind_name(kind));
    auto rt = make_runtime(kind);
    Dense a = random_spd(40, 3);
    a(25, 25) = -100;  // the leading minor of order 26 is not positive definite
    Buffer<double> A = upload<double>(*rt, a);
    Error e = test::expect_error([&] { la::potrf(*rt, Uplo::lower, A, 16).get(); });
    EXPECT_EQ(e.code(), ErrorCode::dependency) << e.what();
    // The kernel names the minor's order within its diagonal tile (here 26 - 16 = 10).
    EXPECT_NE(std::string(e.what()).find("positive definite"), std::string::npos) << e.what();
    // The buffer is whole again: the host reads it (the write that failed is in the error).
    EXPECT_EQ(e.code(), test::expect_error([&] { download(A); }).code());
  }
}

// ---- Priorities -------------------------------------------------------------------------------

// Which kernel with which priority every task had, as pushed; FIFO placement otherwise.
class PriorityRecorder final : public sched::Policy {
 public:
  static std::multimap<std::string, int>& seen() {
    static std::multimap<std::string, int> s;
    return s;
  }
  static std::mutex& seen_mutex() {
    static std::mutex m;
    return m;
  }
  std::string_view name() const noexcept override { return "linalg_priorities"; }
  void attach(sched::Context&) override {}
  sched::DeviceId push(sched::TaskRef task) override {
    {
      std::lock_guard<std::mutex> lock(seen_mutex());
      seen().emplace(std::string(task.kernel_name()), task.user_priority());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(task);
    return sched::kAnyDevice;
  }
  sched::TaskRef pop(sched::DeviceId d) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->can_run(d)) {
        sched::TaskRef t = *it;
        queue_.erase(it);
        return t;
      }
    return {};
  }

 private:
  std::mutex mutex_;
  std::deque<sched::TaskRef> queue_;
};

const bool priority_recorder_registered = [] {
  sched::register_policy("linalg_priorities",
                         [](const Config&) { return std::make_unique<PriorityRecorder>(); });
  return true;
}();

// The priorities potrf's tasks carry on `machine` (lower and upper), by kernel.
std::multimap<std::string, int> potrf_priorities(const Config& machine, Uplo uplo) {
  {
    std::lock_guard<std::mutex> lock(PriorityRecorder::seen_mutex());
    PriorityRecorder::seen().clear();
  }
  {
    Runtime rt(machine);
    test::add_reference_kernels(rt);
    Buffer<float> A = upload<float>(rt, random_spd(30, 5));
    la::potrf(rt, uplo, A, 8).get();  // 4 x 4 tiles, the last ones 6 wide
  }
  std::lock_guard<std::mutex> lock(PriorityRecorder::seen_mutex());
  std::multimap<std::string, int> seen = PriorityRecorder::seen();
  for (auto it = seen.begin(); it != seen.end();)  // the upload's host access, if pushed
    it = it->first.ends_with("_f32") ? std::next(it) : seen.erase(it);
  return seen;
}

// cholesky_implicit's priorities (2N - 2k - m - n, N tiles a side) raised by 2N: for N = 4,
// potrf(k) 16 - 2k, trsm(m, k) 16 - 2k - m, syrk and gemm of tile (m, n) 16 - 2k - m - n; with
// `look_ahead_only`, only the updates of the next panel's column (n = k + 1) keep theirs, the
// others 0.
std::vector<std::pair<std::string, int>> expected_priorities(bool look_ahead_only) {
  const int N = 4;
  std::vector<std::pair<std::string, int>> want;
  for (int k = 0; k < N; ++k) {
    want.emplace_back("potrf_f32", 2 * N - 2 * k + 2 * N);
    for (int m = k + 1; m < N; ++m) want.emplace_back("trsm_f32", 2 * N - 2 * k - m + 2 * N);
    for (int n = k + 1; n < N; ++n)
      for (int m = n; m < N; ++m)
        want.emplace_back(m == n ? "syrk_f32" : "gemm_f32",
                          n == k + 1 || !look_ahead_only ? 2 * N - 2 * k - m - n + 2 * N : 0);
  }
  std::sort(want.begin(), want.end());
  return want;
}

std::vector<std::pair<std::string, int>> sorted(const std::multimap<std::string, int>& m) {
  std::vector<std::pair<std::string, int>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end());
  return v;
}

// Devices of one architecture (the stub's two): the panel and the look-ahead carry the critical
// path's priorities, the rest of the trailing update none (it runs in ready order, cache-warm).
TEST(Potrf, OnDevicesOfOneArchitectureOnlyThePanelAndLookAheadCarryPriorities) {
  for (Uplo uplo : {Uplo::lower, Uplo::upper})
    EXPECT_EQ(sorted(potrf_priorities(stub_machine("linalg_priorities"), uplo)),
              expected_priorities(true))
        << (uplo == Uplo::lower ? "lower" : "upper");
}

// Devices that differ (the simulated machine's GPUs and host): every task carries its distance
// along the critical path, so that the fast devices keep to it.
TEST(Potrf, OnDevicesThatDifferEveryTaskCarriesTheCriticalPathPriority) {
  for (Uplo uplo : {Uplo::lower, Uplo::upper})
    EXPECT_EQ(sorted(potrf_priorities(sim_machine("linalg_priorities"), uplo)),
              expected_priorities(false))
        << (uplo == Uplo::lower ? "lower" : "upper");
}

// ---- gemm, syrk, trsm, getrf_nopiv ------------------------------------------------------------

template <class T>
class Blas3 : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Blas3, Types);

// The reference kernels on the stub, then the plugins' built-ins (CPU backend).
const Kind kKinds[] = {Kind::reference, Kind::cpu};

Dense op(const Dense& a, Op o) { return o == Op::no_trans ? a : transpose(a); }

// C = alpha op(A) op(B) + beta C for every transpose pair, m x k x n = 13 x 7 x 10 in tiles of 4
// (ragged everywhere) and of 16 (one tile); with beta == 0 C starts as NaN, which must not leak.
TYPED_TEST(Blas3, GemmWithEveryTransposeMatchesTheReference) {
  using T = TypeParam;
  for (Kind kind : kKinds) {
    SCOPED_TRACE(kind_name(kind));
    auto rt_owner = make_runtime(kind);
    Runtime& rt = *rt_owner;
    const size_t m = 13, k = 7, n = 10;
    for (Op ta : {Op::no_trans, Op::trans})
      for (Op tb : {Op::no_trans, Op::trans})
        for (size_t tile : {4, 16})
          for (double beta : {0.0, -1.5}) {
            SCOPED_TRACE("trans_a " + std::to_string(static_cast<int>(ta)) + " trans_b " +
                         std::to_string(static_cast<int>(tb)) + " tile " + std::to_string(tile) +
                         " beta " + std::to_string(beta));
            const Dense a = ta == Op::no_trans ? random_dense(m, k, 1) : random_dense(k, m, 1);
            const Dense b = tb == Op::no_trans ? random_dense(k, n, 2) : random_dense(n, k, 2);
            const Dense c0 = beta == 0 ? Dense(m, n, kNaN) : random_dense(m, n, 3);
            Buffer<T> A = upload<T>(rt, a), B = upload<T>(rt, b), C = upload<T>(rt, c0);
            la::gemm(rt, ta, tb, 0.5, A, B, beta, C, tile).get();
            const Dense got = download(C), ab = multiply(op(a, ta), op(b, tb));
            for (size_t i = 0; i < m; ++i)
              for (size_t j = 0; j < n; ++j) {
                const double want = 0.5 * ab(i, j) + (beta == 0 ? 0 : beta * c0(i, j));
                ASSERT_NEAR(got(i, j), want, 4 * (k + 2) * eps<T>())
                    << "C(" << i << ", " << j << ")";
              }
          }
  }
}

// A^T A with A named twice: partitioned once.
TYPED_TEST(Blas3, GemmOfAMatrixWithItsOwnTranspose) {
  using T = TypeParam;
  for (Kind kind : kKinds) {
    SCOPED_TRACE(kind_name(kind));
    auto rt_owner = make_runtime(kind);
    Runtime& rt = *rt_owner;
    const Dense a = random_dense(9, 5, 4);
    Buffer<T> A = upload<T>(rt, a), C = rt.buffer<T>(5, 5);
    la::gemm(rt, Op::trans, Op::no_trans, 1.0, A, A, 0.0, C, 3).get();
    const Dense got = download(C), want = multiply(transpose(a), a);
    for (size_t i = 0; i < 25; ++i) EXPECT_NEAR(got.v[i], want.v[i], 40 * eps<T>());
  }
}

// The uplo triangle of C = alpha op(A) op(A)^T + beta C, n = 11 in tiles of 4 (ragged), k = 6;
// the opposite triangle of C holds NaN and must stay so.
TYPED_TEST(Blas3, SyrkWritesOnlyItsTriangle) {
  using T = TypeParam;
  for (Kind kind : kKinds) {
    SCOPED_TRACE(kind_name(kind));
    auto rt_owner = make_runtime(kind);
    Runtime& rt = *rt_owner;
    const size_t n = 11, k = 6;
    for (Uplo uplo : {Uplo::lower, Uplo::upper})
      for (Op trans : {Op::no_trans, Op::trans})
        for (double beta : {0.0, 2.0}) {
          SCOPED_TRACE(std::string(uplo == Uplo::lower ? "lower" : "upper") +
                       (trans == Op::trans ? " trans" : " no_trans") + " beta " +
                       std::to_string(beta));
          const Dense a = trans == Op::no_trans ? random_dense(n, k, 5) : random_dense(k, n, 5);
          Dense c0 = random_dense(n, n, 6);
          for (size_t i = 0; i < n; ++i)
            for (size_t j = 0; j < n; ++j)
              if (opposite(uplo, i, j)) c0(i, j) = kNaN;
          Buffer<T> A = upload<T>(rt, a), C = upload<T>(rt, c0);
          la::syrk(rt, uplo, trans, -0.5, A, beta, C, 4).get();
          const Dense got = download(C), oa = op(a, trans), aat = multiply(oa, transpose(oa));
          for (size_t i = 0; i < n; ++i)
            for (size_t j = 0; j < n; ++j) {
              if (opposite(uplo, i, j)) {
                EXPECT_TRUE(std::isnan(got(i, j))) << "(" << i << ", " << j << ") was written";
                continue;
              }
              ASSERT_NEAR(got(i, j), -0.5 * aat(i, j) + beta * c0(i, j), 8 * (k + 2) * eps<T>())
                  << "C(" << i << ", " << j << ")";
            }
        }
  }
}

// op(A) X = alpha B or X op(A) = alpha B for all 16 side/uplo/trans/diag, B 10 x 7 in tiles of 3
// (ragged): A's opposite triangle is NaN, and so is its diagonal under Diag::unit (never read).
TYPED_TEST(Blas3, TrsmEverySideUploTransDiag) {
  using T = TypeParam;
  for (Kind kind : kKinds) {
    SCOPED_TRACE(kind_name(kind));
    auto rt_owner = make_runtime(kind);
    Runtime& rt = *rt_owner;
    const size_t m = 10, n = 7;
    for (Side side : {Side::left, Side::right})
      for (Uplo uplo : {Uplo::lower, Uplo::upper})
        for (Op trans : {Op::no_trans, Op::trans})
          for (Diag diag : {Diag::non_unit, Diag::unit}) {
            SCOPED_TRACE(std::string(side == Side::left ? "left" : "right") +
                         (uplo == Uplo::lower ? " lower" : " upper") +
                         (trans == Op::trans ? " trans" : " no_trans") +
                         (diag == Diag::unit ? " unit" : " non_unit"));
            const size_t order = side == Side::left ? m : n;
            // Triangular and well conditioned: small off-diagonal entries, a diagonal near 2.
            Dense tri = random_dense(order, order, 7), given(order, order);
            for (size_t i = 0; i < order; ++i)
              for (size_t j = 0; j < order; ++j) {
                if (opposite(uplo, i, j)) {
                  tri(i, j) = 0;
                  given(i, j) = kNaN;
                } else if (i == j) {
                  tri(i, j) = diag == Diag::unit ? 1 : 2 + 0.5 * tri(i, j);
                  given(i, j) = diag == Diag::unit ? kNaN : tri(i, j);
                } else {
                  tri(i, j) /= static_cast<double>(order);
                  given(i, j) = tri(i, j);
                }
              }
            const Dense b = random_dense(m, n, 8);
            Buffer<T> A = upload<T>(rt, given), B = upload<T>(rt, b);
            la::trsm(rt, side, uplo, trans, diag, 1.5, A, B, 3).get();
            const Dense x = download(B), oa = op(tri, trans);
            const Dense lhs = side == Side::left ? multiply(oa, x) : multiply(x, oa);
            Dense rhs = b;
            for (double& v : rhs.v) v *= 1.5;
            EXPECT_LE(distance(lhs, rhs) / (frobenius(oa) * frobenius(x) + frobenius(rhs)),
                      8 * static_cast<double>(order) * eps<T>());
          }
  }
}

// A = L U without pivoting on a diagonally dominant 29 x 29 matrix in tiles of 8 (ragged).
TYPED_TEST(Blas3, LuWithoutPivotingOfADiagonallyDominantMatrix) {
  using T = TypeParam;
  for (Kind kind : kKinds) {
    SCOPED_TRACE(kind_name(kind));
    auto rt_owner = make_runtime(kind);
    Runtime& rt = *rt_owner;
    const size_t n = 29;
    Dense a = random_dense(n, n, 9);
    for (size_t i = 0; i < n; ++i) a(i, i) += static_cast<double>(n);
    Buffer<T> A = upload<T>(rt, a);
    la::getrf_nopiv(rt, A, 8).get();
    const Dense f = download(A);
    Dense l(n, n), u(n, n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        if (j < i) l(i, j) = f(i, j);
        else u(i, j) = f(i, j);
        if (i == j) l(i, i) = 1;
      }
    EXPECT_LE(distance(a, multiply(l, u)) / frobenius(a), 8 * static_cast<double>(n) * eps<T>());
  }
}

// ---- misuse -----------------------------------------------------------------------------------

std::string message(const Error& e) { return e.what(); }

TEST(LinalgErrors, ShapesAreNamed) {
  auto rt_owner = make_runtime(Kind::reference);
  Runtime& rt = *rt_owner;
  auto a = rt.buffer<float>(3, 4), b = rt.buffer<float>(5, 6), c = rt.buffer<float>(3, 6);
  Error e = test::expect_error([&] { la::gemm(rt, Op::no_trans, Op::no_trans, 1, a, b, 0, c, 2); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(message(e).find("linalg::gemm: shapes do not match: A is 3x4, B is 5x6, C is 3x6"),
            std::string::npos)
      << e.what();
  e = test::expect_error([&] { la::gemm(rt, Op::trans, Op::trans, 1, a, b, 0, c, 2); });
  EXPECT_NE(message(e).find("A^T is 4x3, B^T is 6x5, C is 3x6"), std::string::npos) << e.what();

  auto rect = rt.buffer<double>(4, 5);
  e = test::expect_error([&] { la::potrf(rt, Uplo::lower, rect, 2); });
  EXPECT_NE(message(e).find("linalg::potrf: A is 4x5: it must be square"), std::string::npos)
      << e.what();
  e = test::expect_error([&] { la::getrf_nopiv(rt, rect, 2); });
  EXPECT_NE(message(e).find("linalg::getrf_nopiv: A is 4x5: it must be square"), std::string::npos);

  auto sq = rt.buffer<double>(4, 4), rhs = rt.buffer<double>(5, 2);
  e = test::expect_error([&] { la::potrs(rt, Uplo::lower, sq, rhs, 2); });
  EXPECT_NE(message(e).find("A is 4x4, B is 5x2"), std::string::npos) << e.what();
  e = test::expect_error(
      [&] { la::trsm(rt, Side::right, Uplo::lower, Op::no_trans, Diag::unit, 1, sq, rhs, 2); });
  EXPECT_NE(message(e).find("A is 4x4, B is 5x2 (side right: A must be n x n"), std::string::npos)
      << e.what();
  auto wide = rt.buffer<double>(3, 4);
  EXPECT_NO_THROW(la::syrk(rt, Uplo::upper, Op::trans, 1, wide, 0, sq, 2).get())
      << "A^T is 4x3: it fits C 4x4";
  e = test::expect_error([&] { la::syrk(rt, Uplo::upper, Op::no_trans, 1, wide, 0, sq, 2); });
  EXPECT_NE(message(e).find("linalg::syrk: shapes do not match: A is 3x4, C is 4x4"),
            std::string::npos)
      << e.what();
}

TEST(LinalgErrors, TileAliasesEnumsAndHandlesAreNamed) {
  auto rt_owner = make_runtime(Kind::reference);
  Runtime& rt = *rt_owner;
  auto a = rt.buffer<float>(4, 4), b = rt.buffer<float>(4, 4);
  Error e = test::expect_error([&] { la::potrf(rt, Uplo::lower, a, 0); });
  EXPECT_NE(message(e).find("linalg::potrf: tile size 0"), std::string::npos) << e.what();
  e = test::expect_error([&] { la::gemm(rt, Op::no_trans, Op::no_trans, 1, a, b, 0, b, 2); });
  EXPECT_NE(message(e).find("linalg::gemm: C must not alias B"), std::string::npos) << e.what();
  e = test::expect_error([&] { la::potrs(rt, Uplo::lower, a, a, 2); });
  EXPECT_NE(message(e).find("linalg::potrs: B must not alias A"), std::string::npos) << e.what();
  e = test::expect_error([&] { la::potrf(rt, static_cast<Uplo>(7), a, 2); });
  EXPECT_NE(message(e).find("uplo = 7 is not Uplo::lower or Uplo::upper"), std::string::npos)
      << e.what();
  e = test::expect_error([&] {
    la::trsm(rt, static_cast<Side>(-1), Uplo::lower, Op::no_trans, Diag::unit, 1, a, b, 2);
  });
  EXPECT_NE(message(e).find("side = -1 is not Side::left or Side::right"), std::string::npos)
      << e.what();
  e = test::expect_error([&] { la::gemm(rt, static_cast<Op>(2), Op::no_trans, 1, a, a, 0, b, 2); });
  EXPECT_NE(message(e).find("trans_a = 2 is not Op::no_trans or Op::trans"), std::string::npos)
      << e.what();
  e = test::expect_error([&] { la::potrs(rt, Uplo::lower, a, Buffer<float>(), 2); });
  EXPECT_NE(message(e).find("linalg::potrs: B is an empty Buffer handle"), std::string::npos)
      << e.what();
  // None of these left a buffer partitioned.
  EXPECT_NO_THROW(a.acquire(Access::read));
  EXPECT_NO_THROW(b.acquire(Access::read));
}

// A buffer of another runtime and a partitioned one are refused before anything is partitioned
// or submitted: the call's other operands stay whole.
TEST(LinalgErrors, OperandsThatCannotBePartitionedLeaveTheOthersWhole) {
  auto rt_owner = make_runtime(Kind::reference);
  Runtime& rt = *rt_owner;
  Runtime other(test::cpu_config(1));
  auto a = rt.buffer<double>(6, 6), b = rt.buffer<double>(6, 2);
  auto foreign = other.buffer<double>(6, 2);
  Error e = test::expect_error([&] { la::potrs(rt, Uplo::lower, a, foreign, 4); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(message(e).find("linalg::potrs: B (a 6x2 f64 buffer) belongs to another runtime"),
            std::string::npos)
      << e.what();
  EXPECT_NO_THROW(a.acquire(Access::read));

  Tiles<double> tiles = b.partition(3, 3);
  e = test::expect_error([&] { la::potrs(rt, Uplo::lower, a, b, 4); });
  EXPECT_NE(message(e).find("linalg::potrs: B (a 6x2 f64 buffer): "), std::string::npos)
      << e.what();
  EXPECT_NE(message(e).find("already partitioned"), std::string::npos) << e.what();
  EXPECT_NO_THROW(a.acquire(Access::read)) << "A was left partitioned";
  b.unpartition().get();

  // A tile of a partitioned buffer is an operand like any other (partitioned in turn).
  auto big = rt.buffer<double>(8, 8);
  {
    auto v = big.acquire(Access::write);
    for (size_t i = 0; i < 8; ++i) v(i, i) = 4;
  }
  Tiles<double> quarters = big.partition(4, 4);
  la::potrf(rt, Uplo::lower, quarters(1, 1), 3).get();
  big.unpartition().get();
  auto v = big.acquire(Access::read);
  EXPECT_EQ(v(0, 0), 4.0);
  EXPECT_EQ(v(5, 5), 2.0);
}

}  // namespace
}  // namespace hcr
