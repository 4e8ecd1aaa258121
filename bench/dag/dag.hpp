// dag_bench's task graphs, simulated machines and offline schedules. The graphs are plain data
// (kernels, buffers, tasks with access modes): dag_bench submits them to hcr on sim devices, and
// the offline schedulers here place the same graph with the same figures the sim devices use
// (backends/sim/README.md), so that a measured makespan and an offline one mean the same thing.
//
// Units: "modelled" seconds, bytes and flops, as in the sim's TOML; a case's time_scale turns
// modelled seconds into wall seconds (both for the sim devices and for the offline figures).
#pragma once

#include <hcr/types.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dagbench {

// ---- machines -------------------------------------------------------------------------------

/// At most this many devices per machine: a graph draws its per-device costs for this many.
inline constexpr size_t kMaxDevices = 8;

/// One [[backend.device]] of the sim, with the keys dag_bench sets.
struct SimDevice {
  std::string name;
  std::string kind;  ///< gpu | accelerator | cpu
  std::string arch;  ///< identical devices share one, and with it a learned cost model
  double gflops = 1;
  int slots = 1;             ///< concurrency
  bool host_memory = false;  ///< works in host memory: no copies, no link
  double bandwidth = 0;      ///< bytes per modelled second, each direction
  double latency = 0;        ///< modelled seconds per copy
  /// Per-kernel speed factor: kernel k of a graph runs affinity[k % size] times faster (empty: 1).
  std::vector<double> affinity;
};

struct Machine {
  std::string name;
  std::string about;
  std::vector<SimDevice> devices;
};

// ---- graphs ---------------------------------------------------------------------------------

struct Kernel {
  std::string name;
  double flops = 0;  ///< per launch (the sim's kernel.<name>.flops; flops_per_byte is 0)
  /// Per device index: what the kernel costs there relative to the device's nominal speed, drawn
  /// from the graph's heterogeneity beta (Topcuoglu's w_ij / w_i, in [1 - beta/2, 1 + beta/2]).
  std::vector<double> cost;
};

struct Arg {
  int buffer = 0;
  hcr::Access access = hcr::Access::read;
};

struct Task {
  int kernel = 0;
  std::vector<Arg> args;
};

struct Graph {
  std::string name;   ///< "rand-c1-b0.5", "lu", ...: the case's second half
  std::string about;  ///< the generator and its parameters
  uint64_t seed = 0;
  double ccr = 1;           ///< asked for
  double ccr_realised = 0;  ///< on the reference machine, after realise()
  std::vector<Kernel> kernels;
  /// Relative sizes from the generator; bytes after realise().
  std::vector<double> buffer_size;
  std::vector<uint64_t> buffer_bytes;
  /// In submission order, a topological order: dependencies follow from access order.
  std::vector<Task> tasks;
};

/// The dependency edges hcr derives from access order (sequential consistency: a read waits for
/// the last writer, a write for the last writer and the readers since), deduplicated. `bytes` is
/// what the edge carries: the buffers the successor reads in the version the predecessor wrote
/// (0 for an order-only edge).
struct Edge {
  int from = 0, to = 0;
  double bytes = 0;
};
std::vector<Edge> dependencies(const Graph& g, bool relative_sizes = false);

/// Topcuoglu et al.'s random layered DAG: `tasks` tasks in about sqrt(tasks)/alpha levels (mean
/// width alpha*sqrt(tasks)), each task with a mean `out_degree` successors in later levels (the
/// first in the next level). Each task writes one buffer its successors read; an entry task reads
/// an input of its own from host memory. Costs: `classes` kernels (0: one per task) of mean cost
/// drawn uniformly in (0, 2) x the mean, each task of a class drawn uniformly; per device a
/// kernel's cost varies by beta. Buffer sizes drawn uniformly in (0, 2) x the mean.
Graph random_dag(int tasks, double alpha, int out_degree, double ccr, double beta, int classes,
                 uint64_t seed);
/// Gaussian elimination (Topcuoglu's graph): columns of an m x m matrix; step k has a pivot task
/// (read-write column k) and m - k updates (read column k, read-write column j). (m^2+m-2)/2 tasks.
Graph gaussian_elimination(int m, double ccr, double beta, uint64_t seed);
/// FFT (Topcuoglu's graph) of `points` (a power of 2) inputs: 2*points-1 recursive-call tasks (a
/// binary tree) then points*log2(points) butterflies; each task writes one buffer.
Graph fft(int points, double ccr, double beta, uint64_t seed);
/// Tiled LU without pivoting of a g x g grid of tiles: getrf, trsm (row and column panels), gemm.
Graph lu(int g, double ccr, double beta, uint64_t seed);
/// Tiled Cholesky of a g x g grid of tiles: potrf, trsm, syrk, gemm.
Graph cholesky(int g, double ccr, double beta, uint64_t seed);
/// Iterated 2-D halo exchange on px x py blocks (py = 1: 1-D) for `steps` steps: each task updates
/// its block (read-write) from its neighbours' halos of the step before and writes its own
/// halos (double-buffered). A block is 8 halos' worth of data.
Graph stencil(int px, int py, int steps, double ccr, double beta, uint64_t seed);

