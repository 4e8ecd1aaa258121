// hcr::mpi under mpirun (-np 2 and 4): every rank runs these tests in the same order, each over
// its own Runtime (cpu backend, one thread). A failure on any rank fails its process, and mpirun
// returns non-zero.
#include <hcr/linalg.hpp>
#include <hcr/mpi.hpp>
#include <hcr/mpi_linalg.hpp>
#include <hcr/sched.hpp>

#include "../test_support.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <random>
#include <set>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

// Allocations made by the thread that counts them (Cluster.ARankNotInvolvedSkipsATaskWithout
// Allocating): every operator new of the program comes here, and goes on to malloc. Not in
// sanitizer builds, whose runtimes own operator new (libraries would pair theirs with our delete).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HCR_TEST_COUNTS_ALLOCATIONS 0
#else
#define HCR_TEST_COUNTS_ALLOCATIONS 1
#endif
namespace {
thread_local bool counting_allocations = false;
thread_local uint64_t allocations = 0;
}  // namespace
#if HCR_TEST_COUNTS_ALLOCATIONS
void* operator new(size_t n) {
  if (counting_allocations) ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// (GCC 12 takes a replaced delete's free for a mismatch with the new it replaces.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace hcr {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
// True on every rank when it is true on all of them (a test's verdict shared, so that one rank's
// failure is every rank's).
bool all_ranks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

// The buffers hold int64_t, the arithmetic wraps as uint64_t.
std::vector<uint64_t> u64(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// out = (write ? 0 : out * 3) + sum_j in_j * (j + 1) + k, elementwise, in uint64 arithmetic.
// Arguments: out, then the inputs; parameters: k, write (0/1).
Kernel mix_kernel(Runtime& rt) {
  return rt.kernel("mix").cpu([](TaskContext& ctx) {
    auto out = ctx.arg<int64_t>(0);
    const auto k = ctx.param<uint64_t>(0);
    const bool write_only = ctx.param<uint64_t>(1) != 0;
    for (size_t c = 0; c < out.cols; ++c) {
      uint64_t v = write_only ? 0 : static_cast<uint64_t>(out(0, c)) * 3;
      for (size_t j = 1; j < ctx.num_args(); ++j)
        v += static_cast<uint64_t>(ctx.arg<int64_t>(j)(0, c)) * (j + 1);
      out(0, c) = static_cast<int64_t>(v + k);
    }
  });
}

// A random graph over `nbuf` distributed vectors, run through the cluster and sequentially.
// window: the runtime's max_tasks_in_flight (0: the default); returns how often its submits waited.
uint64_t random_graph(mpi::Options options, uint32_t seed, int ntasks, uint64_t window = 0) {
  Config config = test::cpu_config(1);
  if (window != 0) config.max_tasks_in_flight = window;
  Runtime rt(config);
  mpi::Cluster cl(rt, MPI_COMM_WORLD, options);
  Kernel mix = mix_kernel(rt);
  constexpr size_t kBuffers = 10, kLen = 8;
  std::mt19937 rng(seed);  // the same on every rank: the same graph
  std::vector<Buffer<int64_t>> bufs;
  std::vector<std::vector<uint64_t>> ref(kBuffers, std::vector<uint64_t>(kLen));
  std::vector<int> owner(kBuffers);
  for (size_t b = 0; b < kBuffers; ++b) {
    owner[b] = static_cast<int>(rng() % static_cast<uint32_t>(cl.size()));
    bufs.push_back(cl.buffer<int64_t>(1, kLen, owner[b]));
    for (size_t i = 0; i < kLen; ++i) ref[b][i] = b * 100 + i;
    if (owner[b] == cl.rank()) {  // the owner's data is the initial version
      auto v = bufs[b].acquire(Access::write);
      for (size_t i = 0; i < kLen; ++i) v(0, i) = ref[b][i];
    }
  }
  for (int t = 0; t < ntasks; ++t) {
    const size_t out = rng() % kBuffers;
    const bool write_only = rng() % 4 == 0;
    const uint64_t k = rng() % 1000;
    std::vector<size_t> in;
    for (size_t n = rng() % 3; n > 0; --n) {
      size_t b = rng() % kBuffers;
      if (b != out && std::find(in.begin(), in.end(), b) == in.end()) in.push_back(b);
    }
    mpi::Task task(mix);
    if (write_only) task.write(bufs[out]);
    else task.read_write(bufs[out]);
    for (size_t b : in) task.read(bufs[b]);
    task.param(k).param(uint64_t{write_only});
    if (rng() % 5 == 0) task.on_rank(static_cast<int>(rng() % static_cast<uint32_t>(cl.size())));
    cl.submit(task);
    for (size_t i = 0; i < kLen; ++i) {
      uint64_t v = write_only ? 0 : ref[out][i] * 3;
      for (size_t j = 0; j < in.size(); ++j) v += ref[in[j]][i] * (j + 2);
      ref[out][i] = v + k;
    }
  }
  cl.wait_all();
  for (size_t b = 0; b < kBuffers; ++b)
    if (owner[b] == cl.rank()) {
      EXPECT_EQ(u64(bufs[b].to_vector()), ref[b]) << "buffer " << b;
    }
  const mpi::Stats s = cl.stats();
  EXPECT_EQ(s.tasks_run + s.tasks_skipped, static_cast<uint64_t>(ntasks));
  return rt.stats().throttled;
}

TEST(Cluster, RandomGraphsMatchASequentialRun) {
  for (uint32_t seed : {1u, 2u, 3u}) random_graph({}, seed, 150);
}

// The submission window: each rank's runtime lets at most max_tasks_in_flight of its own tasks
// and transfers (host accesses) be unfinished, whatever the whole graph's size — a rank's memory
// follows its own work. A window of 4 throttles, and the ranks, submitting in the same order, still
// finish with the sequential result.
TEST(Cluster, ASmallWindowThrottlesEachRankAndStillFinishes) {
  uint64_t throttled = 0;
  for (uint32_t seed : {7u, 8u}) throttled += random_graph({}, seed, 300, 4);
  uint64_t anywhere = 0;
  MPI_Allreduce(&throttled, &anywhere, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_GT(anywhere, 0u) << "no rank's submission ever waited for room";
}

TEST(Cluster, AnEmulatedTagSpaceOfTwoTagsIsEnough) {
  mpi::Options o;
  o.tag_space = 2;  // ids and versions far beyond it travel in the headers
  random_graph(o, 7, 200);
  o.tag_space = 1;
  Runtime rt(test::cpu_config(1));
  Error e = test::expect_error([&] { mpi::Cluster cl(rt, MPI_COMM_WORLD, o); });
  EXPECT_NE(std::string(e.what()).find("tag_space 1"), std::string::npos) << e.what();
}

TEST(Cluster, RandomGraphsWithFewSendsInFlightAndATinyCap) {
  mpi::Options o;
  o.max_sends_in_flight = 1;
  o.early_arrival_cap = 1;
  o.timeout = std::chrono::milliseconds(10000);
  random_graph(o, 11, 150);
}

// Every pair of access modes on every pair of executor ranks, on one buffer owned by rank 0:
// what each reader saw, and the final value home, against the sequential answer.
TEST(Cluster, EveryAccessModePairAcrossRanks) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel mix = mix_kernel(rt);
  const int n = cl.size();
  const Access modes[] = {Access::read, Access::write, Access::read_write};
  int scenario = 0;
  for (Access m1 : modes)
    for (Access m2 : modes)
      for (int r1 = 0; r1 < n; ++r1)
        for (int r2 = 0; r2 < n; ++r2, ++scenario) {
          auto x = cl.buffer<int64_t>(1, 2, 0);
          if (cl.rank() == 0) x.acquire(Access::write).span()[0] = 5;
          uint64_t ref = 5;
          std::vector<std::pair<Buffer<int64_t>, uint64_t>> seen;  // observer, expected
          auto apply = [&](Access m, int r, uint64_t k) {
            if (m == Access::read) {  // a reader on rank r copies x into a buffer r owns
              auto obs = cl.buffer<int64_t>(1, 2, r);
              cl.submit(mpi::Task(mix).write(obs).read(x).param(uint64_t{0}).param(uint64_t{1}));
              seen.emplace_back(obs, ref * 2);
            } else {
              cl.submit(mpi::Task(mix)
                            .arg(x.state(), m)
                            .param(k)
                            .param(uint64_t{m == Access::write})
                            .on_rank(r));
              ref = (m == Access::write ? 0 : ref * 3) + k;
            }
          };
          apply(m1, r1, 10);
          apply(m2, r2, 20);
          cl.wait_all();
          if (cl.rank() == 0) {
            EXPECT_EQ(u64(x.to_vector())[0], ref) << "scenario " << scenario << ": " << int(m1)
                                                  << "@" << r1 << ", " << int(m2) << "@" << r2;
          }
          for (auto& [obs, want] : seen)
            if (cl.owner(obs) == cl.rank()) {
              EXPECT_EQ(u64(obs.to_vector())[0], want) << "scenario " << scenario;
            }
        }
}

// A reader after a write gets the new version, not the copy it cached.
TEST(Cluster, AWriteInvalidatesCachedCopies) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel mix = mix_kernel(rt);
  auto x = cl.buffer<int64_t>(1, 4, 0);
  auto seen1 = cl.buffer<int64_t>(1, 4, 1);
  auto seen2 = cl.buffer<int64_t>(1, 4, 1);
  auto seen3 = cl.buffer<int64_t>(1, 4, 1);
  auto observe = [&](Buffer<int64_t>& obs) {  // on rank 1: obs = 2 * x
    cl.submit(mpi::Task(mix).write(obs).read(x).param(uint64_t{0}).param(uint64_t{1}));
  };
  auto bump = [&] {  // on rank 0: x = 3x + 1
    cl.submit(mpi::Task(mix).read_write(x).param(uint64_t{1}).param(uint64_t{0}));
  };
  observe(seen1);  // x v0 goes to rank 1
  observe(seen2);  // cached: nothing moves
  bump();          // rank 1's copy is stale now
  observe(seen3);  // x v1 goes to rank 1
  cl.wait_all();
  if (cl.rank() == 1) {
    EXPECT_EQ(u64(seen1.to_vector()), std::vector<uint64_t>(4, 0));
    EXPECT_EQ(u64(seen2.to_vector()), std::vector<uint64_t>(4, 0));
    EXPECT_EQ(u64(seen3.to_vector()), std::vector<uint64_t>(4, 2));
  }
  const mpi::Stats s = cl.stats();
  if (cl.rank() == 0) {
    EXPECT_EQ(s.peers[1].messages_sent, 2u);
    EXPECT_EQ(s.peers[1].bytes_sent, 2u * 4 * sizeof(uint64_t));
  }
  if (cl.rank() == 1) {
    EXPECT_EQ(s.peers[0].messages_received, 2u);
  }
}

// A distributed tiled gemm, 2-D block-cyclic: the result is right and the bytes each rank sent to
// each other equal the minimum owner-computes needs (each tile version to each remote reader once).
TEST(Cluster, TiledGemmMovesTheMinimumBytes) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel gemm = rt.kernel("gemm_acc").cpu([](TaskContext& ctx) {  // C += A B
    auto a = ctx.arg<double>(0), b = ctx.arg<double>(1), c = ctx.arg<double>(2);
    for (size_t i = 0; i < c.rows; ++i)
      for (size_t j = 0; j < c.cols; ++j) {
        double s = 0;
        for (size_t k = 0; k < a.cols; ++k) s += a(i, k) * b(k, j);
        c(i, j) += s;
      }
  });
  constexpr size_t kN = 24, kTile = 8, kT = kN / kTile;
  const int n = cl.size();
  const int p = n >= 4 ? 2 : 1, q = n / p;
  const auto up = static_cast<size_t>(p), uq = static_cast<size_t>(q);
  auto a = rt.buffer<double>(kN, kN), b = rt.buffer<double>(kN, kN), c = rt.buffer<double>(kN, kN);
  {  // every rank fills the whole matrices; only owners' tiles count
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write);
    for (size_t i = 0; i < kN; ++i)
      for (size_t j = 0; j < kN; ++j) {
        va(i, j) = static_cast<double>((i * 7 + j * 3) % 11);
        vb(i, j) = static_cast<double>((i * 5 + j) % 13) - 6;
      }
  }
  Tiles<double> ta = a.partition(kTile, kTile), tb = b.partition(kTile, kTile),
                tc = c.partition(kTile, kTile);
  cl.distribute_2d(ta, p, q);
  cl.distribute_2d(tb, p, q);
  cl.distribute_2d(tc, p, q);
  // The minimum: tile (x of A or B) goes once to each rank that owns a C tile needing it.
  std::vector<std::vector<uint64_t>> want(static_cast<size_t>(n),
                                          std::vector<uint64_t>(static_cast<size_t>(n)));
  std::set<std::tuple<int, size_t, size_t, int>> needed;  // (matrix, i, j, reader)
  auto own = [&](size_t i, size_t j) { return static_cast<int>((i % up) * uq + j % uq); };
  for (size_t i = 0; i < kT; ++i)
    for (size_t j = 0; j < kT; ++j)
      for (size_t k = 0; k < kT; ++k) {
        cl.submit(mpi::Task(gemm).read(ta(i, k)).read(tb(k, j)).read_write(tc(i, j)));
        const int r = own(i, j);
        if (own(i, k) != r && needed.insert({0, i, k, r}).second)
          want[static_cast<size_t>(own(i, k))][static_cast<size_t>(r)] +=
              kTile * kTile * sizeof(double);
        if (own(k, j) != r && needed.insert({1, k, j, r}).second)
          want[static_cast<size_t>(own(k, j))][static_cast<size_t>(r)] +=
              kTile * kTile * sizeof(double);
      }
  cl.wait_all();
  const mpi::Stats s = cl.stats();
  for (int peer = 0; peer < n; ++peer) {
    EXPECT_EQ(s.peers[static_cast<size_t>(peer)].bytes_sent,
              want[static_cast<size_t>(cl.rank())][static_cast<size_t>(peer)])
        << "to rank " << peer;
    EXPECT_EQ(s.peers[static_cast<size_t>(peer)].bytes_received,
              want[static_cast<size_t>(peer)][static_cast<size_t>(cl.rank())])
        << "from rank " << peer;
  }
  c.unpartition().get();
  a.unpartition().get();
  b.unpartition().get();
  auto va = a.to_vector(), vb = b.to_vector(), vc = c.to_vector();
  for (size_t i = 0; i < kN; ++i)
    for (size_t j = 0; j < kN; ++j) {
      if (own(i / kTile, j / kTile) != cl.rank()) continue;  // only the owner's tile is home
      double s2 = 0;
      for (size_t k = 0; k < kN; ++k) s2 += va[i * kN + k] * vb[k * kN + j];
      EXPECT_EQ(vc[i * kN + j], s2) << i << ", " << j;
    }
}

