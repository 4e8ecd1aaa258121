/// \file mpi.hpp
/// hcr::mpi — one hcr program across the ranks of an MPI job, StarPU-MPI's model.
///
/// \code
/// int provided;
/// MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // SERIALIZED suffices
/// {
///   hcr::Runtime rt(hcr::mpi::split_node(config));  // config's backends, this rank's share
///   hcr::mpi::Cluster cl(rt);                               // over MPI_COMM_WORLD
///   auto a = cl.buffer<double>(n, n, /*owner=*/0);          // every rank, same order
///   auto b = cl.buffer<double>(n, n, /*owner=*/1);
///   hcr::Kernel k = rt.kernel("scale_add").cpu(...);        // every rank
///   cl.submit(hcr::mpi::Task(k).read(a).read_write(b).param(2.0));  // runs on rank 1
///   cl.wait_all();  // b's latest version is home on rank 1; every transfer has finished
/// }
/// MPI_Finalize();
/// \endcode
///
/// Every rank runs its own Runtime over its own devices and makes the same calls in the same order
/// (SPMD): it registers the same buffers (distribute(), with an owner rank) and submits the same
/// tasks. A task runs on one rank (the owner of what it writes, or Task::on_rank); each rank
/// infers from the access modes which versions it must send and receive, and all ranks keep the
/// same record of which rank holds which version, so one version crosses each link at most once.
/// Ranks not involved in a task skip it after a few lookups.
///
/// Thread safety: a Cluster's registration, submission, flush and wait calls come from one thread
/// at a time, in the same order on every rank; stats() may be called from any thread. Every MPI
/// call of the layer is made by its own progress thread, so MPI must be initialised with at least
/// MPI_THREAD_SERIALIZED, and while a Cluster lives the application makes MPI calls of its own
/// only if it initialised MPI_THREAD_MULTIPLE (or knows the layer idle: after wait_all()).
#pragma once

#include <hcr/hcr.hpp>

// The C API only: Open MPI's and MPICH's deprecated C++ bindings would need their own library.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(_WIN32)
#define HCR_MPI_API
#else
#define HCR_MPI_API __attribute__((visibility("default")))
#endif

namespace hcr::mpi {

/// Knobs of the layer; every rank must pass the same values.
struct Options {
  /// A receive granted locally whose data has not come, or a send not taken by its peer, for
  /// longer than this fails its access with ErrorCode::communication naming the peer rank. A
  /// receive's clock starts when its replica is free to take the data, so the timeout must exceed
  /// the longest a peer may compute before it sends. wait_all waits for the other ranks to reach
  /// theirs at most twice this long.
  std::chrono::milliseconds timeout{60000};
  /// Memory for data that arrives before its receive can take it (an early arrival): beyond
  /// it, payloads wait in MPI until memory frees. One message is always let in when none is held.
  /// The cap yields where keeping to it could deadlock: MPI delivers one peer's payloads in order,
  /// so a payload waiting for memory is let in over the cap when a receive behind it from the
  /// same peer is ready, or when it has waited `early_arrival_grace` (Stats::over_cap counts it).
  size_t early_arrival_cap = size_t{256} << 20;
  std::chrono::milliseconds early_arrival_grace{100};
  /// Payload sends posted at once; the rest queue in order.
  uint32_t max_sends_in_flight = 32;
  /// 0: the tags MPI offers. N > 0: behave as if only tags 0 to N-1 existed (a test of small
  /// MPI_TAG_UB); the layer needs two.
  int tag_space = 0;
};

/// What one rank exchanged with one peer.
struct PeerStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;      ///< payloads (each also had a header)
  uint64_t messages_received = 0;  ///< payloads
};

/// The layer's counters on this rank.
struct Stats {
  std::vector<PeerStats> peers;  ///< by rank
  uint64_t early_arrivals =
      0;  ///< payloads received into a temporary (their receive was not ready)
  uint64_t early_bytes_peak = 0;  ///< the most memory early arrivals held at once
  uint64_t over_cap = 0;          ///< early arrivals let in over the cap (to avoid a deadlock)
  uint64_t tasks_run = 0;         ///< tasks this rank executed
  uint64_t tasks_skipped = 0;     ///< tasks another rank executed
};

class Cluster;
namespace detail {
class ClusterImpl;
}

/// A task of the distributed graph under construction (hcr::Task's builder, plus on_rank).
/// Cheap: arguments and parameters live inline (up to 8 and 256 bytes), so a rank that skips the
/// task allocates nothing.
class HCR_MPI_API Task : public hcr::detail::TaskBuilder<Task> {
 public:
  explicit Task(const Kernel& kernel) : kernel_(kernel) {}