/// Turns the generator's relative costs and sizes into flops and bytes on `reference`: the mean
/// task (over tasks, the mean over the machine's processors, i.e. device slots) takes
/// `task_seconds`, and the mean data edge's copy over the mean link takes ccr x that. Sets
/// ccr_realised (a copy's latency is a floor: a tiny ccr comes out larger).
void realise(Graph& g, const Machine& reference, double task_seconds);

// ---- offline schedules ----------------------------------------------------------------------

/// The mean copy between two processors (device slots) on different memory nodes, over every
/// such ordered pair, as copy_seconds() charges it: latency + bytes * per_byte. HEFT's and PEFT's
/// mean edge cost, and the link a graph's CCR is realised on.
struct Link {
  double latency = 0, per_byte = 0;
};
Link mean_link(const Machine& m);

/// A graph on a machine, in modelled seconds.
struct Problem {
  const Machine* machine = nullptr;
  const Graph* graph = nullptr;
  std::vector<std::vector<double>> exec;  ///< [task][device]
  std::vector<std::vector<int>> preds, succs;
  std::vector<Edge> edges;
  std::vector<int> node;            ///< memory node of each device: 0 is host memory
  std::vector<int> device_of_node;  ///< the device owning each node (-1 for host memory)
  Link link;
  /// Each task's mean execution time over the processors (device slots).
  std::vector<double> mean_exec;
};
Problem make_problem(const Machine& m, const Graph& g);
/// Speed factor of kernel k on device d (what the sim's factors.<kernel> gets).
double speed_factor(const Machine& m, const Graph& g, int kernel, size_t device);
/// One copy as the sim runs it: into a device on its in-engine, out of a device (to host memory)
/// on its out-engine, device to device (one plugin) on the destination's in-engine; latency +
/// bytes / bandwidth of the device whose engine carries it.
double copy_seconds(const Problem& p, int from_node, int to_node, double bytes);

struct Placement {
  int device = -1, slot = -1;
  double start = 0, finish = 0;
};
struct Copy {
  int task = 0;  ///< for which task
  int buffer = 0;
  int version = -1;       ///< the task that wrote what it carries (-1: the initial data)
  int from = 0, to = 0;   ///< memory nodes
  int engine_device = 0;  ///< whose engine carries it
  bool inbound = true;    ///< its in-engine (else its out-engine)
  double start = 0, end = 0;
};
struct Schedule {
  std::string name;
  std::vector<Placement> tasks;
  std::vector<Copy> copies;
  double makespan = 0;     ///< the last task's finish: results stay where they were computed
  std::vector<int> order;  ///< the order tasks were placed in
};

/// HEFT (Topcuoglu et al. 2002): upward ranks with mean execution and mean copy costs, tasks in
/// rank order, each on the processor where it finishes first. Copies are planned on the link
/// engines (one copy at a time each), replicas are reused until overwritten, data starts in host
/// memory. `insertion`: a task or a copy may fill an idle gap of a slot or an engine.
Schedule heft(const Problem& p, bool insertion = true);
/// PEFT (Arabnejad & Barbosa 2014): the optimistic cost table OCT(task, device), tasks by mean
/// OCT, each on the device minimising finish + OCT; the same copy model as heft().
Schedule peft(const Problem& p, bool insertion = true);
/// Every task on one device (its slots), HEFT's order there, copies included.
Schedule single_device(const Problem& p, int device);

/// A lower bound: the critical path with each task's fastest device and no copies, and the work
/// bound of the fractional assignment (each device's slots busy at most T).
struct Bound {
  double critical_path = 0, work = 0;
  double value() const { return critical_path > work ? critical_path : work; }
};
Bound lower_bound(const Problem& p);

/// One operation as the runtime ran it: a task on a device, or a copy of a buffer between memory
/// nodes.
struct RanOp {
  bool copy = false;
  int task = -1;    ///< a task: which
  int device = -1;  ///< a task: where
  int buffer = -1;  ///< a copy: which
  int from = 0, to = 0;
  double start = 0;  ///< observed, for the order only
};
/// The makespan of the runtime's own decisions (each task's device, the order of the operations
/// on each device and each engine) with the model's durations and no overhead: in the observed
/// order, each operation starts as soon as its predecessors, its data and its slot or engine
/// allow. Measured / replay is the runtime's overhead; replay / an offline schedule, the cost of
/// its decisions. Throws when the operations do not fit the graph (a copy from where the data
/// was not).
double replay(const Problem& p, std::vector<RanOp> ops);

/// Whether `s` is a schedule the simulated machine could run: dependencies, durations, every
/// input present (copied or produced) when its task starts, copies from a replica holding that
/// version, one operation at a time per slot and per engine. "" when valid, else the first fault.
std::string check(const Problem& p, const Schedule& s);

}  // namespace dagbench