// hcr::mpi's tiled Cholesky, solve and transposed gemm over 2-D block-cyclic tiles (edge tiles
// smaller) give what hcr::linalg gives on one runtime: the same tile kernels in the same order per
// tile. Each rank checks the tiles it owns.
TEST(Cluster, DistributedCholeskySolveAndGemmMatchOneRuntime) {
  constexpr size_t kN = 37, kTile = 8, kR = 3;
  const auto spd = [](size_t i, size_t j) {
    return i == j ? static_cast<double>(kN) + 1.0 : 1.0 / static_cast<double>(1 + i + j);
  };
  const auto fill = [&](Buffer<double>& a, Buffer<double>& b, Buffer<double>& g) {
    auto va = a.acquire(Access::write), vb = b.acquire(Access::write),
         vg = g.acquire(Access::write);
    for (size_t i = 0; i < kN; ++i) {
      for (size_t j = 0; j < kN; ++j) va(i, j) = spd(i, j);
      for (size_t j = 0; j < kR; ++j) vb(i, j) = static_cast<double>((i * 3 + j * 5) % 7) - 3;
      for (size_t j = 0; j < kN; ++j) vg(i, j) = static_cast<double>((i + 2 * j) % 5) - 2;
    }
  };
  // The reference: one runtime, hcr::linalg. C = G^T A_factor (whole matrices).
  Runtime ref_rt(test::cpu_config(1));
  auto ra = ref_rt.buffer<double>(kN, kN), rb = ref_rt.buffer<double>(kN, kR),
       rg = ref_rt.buffer<double>(kN, kN), rc = ref_rt.buffer<double>(kN, kN);
  fill(ra, rb, rg);
  linalg::potrf<double>(ref_rt, linalg::Uplo::lower, ra, kTile).get();
  linalg::potrs<double>(ref_rt, linalg::Uplo::lower, ra, rb, kTile).get();
  linalg::gemm<double>(ref_rt, linalg::Op::trans, linalg::Op::no_trans, 0.5, rg, ra, 0.0, rc, kTile)
      .get();
  const std::vector<double> want_a = ra.to_vector(), want_b = rb.to_vector(),
                            want_c = rc.to_vector();

  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  const int n = cl.size(), p = n >= 4 ? 2 : 1, q = n / p;
  auto a = rt.buffer<double>(kN, kN), b = rt.buffer<double>(kN, kR), g = rt.buffer<double>(kN, kN),
       c = rt.buffer<double>(kN, kN);
  fill(a, b, g);
  Tiles<double> ta = a.partition(kTile, kTile), tb = b.partition(kTile, kR),
                tg = g.partition(kTile, kTile), tc = c.partition(kTile, kTile);
  for (Tiles<double>* t : {&ta, &tb, &tg, &tc}) cl.distribute_2d(*t, p, q);
  mpi::potrf(cl, mpi::Uplo::lower, ta);
  mpi::potrs(cl, mpi::Uplo::lower, ta, tb);
  mpi::gemm(cl, mpi::Op::trans, mpi::Op::no_trans, 0.5, tg, ta, 0.0, tc);
  cl.wait_all();
  const mpi::Stats s = cl.stats();
  uint64_t exchanged = 0;
  for (const mpi::PeerStats& peer : s.peers) exchanged += peer.bytes_received;
  if (n > 1) {
    EXPECT_GT(exchanged, 0u) << "the ranks computed alone";
  }
  for (auto* m : {&a, &b, &g, &c}) m->unpartition().get();
  const auto own = [&](size_t i, size_t j) {
    return static_cast<int>((i / kTile) % static_cast<size_t>(p)) * q +
           static_cast<int>((j / kTile) % static_cast<size_t>(q));
  };
  const std::vector<double> got_a = a.to_vector(), got_b = b.to_vector(), got_c = c.to_vector();
  size_t checked = 0;
  for (size_t i = 0; i < kN; ++i)
    for (size_t j = 0; j < kN; ++j) {
      if (own(i, j) != cl.rank()) continue;
      ++checked;
      if (j <= i) {
        EXPECT_NEAR(got_a[i * kN + j], want_a[i * kN + j], 1e-12) << "L " << i << ", " << j;
      }
      EXPECT_NEAR(got_c[i * kN + j], want_c[i * kN + j], 1e-12) << "C " << i << ", " << j;
    }
  for (size_t i = 0; i < kN; ++i)
    for (size_t j = 0; j < kR; ++j)
      if (static_cast<int>((i / kTile) % static_cast<size_t>(p)) * q == cl.rank()) {  // 1 column
        EXPECT_NEAR(got_b[i * kR + j], want_b[i * kR + j], 1e-12) << "X " << i << ", " << j;
      }
  EXPECT_GT(checked, 0u);
}

