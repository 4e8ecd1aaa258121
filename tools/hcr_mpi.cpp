// hcr-mpi: hcr's main jobs across the ranks of an MPI job, over hcr::mpi.
//
//   mpirun -np 4 hcr-mpi run --op potrf --size 4096 --tile 512 [--dtype f64] [--grid 2x2]
//                            [--repeat 3] [--config FILE] [--mapping cyclic|throughput]
//                            [--trace FILE] [--no-check]
//
// Every rank runs a Runtime over its share of the node (hcr::mpi::split_node), starting from the
// cost models of every rank's host (hcr::mpi::share_models), registers the matrices' tiles 2-D
// block-cyclic over a p x q grid of ranks (--grid; default the squarest p <= q), and submits the
// same tiled job (gemm: C = A B; potrf: the Cholesky factor of a random SPD matrix).
// --mapping throughput: the tiles go to ranks in proportion to their measured throughput instead
// (hcr::mpi::measure_throughput, then distribute_weighted). --trace FILE: one Chrome/Perfetto
// trace of every rank's devices and links, a track group per rank ("rank R: ..."), on one time
// line (zero when the ranks passed a barrier after starting). Each repetition starts from the
// same data and is timed between barriers. Rank 0 prints the job, the best and mean times, then
// per rank: tasks run, device busy time, and the bytes it sent to each other rank; then the check
// of the last repetition on the gathered result (gemm: Freivalds; potrf: ||A - L L^T|| / ||A||
// against 30 n eps). Exit status 0 when every rank ran and the check passed, 3 when the check
// failed, 1 on an error (named by the rank that had it).
#include <hcr/hcr.hpp>
#include <hcr/mpi.hpp>
#include <hcr/mpi_linalg.hpp>

#include "matrix_check.hpp"
#include "safe_file.hpp"

#include <nlohmann/json.hpp>

#include <mpi.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using hcr::cli::cholesky_residual;
using hcr::cli::fill_random;
using hcr::cli::fill_spd;
using hcr::cli::freivalds;

struct Options {
  std::string op = "gemm", dtype = "f64", config, mapping = "cyclic", trace;
  size_t n = 2048, tile = 512;
  int p = 0, q = 0;
  unsigned repeat = 1;
  bool check = true;
};

[[noreturn]] void usage_error(const std::string& what) {
  throw std::invalid_argument(what + " (usage: hcr-mpi run --op gemm|potrf --size N --tile T "
                                     "[--dtype f32|f64] [--grid PxQ] [--repeat R] [--config FILE] "
                                     "[--mapping cyclic|throughput] [--trace FILE] [--no-check])");
}

size_t number(const std::string& flag, const std::string& v) {
  size_t pos = 0;
  unsigned long long x = 0;
  try {
    x = std::stoull(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != v.size() || v.empty() || x == 0)
    usage_error(flag + " '" + v + "': a positive integer is needed");
  return static_cast<size_t>(x);
}

Options parse(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "run") usage_error("the command is 'run'");
  Options o;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--op") o.op = value();
    else if (a == "--dtype") o.dtype = value();
    else if (a == "--config") o.config = value();
    else if (a == "--mapping") o.mapping = value();
    else if (a == "--trace") o.trace = value();
    else if (a == "--size") o.n = number(a, value());
    else if (a == "--tile") o.tile = number(a, value());
    else if (a == "--repeat") o.repeat = static_cast<unsigned>(number(a, value()));
    else if (a == "--no-check") o.check = false;
    else if (a == "--grid") {
      const std::string g = value();
      const size_t x = g.find('x');
      if (x == std::string::npos) usage_error("--grid '" + g + "': expected PxQ");
      o.p = static_cast<int>(number(a, g.substr(0, x)));
      o.q = static_cast<int>(number(a, g.substr(x + 1)));
    } else {
      usage_error("unknown option " + a);
    }
  }
  if (o.op != "gemm" && o.op != "potrf") usage_error("--op '" + o.op + "' is not gemm or potrf");
  if (o.mapping != "cyclic" && o.mapping != "throughput")
    usage_error("--mapping '" + o.mapping + "' is not cyclic or throughput");
  if (o.dtype != "f32" && o.dtype != "f64")
    usage_error("--dtype '" + o.dtype + "' is not f32 or f64");
  return o;
}

