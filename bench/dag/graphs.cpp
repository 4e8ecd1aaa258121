// The task graphs of dag_bench: Topcuoglu's random layered DAGs, Gaussian elimination and FFT
// (as in Topcuoglu et al. 2002), tiled LU and Cholesky, and a halo-exchange stencil; each with its
// own seed, turned into flops and bytes on a reference machine by realise().
#include "dag.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

namespace dagbench {

namespace {

using hcr::Access;

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Per device, the kernel's cost relative to the device's nominal speed: uniform in
// [1 - beta/2, 1 + beta/2] (Topcuoglu's heterogeneity).
Kernel kernel(std::string name, double relative_flops, double beta, std::mt19937_64& gen) {
  if (!(beta >= 0 && beta < 2))
    throw std::invalid_argument("heterogeneity beta " + number(beta) + " is not in [0, 2)");
  std::uniform_real_distribution<double> u(1 - beta / 2, 1 + beta / 2);
  Kernel k{std::move(name), relative_flops, {}};
  for (size_t d = 0; d < kMaxDevices; ++d) k.cost.push_back(u(gen));
  return k;
}

Graph start(std::string name, std::string about, double ccr, uint64_t seed) {
  if (!(ccr > 0)) throw std::invalid_argument("CCR " + number(ccr) + " is not above 0");
  Graph g;
  g.name = std::move(name);
  g.about = std::move(about);
  g.seed = seed;
  g.ccr = ccr;
  return g;
}

int add_buffer(Graph& g, double relative_size) {
  g.buffer_size.push_back(relative_size);
  return int(g.buffer_size.size()) - 1;
}

}  // namespace

std::vector<Edge> dependencies(const Graph& g, bool relative_sizes) {
  std::map<std::pair<int, int>, double> edges;
  const size_t buffers = g.buffer_size.size();
  std::vector<int> last_writer(buffers, -1);
  std::vector<std::vector<int>> readers(buffers);
  auto size = [&](int b) {
    return relative_sizes ? g.buffer_size[size_t(b)] : double(g.buffer_bytes[size_t(b)]);
  };
  for (size_t ti = 0; ti < g.tasks.size(); ++ti) {
    const int j = int(ti);
    for (const Arg& a : g.tasks[ti].args) {
      const int w = last_writer[size_t(a.buffer)];
      if (w >= 0 && w != j) edges[{w, j}] += hcr::reads(a.access) ? size(a.buffer) : 0.0;
      if (hcr::writes(a.access)) {
        for (int r : readers[size_t(a.buffer)])
          if (r != j) edges[{r, j}] += 0.0;
        readers[size_t(a.buffer)].clear();
        last_writer[size_t(a.buffer)] = j;
      } else {
        readers[size_t(a.buffer)].push_back(j);
      }
    }
  }
  std::vector<Edge> out;
  for (const auto& [ends, bytes] : edges) out.push_back({ends.first, ends.second, bytes});
  return out;
}

Graph random_dag(int tasks, double alpha, int out_degree, double ccr, double beta, int classes,
                 uint64_t seed) {
  if (tasks < 2 || !(alpha > 0) || out_degree < 1 || classes < 0)
    throw std::invalid_argument("random DAG: tasks " + std::to_string(tasks) + ", alpha " +
                                number(alpha) + ", out-degree " + std::to_string(out_degree) +
                                ", classes " + std::to_string(classes) +
                                ": want tasks >= 2, alpha > 0, out-degree >= 1, classes >= 0");
  Graph g = start("rand-c" + number(ccr) + "-b" + number(beta),
                  "Topcuoglu random DAG: v " + std::to_string(tasks) + ", alpha " + number(alpha) +
                      ", out-degree " + std::to_string(out_degree) + ", CCR " + number(ccr) +
                      ", beta " + number(beta) + ", " +
                      (classes ? std::to_string(classes) + " kernels" : "a kernel per task"),
                  ccr, seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> around_mean(0.1, 1.9);  // (0, 2) x mean, no zero

  // Levels: one task in each, the rest spread uniformly (mean width alpha * sqrt(v)).
  const int levels = std::clamp(int(std::lround(std::sqrt(double(tasks)) / alpha)), 2, tasks);
  std::vector<std::vector<int>> level(static_cast<size_t>(levels));
  {
    std::vector<int> level_of(static_cast<size_t>(tasks));
    std::uniform_int_distribution<int> any_level(0, levels - 1);
    for (int i = 0; i < tasks; ++i) level_of[size_t(i)] = i < levels ? i : any_level(gen);
    int id = 0;  // task ids in level order: submission order is topological
    std::vector<int> count(size_t(levels), 0);
    for (int l : level_of) ++count[size_t(l)];
    for (int l = 0; l < levels; ++l)
      for (int c = 0; c < count[size_t(l)]; ++c) level[size_t(l)].push_back(id++);
  }
  std::vector<std::set<int>> preds(static_cast<size_t>(tasks));
  std::vector<int> level_of(static_cast<size_t>(tasks));
  for (int l = 0; l < levels; ++l)
    for (int t : level[size_t(l)]) level_of[size_t(t)] = l;
  std::uniform_int_distribution<int> degree(1, 2 * out_degree - 1);
  for (int l = 0; l + 1 < levels; ++l) {
    const int later_first = level[size_t(l + 1)].front();
    for (int t : level[size_t(l)]) {
      const int o = degree(gen);
      const auto& next = level[size_t(l + 1)];
      preds[size_t(next[std::uniform_int_distribution<size_t>(0, next.size() - 1)(gen)])].insert(t);
      std::uniform_int_distribution<int> later(later_first, tasks - 1);
      for (int e = 1; e < o; ++e) preds[size_t(later(gen))].insert(t);
    }
  }
  for (int t = 0; t < tasks; ++t)  // every task below the first level has a predecessor
    if (level_of[size_t(t)] > 0 && preds[size_t(t)].empty()) {
      const auto& above = level[size_t(level_of[size_t(t)] - 1)];
      preds[size_t(t)].insert(
          above[std::uniform_int_distribution<size_t>(0, above.size() - 1)(gen)]);
    }

  const int kernels = classes > 0 ? classes : tasks;
  for (int k = 0; k < kernels; ++k)
    g.kernels.push_back(kernel(std::string(classes > 0 ? "c" : "t").append(std::to_string(k)),
                               around_mean(gen), beta, gen));
  std::uniform_int_distribution<int> any_class(0, kernels - 1);
  std::vector<int> output(static_cast<size_t>(tasks));
  for (int t = 0; t < tasks; ++t) output[size_t(t)] = add_buffer(g, around_mean(gen));
  for (int t = 0; t < tasks; ++t) {
    Task task{classes > 0 ? any_class(gen) : t, {}};
    if (preds[size_t(t)].empty())
      task.args.push_back({add_buffer(g, around_mean(gen)), Access::read});
    for (int p : preds[size_t(t)]) task.args.push_back({output[size_t(p)], Access::read});
    task.args.push_back({output[size_t(t)], Access::write});
    g.tasks.push_back(std::move(task));
  }
  return g;
}

Graph gaussian_elimination(int m, double ccr, double beta, uint64_t seed) {
  if (m < 2) throw std::invalid_argument("Gaussian elimination: m " + std::to_string(m) + " < 2");
  Graph g = start("ge",
                  "Gaussian elimination, m " + std::to_string(m) + ", CCR " + number(ccr) +
                      ", beta " + number(beta),
                  ccr, seed);
  std::mt19937_64 gen(seed);
  g.kernels = {kernel("ge_pivot", 1, beta, gen), kernel("ge_update", 2, beta, gen)};
  std::vector<int> column;
  for (int j = 0; j < m; ++j) column.push_back(add_buffer(g, 1));
  for (int k = 0; k + 1 < m; ++k) {
    g.tasks.push_back({0, {{column[size_t(k)], Access::read_write}}});
    for (int j = k + 1; j < m; ++j)
      g.tasks.push_back(
          {1, {{column[size_t(k)], Access::read}, {column[size_t(j)], Access::read_write}}});
  }
  return g;
}

Graph fft(int points, double ccr, double beta, uint64_t seed) {
  if (points < 2 || (points & (points - 1)) != 0)
    throw std::invalid_argument("FFT: " + std::to_string(points) +
                                " points is not a power of 2 >= 2");
  Graph g = start(
      "fft",
      "FFT, " + std::to_string(points) + " points, CCR " + number(ccr) + ", beta " + number(beta),
      ccr, seed);
  std::mt19937_64 gen(seed);
  g.kernels = {kernel("fft_split", 1, beta, gen), kernel("fft_butterfly", 1, beta, gen)};
  // The recursive calls: a binary tree in breadth-first order, node i's children 2i+1 and 2i+2.
  const int tree = 2 * points - 1;
  std::vector<int> out(static_cast<size_t>(tree));
  const int input = add_buffer(g, 1);
  for (int i = 0; i < tree; ++i) {
    out[size_t(i)] = add_buffer(g, 1);
    Task t{0, {}};
    t.args.push_back({i == 0 ? input : out[size_t((i - 1) / 2)], Access::read});
    t.args.push_back({out[size_t(i)], Access::write});
    g.tasks.push_back(std::move(t));
  }
  // Butterflies: stage s task i combines the previous stage's i and i ^ 2^s.
  std::vector<int> prev(out.end() - points, out.end());  // the leaves
  for (int s = 0; (1 << s) < points; ++s) {
    std::vector<int> next;
    for (int i = 0; i < points; ++i) {
      next.push_back(add_buffer(g, 1));
      g.tasks.push_back({1,
                         {{prev[size_t(i)], Access::read},
                          {prev[size_t(i ^ (1 << s))], Access::read},
                          {next.back(), Access::write}}});
    }
    prev = std::move(next);
  }
  return g;
}

Graph lu(int n, double ccr, double beta, uint64_t seed) {
  if (n < 2) throw std::invalid_argument("LU: " + std::to_string(n) + " tiles per side < 2");
  Graph g = start("lu",
                  "tiled LU without pivoting, " + std::to_string(n) + "x" + std::to_string(n) +
                      " tiles, CCR " + number(ccr) + ", beta " + number(beta),
                  ccr, seed);
  std::mt19937_64 gen(seed);
  // Flops of b-tiles, in units of b^3.
  g.kernels = {kernel("getrf", 2.0 / 3, beta, gen), kernel("trsm_l", 1, beta, gen),
               kernel("trsm_u", 1, beta, gen), kernel("gemm", 2, beta, gen)};
  for (int i = 0; i < n * n; ++i) add_buffer(g, 1);
  auto A = [&](int i, int j) { return i * n + j; };
  for (int k = 0; k < n; ++k) {
    g.tasks.push_back({0, {{A(k, k), Access::read_write}}});
    for (int j = k + 1; j < n; ++j)
      g.tasks.push_back({2, {{A(k, k), Access::read}, {A(k, j), Access::read_write}}});
    for (int i = k + 1; i < n; ++i)
      g.tasks.push_back({1, {{A(k, k), Access::read}, {A(i, k), Access::read_write}}});
    for (int i = k + 1; i < n; ++i)
      for (int j = k + 1; j < n; ++j)
        g.tasks.push_back(
            {3, {{A(i, k), Access::read}, {A(k, j), Access::read}, {A(i, j), Access::read_write}}});
  }
  return g;
}

Graph cholesky(int n, double ccr, double beta, uint64_t seed) {
  if (n < 2) throw std::invalid_argument("Cholesky: " + std::to_string(n) + " tiles per side < 2");
  Graph g = start("chol",
                  "tiled Cholesky, " + std::to_string(n) + "x" + std::to_string(n) +
                      " tiles, CCR " + number(ccr) + ", beta " + number(beta),
                  ccr, seed);
  std::mt19937_64 gen(seed);
  g.kernels = {kernel("potrf", 1.0 / 3, beta, gen), kernel("trsm", 1, beta, gen),
               kernel("syrk", 1, beta, gen), kernel("gemm", 2, beta, gen)};
  for (int i = 0; i < n * n; ++i) add_buffer(g, 1);
  auto A = [&](int i, int j) { return i * n + j; };
  for (int k = 0; k < n; ++k) {
    g.tasks.push_back({0, {{A(k, k), Access::read_write}}});
    for (int i = k + 1; i < n; ++i)
      g.tasks.push_back({1, {{A(k, k), Access::read}, {A(i, k), Access::read_write}}});
    for (int i = k + 1; i < n; ++i) {
      g.tasks.push_back({2, {{A(i, k), Access::read}, {A(i, i), Access::read_write}}});
      for (int j = k + 1; j < i; ++j)
        g.tasks.push_back(
            {3, {{A(i, k), Access::read}, {A(j, k), Access::read}, {A(i, j), Access::read_write}}});
    }
  }
  return g;
}

Graph stencil(int px, int py, int steps, double ccr, double beta, uint64_t seed) {
  if (px < 1 || py < 1 || px * py < 2 || steps < 1)
    throw std::invalid_argument("stencil: " + std::to_string(px) + "x" + std::to_string(py) +
                                " blocks, " + std::to_string(steps) +
                                " steps: want two blocks or more and a step or more");
  Graph g =
      start("stencil",
            "halo exchange, " + std::to_string(px) + "x" + std::to_string(py) + " blocks, " +
                std::to_string(steps) + " steps, CCR " + number(ccr) + ", beta " + number(beta),
            ccr, seed);
  std::mt19937_64 gen(seed);
  g.kernels = {kernel("stencil", 1, beta, gen)};
  const int blocks = px * py;
  std::vector<int> block;
  for (int p = 0; p < blocks; ++p) block.push_back(add_buffer(g, 8));
  auto neighbours = [&](int p) {
    std::vector<int> out;
    const int x = p % px, y = p / px;
    if (x > 0) out.push_back(p - 1);
    if (x + 1 < px) out.push_back(p + 1);
    if (y > 0) out.push_back(p - px);
    if (y + 1 < py) out.push_back(p + px);
    return out;
  };
  // The halo block p sends to block q, for even and odd steps.
  std::map<std::pair<int, int>, std::array<int, 2>> halo;
  for (int p = 0; p < blocks; ++p)
    for (int q : neighbours(p)) halo[{p, q}] = {add_buffer(g, 1), add_buffer(g, 1)};
  for (int t = 0; t < steps; ++t)
    for (int p = 0; p < blocks; ++p) {
      Task task{0, {{block[size_t(p)], Access::read_write}}};
      if (t > 0)
        for (int q : neighbours(p))
          task.args.push_back({halo[{q, p}][size_t((t - 1) % 2)], Access::read});
      if (t + 1 < steps)
        for (int q : neighbours(p))
          task.args.push_back({halo[{p, q}][size_t(t % 2)], Access::write});
      g.tasks.push_back(std::move(task));
    }
  return g;
}

void realise(Graph& g, const Machine& reference, double task_seconds) {
  // Mean execution over the reference machine's processors, in the generator's units.
  double slots = 0;
  for (const SimDevice& d : reference.devices) slots += d.slots;
  double mean = 0;
  for (const Task& t : g.tasks) {
    double sum = 0;
    for (size_t d = 0; d < reference.devices.size(); ++d)
      sum += reference.devices[d].slots * g.kernels[size_t(t.kernel)].flops /
             (reference.devices[d].gflops * 1e9 * speed_factor(reference, g, t.kernel, d));
    mean += sum / slots;
  }
  mean /= double(g.tasks.size());
  for (Kernel& k : g.kernels) k.flops *= task_seconds / mean;

  const Link link = mean_link(reference);
  double relative = 0;
  int data_edges = 0;
  for (const Edge& e : dependencies(g, true))
    if (e.bytes > 0) {
      relative += e.bytes;
      ++data_edges;
    }
  const double per_unit = data_edges == 0 || link.per_byte == 0
                              ? 0
                              : std::max(0.0, g.ccr * task_seconds - link.latency) /
                                    (link.per_byte * relative / data_edges);
  g.buffer_bytes.clear();
  for (double s : g.buffer_size)
    g.buffer_bytes.push_back(std::max<uint64_t>(4, uint64_t(std::llround(s * per_unit / 4)) * 4));
  double comm = 0;
  for (const Edge& e : dependencies(g))
    if (e.bytes > 0) comm += link.latency + e.bytes * link.per_byte;
  g.ccr_realised = data_edges ? comm / data_edges / task_seconds : 0;
}

}  // namespace dagbench