// A mistake in the tile grids is refused on every rank, naming the tiles, before any task exists.
TEST(Cluster, DistributedLinalgRefusesMisfitTilesOnEveryRank) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  auto a = rt.buffer<double>(16, 24), b = rt.buffer<double>(16, 16);
  Tiles<double> ta = a.partition(8, 8), tb = b.partition(8, 8);
  cl.distribute_1d(ta);
  cl.distribute_1d(tb);
  try {
    mpi::potrf(cl, mpi::Uplo::lower, ta);
    ADD_FAILURE() << "a 2x3 tile grid was factored";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("hcr::mpi::potrf: A is 2x3 tiles"), std::string::npos)
        << e.what();
  }
  try {  // C = A B: 2x3 tiles times 2x2
    mpi::gemm(cl, mpi::Op::no_trans, mpi::Op::no_trans, 1.0, ta, tb, 0.0, tb);
    ADD_FAILURE() << "non-conforming grids were multiplied";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op(A) 2x3 tiles, op(B) 2x2 tiles"), std::string::npos)
        << e.what();
  }
  const mpi::Stats s = cl.stats();
  EXPECT_EQ(s.tasks_run + s.tasks_skipped, 0u);
  cl.wait_all();
  a.unpartition().get();
  b.unpartition().get();
}