double now() { return MPI_Wtime(); }

template <class T>
MPI_Datatype mpi_type() {
  return sizeof(T) == 4 ? MPI_FLOAT : MPI_DOUBLE;
}

// Rank 0 gets the whole matrix: each rank contributes the elements of the tiles it owns (zeros
// elsewhere), summed.
template <class T>
std::vector<T> gather(const hcr::Buffer<T>& m, const std::vector<int>& owners, size_t tile,
                      int rank) {
  const size_t n = m.rows(), grid = (n + tile - 1) / tile;
  std::vector<T> mine = m.to_vector(), all(rank == 0 ? n * n : 0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (owners[(i / tile) * grid + j / tile] != rank) mine[i * n + j] = 0;
  MPI_Reduce(mine.data(), all.data(), static_cast<int>(n * n), mpi_type<T>(), MPI_SUM, 0,
             MPI_COMM_WORLD);
  return all;
}

// Rank 0 writes one trace of every rank's: each rank's own (Runtime::write_trace, into a
// temporary beside `path`) gathered, its tracks moved to a group per rank (pid + rank * 10^6,
// names prefixed "rank R: ") and its times shifted to the common zero (`zero`: the seconds since
// this rank's runtime started at the barrier every rank passed).
void merge_traces(const hcr::Runtime& rt, const std::string& path, double zero, int rank,
                  int size) {
  const std::string mine_path = path + ".rank" + std::to_string(rank) + ".tmp";
  std::string mine;
  try {
    rt.write_trace(mine_path);
    mine = hcr::files::read_file(mine_path, size_t{1} << 30);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hcr-mpi: rank %d: its trace is left out: %s\n", rank, e.what());
    mine.clear();
  }
  std::remove(mine_path.c_str());
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<double> zeros(static_cast<size_t>(size));
  MPI_Gather(&zero, 1, MPI_DOUBLE, zeros.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = static_cast<int>(total);
    total += static_cast<size_t>(sizes[static_cast<size_t>(r)]);
  }
  std::string all(rank == 0 ? total : 0, '\0');
  MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  if (rank != 0) return;
  using nlohmann::json;
  json merged = {
      {"traceEvents", json::array()},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"producer", "hcr-mpi"}, {"ranks", size}, {"devices", json::array()}}}};
  for (int r = 0; r < size; ++r) {
    if (sizes[static_cast<size_t>(r)] == 0) continue;
    json t = json::parse(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                    static_cast<size_t>(sizes[static_cast<size_t>(r)])),
                         nullptr, false);
    if (t.is_discarded() || !t.contains("traceEvents")) {
      std::fprintf(stderr, "hcr-mpi: rank %d's trace could not be read: left out\n", r);
      continue;
    }
    const double shift = zeros[static_cast<size_t>(r)] * 1e6;
    if (t.contains("otherData") && t["otherData"].contains("devices"))
      for (json d : t["otherData"]["devices"]) {  // as `hcr trace summary` reads them
        d["id"] = d.value("id", int64_t{0}) + int64_t{r} * 1000000;
        d["name"] = "rank " + std::to_string(r) + ": " + d.value("name", "");
        merged["otherData"]["devices"].push_back(std::move(d));
      }
    for (json& e : t["traceEvents"]) {
      if (e.contains("pid")) e["pid"] = e["pid"].get<int64_t>() + int64_t{r} * 1000000;
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() - shift;
      if (e.value("name", "") == "process_name" && e.contains("args"))
        e["args"]["name"] = "rank " + std::to_string(r) + ": " + e["args"].value("name", "");
      if (e.value("name", "") == "process_sort_index" && e.contains("args"))
        e["args"]["sort_index"] = e["args"].value("sort_index", 0) + r * 1000;
      merged["traceEvents"].push_back(std::move(e));
    }
  }
  hcr::files::write_file(path, merged.dump());
  std::printf("trace: %s (every rank, a track group each; open in https://ui.perfetto.dev)\n",
              path.c_str());
}