  // read(), write(), read_write(), arg(buffer, mode) and param(value): hcr::Task's builder.
  using hcr::detail::TaskBuilder<Task>::arg;
  Task& arg(hcr::detail::BufferState* b, Access mode);
  Task& param_bytes(const void* data, size_t size, size_t align);
  Task& priority(int p) noexcept {
    priority_ = p;
    return *this;
  }
  /// The device (an id of the executing rank's Runtime::devices()) it must run on there.
  Task& on(uint32_t device) noexcept {
    device_ = static_cast<int64_t>(device);
    return *this;
  }
  /// Runs on rank r whatever its data's owners are.
  Task& on_rank(int r) noexcept {
    rank_ = r;
    return *this;
  }

 private:
  friend class Cluster;
  friend class detail::ClusterImpl;
  static constexpr size_t kArgs = 8, kParams = 16, kParamBytes = 256;
  struct Arg {
    hcr::detail::BufferState* buffer;
    Access access;
  };
  struct Param {
    uint32_t offset, size, align;
  };
  Kernel kernel_;
  std::array<Arg, kArgs> args_{};
  size_t nargs_ = 0;
  std::vector<Arg> more_args_;  // beyond kArgs
  alignas(16) std::array<std::byte, kParamBytes> bytes_{};
  std::array<Param, kParams> params_{};
  size_t nparams_ = 0, nbytes_ = 0;
  std::vector<std::byte> more_bytes_;  // every parameter, once they outgrow the inline space
  std::vector<Param> more_params_;
  int priority_ = 0;
  int64_t device_ = -1;
  int rank_ = -1;
};

/// The distributed layer of one rank: registered buffers, the state of every version, and the
/// progress thread that makes the MPI calls. Destroy it before the Runtime (it waits for its
/// transfers, which are host accesses of that runtime) and before MPI_Finalize.
class HCR_MPI_API Cluster {
 public:
  /// Duplicates `comm` (collective: every rank of it constructs a Cluster). Throws Error
  /// (unsupported) when MPI is not initialised or its thread level is below SERIALIZED.
  explicit Cluster(Runtime& rt, MPI_Comm comm = MPI_COMM_WORLD, Options options = {});
  /// wait_all() (errors are logged, not thrown; the ranks' calls are checked only when this rank
  /// registered or submitted something since the last wait_all), then stops the progress thread
  /// and frees the duplicated communicator.
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  Runtime& runtime() const noexcept;

  /// Registers `b` (a buffer or a tile) with owner rank `owner`; returns its id (registration
  /// order). Its owner's data is the initial version; other ranks' storage is a replica.
  template <class T>
  uint64_t distribute(const Buffer<T>& b, int owner) {
    return distribute(b.state(), owner);
  }
  uint64_t distribute(hcr::detail::BufferState* b, int owner);
  /// A new buffer registered with `owner`: zeroed on the owner, uninitialized elsewhere.
  template <class T>
  Buffer<T> buffer(size_t rows, size_t cols, int owner) {
    Buffer<T> b = owner == rank() ? runtime().buffer<T>(rows, cols)
                                  : runtime().buffer<T>(rows, cols, uninitialized);
    distribute(b, owner);
    return b;
  }
  /// Registers the tiles row by row; tile (i, j) goes to rank (i + j * tiles.rows()) % size()
  /// ("by rows") or (i * tiles.cols() + j) % size() (the default: round robin in row order).
  template <class T>
  void distribute_1d(const Tiles<T>& tiles, bool by_rows = false) {
    for (size_t i = 0; i < tiles.rows(); ++i)
      for (size_t j = 0; j < tiles.cols(); ++j)
        distribute(tiles(i, j), owner_1d(i, j, tiles.rows(), tiles.cols(), by_rows));
  }
  /// 2-D block-cyclic over a p x q grid of ranks (p * q <= size()): tile (i, j) goes to rank
  /// (i % p) * q + (j % q). Registered row by row.
  template <class T>
  void distribute_2d(const Tiles<T>& tiles, int p, int q) {
    check_grid(p, q);
    for (size_t i = 0; i < tiles.rows(); ++i)
      for (size_t j = 0; j < tiles.cols(); ++j)
        distribute(tiles(i, j), static_cast<int>(i % static_cast<size_t>(p)) * q +
                                    static_cast<int>(j % static_cast<size_t>(q)));
  }
  /// Registers the tiles row by row in proportion to `weights` (one per rank, finite, >= 0, not
  /// all 0; e.g. measure_throughput's): each tile goes to the rank furthest behind its share of
  /// the tiles registered so far (smooth weighted round robin), so a rank's tiles are spread over
  /// the grid and a rank of weight 2 owns twice the tiles of a rank of weight 1, to within one.
  /// Throws Error(invalid_argument) naming the weight at fault.
  template <class T>
  void distribute_weighted(const Tiles<T>& tiles, const std::vector<double>& weights) {
    std::vector<double> credit = check_weights(weights);
    for (size_t i = 0; i < tiles.rows(); ++i)
      for (size_t j = 0; j < tiles.cols(); ++j)
        distribute(tiles(i, j), next_weighted(weights, credit));
  }
  /// The owner rank of a registered buffer; throws Error if it was never distributed.
  template <class T>
  int owner(const Buffer<T>& b) const {
    return owner(b.state());
  }
  int owner(const hcr::detail::BufferState* b) const;