// Tiles mapped by weight: shares in proportion to the weights (to within one tile), each rank's
// tiles spread over the grid, the same owners on every rank; measure_throughput gives every rank
// the same vector; bad weights are refused naming the rank.
TEST(Cluster, TilesAreMappedInProportionToThroughput) {
  Runtime rt(test::cpu_config(1));
  const std::vector<double> measured = mpi::measure_throughput(rt, MPI_COMM_WORLD, 32, 8);
  mpi::Cluster cl(rt);
  const int n = cl.size();
  ASSERT_EQ(measured.size(), static_cast<size_t>(n));
  for (double w : measured) EXPECT_GT(w, 0) << "a rank measured no throughput";
  std::vector<double> everyone(measured.size() * static_cast<size_t>(n));
  MPI_Allgather(measured.data(), n, MPI_DOUBLE, everyone.data(), n, MPI_DOUBLE, MPI_COMM_WORLD);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(everyone[static_cast<size_t>(r * n + i)], measured[static_cast<size_t>(i)])
          << "rank " << r << " saw another throughput for rank " << i;

  std::vector<double> weights(static_cast<size_t>(n), 1.0);
  weights[0] = 3.0;  // rank 0 three times the others
  auto m = rt.buffer<double>(40, 40);
  Tiles<double> t = m.partition(4, 4);  // 100 tiles
  cl.distribute_weighted(t, weights);
  std::vector<int> count(static_cast<size_t>(n));
  std::vector<std::set<size_t>> rows(static_cast<size_t>(n));
  for (size_t i = 0; i < 10; ++i)
    for (size_t j = 0; j < 10; ++j) {
      const int o = cl.owner(t(i, j));
      ++count[static_cast<size_t>(o)];
      rows[static_cast<size_t>(o)].insert(i);
    }
  const double total = 3.0 + (n - 1);
  for (int r = 0; r < n; ++r) {
    EXPECT_NEAR(count[static_cast<size_t>(r)], 100 * weights[static_cast<size_t>(r)] / total, 1.0)
        << "rank " << r;
    EXPECT_GE(rows[static_cast<size_t>(r)].size(), 5u) << "rank " << r << "'s tiles bunch up";
  }
  std::vector<int> all(static_cast<size_t>(n) * 100), mine;
  for (size_t i = 0; i < 10; ++i)
    for (size_t j = 0; j < 10; ++j) mine.push_back(cl.owner(t(i, j)));
  MPI_Allgather(mine.data(), 100, MPI_INT, all.data(), 100, MPI_INT, MPI_COMM_WORLD);
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + r * 100)) << "rank " << r;

  auto bad = rt.buffer<double>(4, 4);
  Tiles<double> tb = bad.partition(4, 4);
  std::vector<double> negative(static_cast<size_t>(n), 1.0);
  if (!negative.empty()) negative.back() = -1;
  for (const auto& [w, text] :
       {std::pair{std::vector<double>(static_cast<size_t>(n) + 1, 1.0), std::string("weights for")},
        std::pair{negative, "the weight of rank " + std::to_string(n - 1)},
        std::pair{std::vector<double>(static_cast<size_t>(n), 0.0),
                  std::string("every weight is 0")}}) {
    Error e = test::expect_error([&] { cl.distribute_weighted(tb, w); });
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
  cl.wait_all();
  m.unpartition().get();
  bad.unpartition().get();
}