template <class T>
int job(const Options& o, hcr::Runtime& rt, hcr::mpi::Cluster& cl,
        const std::vector<double>& weights) {
  const int rank = cl.rank(), size = cl.size();
  const size_t n = o.n, tile = o.tile;
  std::vector<T> a0(n * n), b0;
  if (o.op == "potrf") {
    fill_spd(a0.data(), n, 3);
  } else {
    fill_random(a0.data(), n, n, n, 1);
    b0.resize(n * n);
    fill_random(b0.data(), n, n, n, 2);
  }
  auto a = rt.buffer<T>(n, n, hcr::uninitialized), b = rt.buffer<T>(n, n, hcr::uninitialized),
       c = rt.buffer<T>(n, n, hcr::uninitialized);
  hcr::Tiles<T> ta = a.partition(tile, tile), tb = b.partition(tile, tile),
                tc = c.partition(tile, tile);
  auto place = [&](const hcr::Tiles<T>& t) {
    if (weights.empty()) cl.distribute_2d(t, o.p, o.q);
    else cl.distribute_weighted(t, weights);
  };
  place(ta);
  if (o.op == "gemm") {
    place(tb);
    place(tc);
  }
  const size_t grid = (n + tile - 1) / tile;
  const uint64_t tasks = o.op == "gemm"
                             ? grid * grid * grid
                             : grid + grid * (grid - 1) + grid * (grid - 1) * (grid - 2) / 6;
  if (rank == 0) {
    std::string mapping = std::to_string(o.p) + "x" + std::to_string(o.q) + " block-cyclic";
    if (!weights.empty()) {
      mapping = "by measured throughput, tile gemms/s:";
      for (double w : weights)
        mapping += " " + std::to_string(static_cast<long long>(std::lround(w)));
    }
    std::printf("job: %s%s n=%zu tile=%zu over %d ranks (%s): %llu tasks, %u repetition(s)\n",
                sizeof(T) == 4 ? "s" : "d", o.op.c_str(), n, tile, size, mapping.c_str(),
                static_cast<unsigned long long>(tasks), o.repeat);
  }
  // Each tile's start value, written by a task of the cluster (on the tile's owner, from that
  // rank's copy of the matrix): the write is a new version, so copies of the last repetition's
  // tiles cached on other ranks are not used again.
  hcr::Kernel loader = rt.kernel(sizeof(T) == 4 ? "hcr_mpi_load_f32" : "hcr_mpi_load_f64")
                           .cpu([](hcr::TaskContext& ctx) {
                             auto t = ctx.arg<T>(0);
                             const T* src = ctx.param<const T*>(0);
                             const size_t ld = ctx.param<size_t>(1);
                             for (size_t r = 0; r < t.rows; ++r)
                               std::memcpy(&t(r, 0), src + r * ld, t.cols * sizeof(T));
                           });
  auto load = [&](const hcr::Tiles<T>& t, const std::vector<T>& from) {
    for (size_t i = 0; i < t.rows(); ++i)
      for (size_t j = 0; j < t.cols(); ++j)
        cl.submit(
            hcr::mpi::Task(loader).write(t(i, j)).param(&from[i * tile * n + j * tile]).param(n));
  };
  // The traces' common zero: the instant every rank leaves this barrier.
  MPI_Barrier(MPI_COMM_WORLD);
  const double zero = rt.stats().wall_seconds;
  if (!o.trace.empty()) rt.start_trace();
  double best = std::numeric_limits<double>::infinity(), total = 0;
  for (unsigned r = 0; r < o.repeat; ++r) {
    load(ta, a0);
    if (o.op == "gemm") load(tb, b0);
    cl.wait_all();
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    if (o.op == "gemm")
      hcr::mpi::gemm<T>(cl, hcr::mpi::Op::no_trans, hcr::mpi::Op::no_trans, 1.0, ta, tb, 0.0, tc);
    else hcr::mpi::potrf<T>(cl, hcr::mpi::Uplo::lower, ta);
    cl.wait_all();
    MPI_Barrier(MPI_COMM_WORLD);
    const double s = now() - t0;
    best = std::min(best, s);
    total += s;
  }
  if (!o.trace.empty()) {
    rt.stop_trace();
    merge_traces(rt, o.trace, zero, rank, size);
  }
  const double flops = o.op == "gemm" ? 2.0 * n * n * n : static_cast<double>(n) * n * n / 3.0;
  if (rank == 0)
    std::printf("\ntime: best %.4f s, mean %.4f s   rate: %.1f GFLOP/s (best)\n", best,
                total / o.repeat, flops / best * 1e-9);

  // Per rank: tasks, busy time, bytes to each peer (rank 0 prints them all).
  const hcr::mpi::Stats st = cl.stats();
  const hcr::RuntimeStats rs = rt.stats();
  double busy = 0;
  for (const auto& d : rs.devices) busy += d.busy_seconds;
  std::vector<double> row{static_cast<double>(st.tasks_run), busy};
  for (const auto& peer : st.peers) row.push_back(static_cast<double>(peer.bytes_sent));
  std::vector<double> rows(rank == 0 ? row.size() * static_cast<size_t>(size) : 0);
  MPI_Gather(row.data(), static_cast<int>(row.size()), MPI_DOUBLE, rows.data(),
             static_cast<int>(row.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("\nper rank (all repetitions): tasks run, device busy seconds, MiB sent to rank "
                "0..%d\n",
                size - 1);
    double all_bytes = 0;
    for (int r = 0; r < size; ++r) {
      const double* x = &rows[static_cast<size_t>(r) * row.size()];
      std::printf("  rank %-3d %8.0f tasks %9.3f s  ", r, x[0], x[1]);
      for (int peer = 0; peer < size; ++peer) {
        std::printf(" %9.2f", x[2 + peer] / (1 << 20));
        all_bytes += x[2 + peer];
      }
      std::printf("\n");
    }
    std::printf("  exchanged in all: %.2f MiB per repetition", all_bytes / o.repeat / (1 << 20));
    // The least any owner-computes placement moves, by replaying the job's tasks: each runs on
    // the owner of the tile it writes, and a tile version crosses once to each rank that reads
    // it and lacks it.
    std::map<const hcr::detail::BufferState*, std::vector<int>> holders;  // of each tile's version
    double least = 0;
    auto read = [&](const hcr::Buffer<T>& x, int executor) {
      std::vector<int>& h = holders[x.state()];
      if (h.empty()) h.push_back(cl.owner(x));  // the loaded version, home
      if (std::find(h.begin(), h.end(), executor) == h.end()) {
        h.push_back(executor);
        least += static_cast<double>(x.bytes());
      }
    };
    auto write = [&](const hcr::Buffer<T>& x) {  // read-write, on its owner
      const int e = cl.owner(x);
      read(x, e);
      holders[x.state()] = {e};
      return e;
    };
    if (o.op == "gemm") {
      for (size_t i = 0; i < grid; ++i)
        for (size_t j = 0; j < grid; ++j)
          for (size_t k = 0; k < grid; ++k) {
            const int e = write(tc(i, j));
            read(ta(i, k), e);
            read(tb(k, j), e);
          }
    } else {
      for (size_t k = 0; k < grid; ++k) {
        write(ta(k, k));
        for (size_t m = k + 1; m < grid; ++m) read(ta(k, k), write(ta(m, k)));
        for (size_t j = k + 1; j < grid; ++j) {
          read(ta(j, k), write(ta(j, j)));
          for (size_t m = j + 1; m < grid; ++m) {
            const int e = write(ta(m, j));
            read(ta(m, k), e);
            read(ta(j, k), e);
          }
        }
      }
    }
    std::printf(" (the least possible: %.2f MiB)\n", least / (1 << 20));
  }

  if (!o.check) return 0;
  auto owners = [&, grid](const hcr::Tiles<T>& t) {  // read before the tiles are joined
    std::vector<int> v(grid * grid);
    for (size_t i = 0; i < grid; ++i)
      for (size_t j = 0; j < grid; ++j) v[i * grid + j] = cl.owner(t(i, j));
    return v;
  };
  const std::vector<int> owners_a = owners(ta), owners_c = o.op == "gemm" ? owners(tc) : owners_a;
  for (auto* m : {&a, &b, &c}) m->unpartition().get();
  int ok = 1;
  if (o.op == "gemm") {
    const std::vector<T> got = gather(c, owners_c, tile, rank);
    if (rank == 0) {
      const double err = freivalds(a0.data(), b0.data(), got.data(), n, n, n, n, n, n);
      ok = err <= 1.0;
      std::printf("\ncheck: Freivalds against A(Bx), 2 random vectors: error %.3g of the rounding "
                  "bound -> %s\n",
                  err, ok ? "OK" : "WRONG");
    }
  } else {
    const std::vector<T> got = gather(a, owners_a, tile, rank);
    if (rank == 0) {
      const double residual = cholesky_residual(a0.data(), got.data(), n, 4);
      const double bound = 30.0 * static_cast<double>(n) * std::numeric_limits<T>::epsilon();
      ok = residual <= bound;
      std::printf("\ncheck: ||A - L L^T||_F / ||A||_F = %.3g (from 4 random probes): %.3g of the "
                  "bound 30 n eps -> %s\n",
                  residual, residual / bound, ok ? "OK" : "WRONG");
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 0;
  try {
    Options o = parse(argc, argv);
    if (o.p == 0) {  // the squarest grid p x q = size, p <= q
      o.p = static_cast<int>(std::sqrt(static_cast<double>(size)));
      while (size % o.p != 0) --o.p;
      o.q = size / o.p;
    }
    if (o.p * o.q > size)
      usage_error("--grid " + std::to_string(o.p) + "x" + std::to_string(o.q) + " needs " +
                  std::to_string(o.p * o.q) + " ranks, the job has " + std::to_string(size));
    hcr::Config config = o.config.empty() ? hcr::Config{} : hcr::Config::load(o.config);
    if (config.backends.empty()) {  // the node's CPU cores and GPUs, split between its ranks
      config.backends.push_back({"cpu", true, {}, "hcr-mpi"});
      config.backends.push_back({"cuda", true, {}, "hcr-mpi"});
    }
    config.counters = true;  // device busy time per rank, whatever the policy
    hcr::mpi::NodeShare share;
    config = hcr::mpi::split_node(std::move(config), MPI_COMM_WORLD, &share);
    hcr::mpi::share_models(config, MPI_COMM_WORLD);  // start warm from the other hosts' models
    hcr::Runtime rt(config);
    std::vector<double> weights;
    if (o.mapping == "throughput")
      weights = hcr::mpi::measure_throughput(rt, MPI_COMM_WORLD, o.tile, 0, o.dtype == "f64");
    {
      hcr::mpi::Cluster cl(rt);
      rc = o.dtype == "f32" ? job<float>(o, rt, cl, weights) : job<double>(o, rt, cl, weights);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hcr-mpi: rank %d of %d: %s\n", rank, size, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer looks while Open MPI is whole (as tests/mpi/cluster_test.cpp's main does):
  // after MPI_Finalize its unloaded components' allocations would show as unnamed leaks.
  __lsan_do_leak_check();
#endif
  MPI_Finalize();
  return rc;
}