  /// Submits `task` (left as it was: it may be submitted again): this rank runs it if it is the
  /// executor (the Event is its local task's), posts the sends and receives it takes part in, and
  /// records the new versions. A rank that does not run it gets an empty Event. Throws Error
  /// (invalid_argument) for a buffer never distributed or an on_rank outside the ranks.
  Event submit(Task& task);
  Event submit(Task&& task) { return submit(task); }

  /// Brings every buffer's latest version home to its owner (the transfers start; wait_all
  /// waits for them).
  void flush();
  /// flush(), then waits for every local task and transfer; then, collectively (every rank calls
  /// it, as StarPU-MPI's starpu_mpi_wait_for_all), checks that the ranks made the same calls since
  /// the last wait_all: the same buffers registered with the same owners and shapes, the same
  /// tasks run on the same ranks with the same arguments (running hashes, a few instructions per
  /// call, compared in one small all-gather). Ranks that differ would each run what they take for
  /// their own work (a task run twice, or never). Throws Error(invalid_argument) on every rank
  /// when they differ, naming the first buffer whose owner or shape differs with each rank's
  /// view, the counts that differ and the tasks run, and at every wait_all after; else the first
  /// communication error of this rank (Error, ErrorCode::communication, naming the peer and the
  /// buffer), or one saying that another rank did not reach wait_all within twice
  /// Options::timeout.
  void wait_all();

  Stats stats() const;

 private:
  int owner_1d(size_t i, size_t j, size_t rows, size_t cols, bool by_rows) const noexcept;
  void check_grid(int p, int q) const;
  std::vector<double> check_weights(const std::vector<double>& weights) const;
  static int next_weighted(const std::vector<double>& weights, std::vector<double>& credit);
  std::unique_ptr<detail::ClusterImpl> impl_;
};

/// How split_node divided this node.
struct NodeShare {
  int local_rank = 0;  ///< among the ranks of this node
  int local_size = 1;
  unsigned cores = 0;    ///< this process may run on (its affinity mask)
  unsigned threads = 0;  ///< given to the cpu backend
};

/// Splits the node's resources between the ranks on it (MPI_Comm_split_type SHARED over
/// `comm`, collective): every `cpu` backend of `config` gets `threads` = its share of the cores
/// (at least 1), and every `cuda` backend without a `devices` option gets `devices` =
/// "share:K/N" (local rank K of N takes the GPUs whose ordinal is K modulo N, or GPU K % count
/// when there are fewer GPUs than ranks). An explicit cpu `threads` or cuda `devices` is kept.
/// An empty backend list (every plugin found, default options) is refused with an Error
/// (invalid_argument): options cannot be given to plugins not named. Call it before constructing
/// the Runtime.
HCR_MPI_API Config split_node(Config config, MPI_Comm comm = MPI_COMM_WORLD,
                              NodeShare* share = nullptr);

/// Shares the ranks' learned cost models (collective over `comm`; call it before the Runtimes
/// exist, as they load their models when they start). Every rank sends the model files of its
/// host's model directory (sched::model_directory(config): one file per device architecture),
/// and adopts each file its own directory lacks, so a rank starts warm from what an identical
/// architecture measured on another host; a file the rank has is never replaced. A file is adopted
/// only when the model loader takes it whole (sched::check_model_file: format and version, every
/// cell's fields, the architecture its name says, no more bytes or cells than a model keeps); one
/// refused is a warning naming the rank it came from and why, and the next rank's copy of that
/// name, if any, is tried. With the model directory "off", a rank sends and adopts nothing.
/// Returns the files adopted. An unusable directory is skipped with a warning.
HCR_MPI_API size_t share_models(const Config& config, MPI_Comm comm = MPI_COMM_WORLD);

/// Each rank's throughput, measured, for Cluster::distribute_weighted (collective over `comm`,
/// like split_node: call it before the Cluster exists, since it makes MPI calls of its own). Every
/// rank times `probes` independent `gemm_<t>` tasks of `tile` x `tile` (t: f64 or f32 by
/// `double_precision`) on its Runtime — all its devices, placed by its policy, after one untimed
/// task per device — and the ranks exchange tasks per second: the same vector, indexed by rank, on
/// every rank. `probes` 0: four per device slot, at least 8. A rank whose runtime has no device
/// reports 0.
HCR_MPI_API std::vector<double> measure_throughput(Runtime& rt, MPI_Comm comm = MPI_COMM_WORLD,
                                                   size_t tile = 256, int probes = 0,
                                                   bool double_precision = true);

}  // namespace hcr::mpi