// Cost models shared between ranks (each rank here has a model directory of its own, as ranks on
// different hosts have): what rank 0 learned, the others start from; a file a rank has is not
// replaced.
TEST(Cluster, RanksStartWarmFromModelsLearnedElsewhere) {
  test::TempDir base;  // each rank's own
  Config c = test::cpu_config(1, "dmda");
  c.model_dir = base.path().string();
  const std::string dir = sched::model_directory(c);
  const int rank = world_rank();
  if (rank == 0) {  // rank 0 learns gemm_f64 on its CPU; the runtime saves the model as it ends
    Runtime rt(c);
    Kernel gemm = rt.kernel("gemm_f64");
    auto a = rt.buffer<double>(48, 48), b = rt.buffer<double>(48, 48);
    const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0, HCR_NO_TRANS, HCR_NO_TRANS};
    for (int i = 0; i < 12; ++i) {
      auto out = rt.buffer<double>(48, 48);
      rt.submit(Task(gemm).read(a).read(b).write(out).param(p));
    }
    rt.wait_all();
  }
  auto cells = [&] {
    std::vector<std::string> warnings;
    size_t n = 0;
    for (const sched::ModelRow& r : sched::read_models(dir, warnings))
      if (r.kernel == "gemm_f64" && r.samples > 0) ++n;
    return n;
  };
  const size_t before = cells();
  const size_t adopted = mpi::share_models(c, MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_GT(before, 0u) << "rank 0 learned nothing";
    EXPECT_EQ(adopted, 0u);
  } else {
    EXPECT_EQ(before, 0u);
    EXPECT_EQ(adopted, 1u);
    EXPECT_GT(cells(), 0u) << "rank " << rank << " did not start from rank 0's model";
  }
  // Every rank has the file now: a second exchange adopts nothing (and replaces nothing).
  EXPECT_EQ(mpi::share_models(c, MPI_COMM_WORLD), 0u) << "a second exchange adopted again";
}

// A model file another rank sends is adopted only once the model loader takes it whole: a corrupt
// one (a bad cell, cut short, an architecture its name does not say) is refused with a warning
// naming the rank it came from and why, and the rank keeps its own models; good ones still come.
TEST(Cluster, ACorruptModelFromAnotherRankIsRefused) {
  test::TempDir base;  // each rank's own
  Config c = test::cpu_config(1, "dmda");
  c.model_dir = base.path().string();
  const std::string dir = sched::model_directory(c);
  std::filesystem::create_directories(dir);
  const int rank = world_rank();
  auto model = [](const std::string& arch, const std::string& sample) {
    return "format = 'hcr-cost-model'\nversion = 1\narch = '" + arch +
           "'\n[[cell]]\nkernel = 'k'\nfootprint = '0x1'\nsize = 1.0\ncount = 1\nsamples = [" +
           sample + "]\n";
  };
  auto slurp = [&](const std::string& name) {
    std::ifstream in(std::filesystem::path(dir) / name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // Every rank has its own "shared" model (rank 0's is corrupt: no rank takes it anyway).
  const std::string own = model("shared", rank == 0 ? "-1.0" : std::to_string(rank) + ".0");
  std::ofstream(std::filesystem::path(dir) / "shared.model.toml") << own;
  if (rank == 0) {
    std::ofstream(std::filesystem::path(dir) / "good.model.toml") << model("good", "0.5");
    std::ofstream(std::filesystem::path(dir) / "bad.model.toml") << model("bad", "-4.0");
    std::ofstream(std::filesystem::path(dir) / "other.model.toml") << model("elsewhere", "0.5");
    const std::string whole = model("cut", "0.5");
    std::ofstream(std::filesystem::path(dir) / "cut.model.toml") << whole.substr(0, 70);
  }
  test::LogCapture log(LogLevel::warn);
  const size_t adopted = mpi::share_models(c, MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(adopted, 0u);
  } else {
    EXPECT_EQ(adopted, 1u) << "only good.model.toml is a model";
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "good.model.toml"));
    for (const char* name : {"bad.model.toml", "other.model.toml", "cut.model.toml"})
      EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir) / name))
          << name << " adopted";
    const std::string from = "rank " + std::to_string(rank) + " refuses rank 0's ";
    EXPECT_TRUE(log.contains(from + "bad.model.toml"));
    EXPECT_TRUE(log.contains("bad.model.toml:4: samples must be non-negative"));
    EXPECT_TRUE(log.contains(from + "other.model.toml"));
    EXPECT_TRUE(log.contains("holds architecture 'elsewhere'"));
    EXPECT_TRUE(log.contains(from + "cut.model.toml"));
    EXPECT_EQ(slurp("shared.model.toml"), own) << "its own model was replaced";
    std::vector<std::string> warnings;
    const auto rows = sched::read_models(dir, warnings);
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    EXPECT_EQ(rows.size(), 2u);  // its own and the good one
  }
}

// Data that arrives before its receive can take it waits in a temporary; under a 1-byte cap only
// one such temporary exists at a time, and everything still arrives.
TEST(Cluster, EarlyArrivalsUnderATinyMemoryCap) {
  Runtime rt(test::cpu_config(1));
  mpi::Options o;
  o.early_arrival_cap = 1;
  o.early_arrival_grace = std::chrono::milliseconds(60000);  // nothing over the cap here
  mpi::Cluster cl(rt, MPI_COMM_WORLD, o);
  Kernel mix = mix_kernel(rt);
  constexpr size_t kCount = 6, kLen = 16;
  std::vector<Buffer<int64_t>> xs;
  auto sink = cl.buffer<int64_t>(1, kLen, 1);
  for (size_t i = 0; i < kCount; ++i) xs.push_back(cl.buffer<int64_t>(1, kLen, 0));
  for (auto& x : xs)  // rank 1 reads every x: version 0 goes there
    cl.submit(mpi::Task(mix).read_write(sink).read(x).param(uint64_t{0}).param(uint64_t{0}));
  cl.wait_all();  // (phase 1 done: what is measured below is phase 2's)
  const uint64_t over_cap_before = cl.stats().over_cap;
  for (auto& x : xs)  // rank 0 writes them: x = 3x + 1
    cl.submit(mpi::Task(mix).read_write(x).param(uint64_t{1}).param(uint64_t{0}));
  std::vector<HostView<int64_t>> held;
  if (cl.rank() == 1)  // rank 1's copies are held: the new versions cannot be received into them
    for (auto& x : xs) held.push_back(x.acquire(Access::read));
  for (auto& x : xs)  // rank 1 reads them again
    cl.submit(mpi::Task(mix).read_write(sink).read(x).param(uint64_t{0}).param(uint64_t{0}));
  if (cl.rank() == 1) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (cl.stats().early_arrivals == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GE(cl.stats().early_arrivals, 1u);
    held.clear();
  }
  cl.wait_all();
  const mpi::Stats s = cl.stats();
  if (cl.rank() == 1) {
    for (auto& x : xs) EXPECT_EQ(u64(x.to_vector()), std::vector<uint64_t>(kLen, 1));
    uint64_t want = 0;  // sink = 3 sink + 2 x, with x = 0 six times, then x = 1 six times
    for (size_t i = 0; i < kCount; ++i) want = want * 3 + 2;
    EXPECT_EQ(u64(sink.to_vector()), std::vector<uint64_t>(kLen, want));
    EXPECT_EQ(s.over_cap, over_cap_before);  // phase 2 kept to the cap: one arrival at a time
    if (s.over_cap == 0) {
      EXPECT_LE(s.early_bytes_peak, kLen * sizeof(uint64_t));
    }
    EXPECT_EQ(s.peers[0].messages_received, 2 * kCount);
  }
}

// Rank 1 skips a submit: rank 0, which waits for its data, fails that receive after the timeout
// with an error naming rank 1 and the buffer, and the task that needed the data fails with it.
// wait_all on every rank says why first: the ranks submitted different tasks.
TEST(Cluster, ATimeoutNamesTheRankThatNeverSent) {
  Runtime rt(test::cpu_config(1));
  mpi::Options o;
  o.timeout = std::chrono::milliseconds(300);
  mpi::Cluster cl(rt, MPI_COMM_WORLD, o);
  Kernel mix = mix_kernel(rt);
  auto x = cl.buffer<int64_t>(1, 4, 1);
  auto y = cl.buffer<int64_t>(1, 4, 0);
  Event e;
  if (cl.rank() != 1)
    e = cl.submit(mpi::Task(mix).read_write(y).read(x).param(uint64_t{0}).param(uint64_t{0}));
  Error err = test::expect_error([&] { cl.wait_all(); });
  EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
  const std::string what = err.what();
  EXPECT_NE(what.find("Tasks submitted in all: 0 on rank 1; 1 on rank"), std::string::npos) << what;
  if (cl.rank() == 0) {
    EXPECT_NE(what.find("On this rank that left: "), std::string::npos) << what;
    EXPECT_NE(what.find("no data from rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("buffer 0"), std::string::npos) << what;
    Error task_err = test::expect_error([&] { e.get(); });
    EXPECT_EQ(task_err.code(), ErrorCode::dependency);
    EXPECT_NE(std::string(task_err.what()).find("no data from rank 1"), std::string::npos);
  }
}

// Ranks that register a buffer with different owners each take the task that writes it for their
// own: it ran on every rank, and the job ended as if nothing were wrong. wait_all fails on every
// rank naming the buffer and each rank's owner, and so does every wait_all after.
TEST(Cluster, RanksThatDisagreeOnAnOwnerFailLoudly) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel mix = mix_kernel(rt);
  auto y = cl.buffer<int64_t>(1, 4, 0);  // buffer 0, as every rank sees it
  auto x = rt.buffer<int64_t>(1, 4);
  cl.distribute(x, cl.rank());  // buffer 1: every rank takes it for its own
  cl.submit(mpi::Task(mix).read_write(x).param(uint64_t{1}).param(uint64_t{0}));
  Error e = test::expect_error([&] { cl.wait_all(); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  const std::string what = e.what();
  EXPECT_NE(what.find("hcr::mpi rank " + std::to_string(cl.rank()) + ": the ranks' calls differ"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("Buffer 1 (1x4 i64 here): its owner is rank 0 on rank 0; rank 1 on rank 1"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("tasks ran on more than one rank"), std::string::npos) << what;
  EXPECT_EQ(cl.stats().tasks_run, 1u) << "every rank ran the task";
  EXPECT_EQ(std::string(test::expect_error([&] { cl.wait_all(); }).what()), what);
}

// Ranks that place a task differently (each names itself in on_rank) each run it: wait_all fails
// on every rank, naming the tasks since the last wait_all that agreed.
TEST(Cluster, RanksThatDisagreeOnWhereATaskRunsFailLoudly) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel mix = mix_kernel(rt);
  Kernel nothing = rt.kernel("nothing").cpu([](TaskContext&) {});
  auto x = cl.buffer<int64_t>(1, 4, 0);
  cl.submit(mpi::Task(mix).read_write(x).param(uint64_t{1}).param(uint64_t{0}));  // task 0
  cl.wait_all();                                                                  // agreed
  cl.submit(mpi::Task(mix).read_write(x).param(uint64_t{1}).param(uint64_t{0}));  // task 1
  cl.submit(mpi::Task(nothing).on_rank(cl.rank()));                               // task 2
  Error e = test::expect_error([&] { cl.wait_all(); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  const std::string what = e.what();
  EXPECT_NE(what.find("found by wait_all #2"), std::string::npos) << what;
  EXPECT_NE(what.find("Tasks 1 to 2 (by submission order): the ranks run them elsewhere"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("Tasks run since wait_all #1: 1 on rank"), std::string::npos) << what;
  EXPECT_NE(what.find("; 2 on rank 0 (" + std::to_string(cl.size() + 1) +
                      " in all, for 2 "
                      "submitted)"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("tasks ran on more than one rank"), std::string::npos) << what;
}

// A writer that failed on one rank fails the reader on another, with the writer's error.
TEST(Cluster, AFailedWriterFailsItsRemoteReader) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel mix = mix_kernel(rt);
  Kernel bad = rt.kernel("bad").cpu(
      [](TaskContext&) { throw Error(ErrorCode::invalid_argument, "the writer gave up"); });
  auto x = cl.buffer<int64_t>(1, 4, 0);
  auto y = cl.buffer<int64_t>(1, 4, 1);
  Event w = cl.submit(mpi::Task(bad).write(x));
  Event r = cl.submit(mpi::Task(mix).read_write(y).read(x).param(uint64_t{0}).param(uint64_t{0}));
  if (cl.rank() == 1) {
    Error err = test::expect_error([&] { cl.wait_all(); });
    EXPECT_NE(std::string(err.what()).find("the writer gave up"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("rank 0"), std::string::npos) << err.what();
    Error task_err = test::expect_error([&] { r.get(); });
    EXPECT_EQ(task_err.code(), ErrorCode::dependency);
  } else {
    cl.wait_all();
  }
  if (cl.rank() == 0) {
    EXPECT_EQ(test::expect_error([&] { w.get(); }).code(), ErrorCode::invalid_argument);
  }
}

// A rank that neither runs a task nor sends or receives for it only updates its record: no
// allocation (the task builder keeps arguments and parameters inline, the lookup allocates
// nothing).
TEST(Cluster, ARankNotInvolvedSkipsATaskWithoutAllocating) {
  if (!HCR_TEST_COUNTS_ALLOCATIONS) GTEST_SKIP() << "sanitizer builds replace operator new";
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel mix = mix_kernel(rt);
  auto x = cl.buffer<int64_t>(1, 4, 0);
  auto y = cl.buffer<int64_t>(1, 4, 0);
  auto z = cl.buffer<int64_t>(1, 4, 0);
  constexpr int kTasks = 1000;
  allocations = 0;
  if (cl.rank() != 0) counting_allocations = true;  // rank 0 runs them (it allocates tasks)
  for (int i = 0; i < kTasks; ++i)
    cl.submit(mpi::Task(mix).read_write(x).read(y).read(z).param(uint64_t{1}).param(uint64_t{0}));
  counting_allocations = false;
  if (cl.rank() != 0) {
    EXPECT_EQ(allocations, 0u);
    EXPECT_EQ(cl.stats().tasks_skipped, static_cast<uint64_t>(kTasks));
  }
  cl.wait_all();
}

TEST(Cluster, MisuseIsRefusedWithTheValueAtFault) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  Kernel mix = mix_kernel(rt);
  auto x = rt.buffer<int64_t>(1, 4);
  Error e = test::expect_error([&] { cl.distribute(x, cl.size()); });
  EXPECT_NE(std::string(e.what()).find("owner rank " + std::to_string(cl.size())),
            std::string::npos);
  e = test::expect_error([&] { cl.submit(mpi::Task(mix).read_write(x)); });
  EXPECT_NE(std::string(e.what()).find("never distributed"), std::string::npos) << e.what();
  cl.distribute(x, 0);
  e = test::expect_error([&] { cl.distribute(x, 0); });
  EXPECT_NE(std::string(e.what()).find("registered already (as buffer 0)"), std::string::npos);
  e = test::expect_error([&] { cl.submit(mpi::Task(mix).read_write(x).on_rank(99)); });
  EXPECT_NE(std::string(e.what()).find("on_rank(99)"), std::string::npos);
  cl.wait_all();
}

TEST(Cluster, BlockCyclicHelpersAssignOwnersInRegistrationOrder) {
  Runtime rt(test::cpu_config(1));
  mpi::Cluster cl(rt);
  const size_t n = static_cast<size_t>(cl.size());
  auto a = rt.buffer<float>(12, 16), b = rt.buffer<float>(12, 16), c = rt.buffer<float>(12, 16);
  Tiles<float> ta = a.partition(4, 4), tb = b.partition(4, 4), tc = c.partition(4, 4);  // 3x4
  cl.distribute_1d(ta);
  cl.distribute_1d(tb, /*by_rows=*/true);
  const int p = cl.size() >= 4 ? 2 : 1, q = cl.size() / p;
  cl.distribute_2d(tc, p, q);
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(cl.owner(ta(i, j)), static_cast<int>((i * 4 + j) % n)) << i << "," << j;
      EXPECT_EQ(cl.owner(tb(i, j)), static_cast<int>((i + j * 3) % n)) << i << "," << j;
      EXPECT_EQ(cl.owner(tc(i, j)), static_cast<int>(i % static_cast<size_t>(p)) * q +
                                        static_cast<int>(j % static_cast<size_t>(q)));
    }
  auto d = rt.buffer<float>(4, 4);
  Tiles<float> td = d.partition(2, 2);
  Error e = test::expect_error([&] { cl.distribute_2d(td, cl.size(), 2); });
  EXPECT_NE(std::string(e.what()).find("does not fit the " + std::to_string(cl.size()) + " ranks"),
            std::string::npos)
      << e.what();
  cl.wait_all();
}

// The ranks of this node split its cores: shares add up to the node's cores (or each keeps the
// cores the launcher bound it to), cuda gets its share of GPUs, explicit options are kept.
TEST(Cluster, SplitNodeSharesCoresAndGpus) {
  Config c = test::cpu_config(0);  // threads = 0: all cores, which split_node replaces
  c.backends.push_back({"cuda", true, {}, "test"});
  mpi::NodeShare share;
  Config out = mpi::split_node(c, MPI_COMM_WORLD, &share);
  EXPECT_GE(share.threads, 1u);
  EXPECT_EQ(share.local_size, world_size());  // mpirun on one host
  EXPECT_EQ(share.local_rank, world_rank());
  auto option = [](const BackendConfig& b, const std::string& key) {
    for (auto& [k, v] : b.options)
      if (k == key) return v;
    return std::string("(unset)");
  };
  EXPECT_EQ(option(out.backends[0], "threads"), std::to_string(share.threads));
  EXPECT_EQ(option(out.backends[1], "devices"),
            "share:" + std::to_string(share.local_rank) + "/" + std::to_string(share.local_size));
  // A share never exceeds the cores this rank may use, and together they do not exceed the
  // machine (each rank gets at least one).
  EXPECT_LE(share.threads, std::max(share.cores, 1u));
  unsigned total = 0;
  MPI_Allreduce(&share.threads, &total, 1, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_LE(total,
            std::max(std::thread::hardware_concurrency(), static_cast<unsigned>(world_size())));
  Config kept = test::cpu_config(3);
  EXPECT_EQ(option(mpi::split_node(kept).backends[0], "threads"), "3");
  Config none;
  EXPECT_EQ(test::expect_error([&] { mpi::split_node(none); }).code(), ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace hcr

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  // Every rank's verdict: mpirun fails when any rank does, and so does each rank here.
  const bool all_ok = hcr::all_ranks(rc == 0);
#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer looks now, while Open MPI is whole: MPI_Finalize unloads its components, and
  // what they keep for the process's life would then show as leaks of "<unknown module>" that no
  // suppression can name. Everything of hcr's (clusters, runtimes, buffers) is gone by here.
  __lsan_do_leak_check();
#endif
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
