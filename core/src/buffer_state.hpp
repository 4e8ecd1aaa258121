// The runtime's record of one buffer: shape, host data, dependency frontier, partition.
#pragma once

#include <hcr/detail/spin_lock.hpp>

#include <hcr/buffer.hpp>
#include <hcr/types.hpp>

#include <boost/container/small_vector.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace hcr::detail {

struct TaskNode;
struct BufferData;
struct BufferState;
struct ReductionState;
class RuntimeCore;

struct BufferState {
  std::atomic<uint32_t> refs{1};
  std::shared_ptr<RuntimeCore> rt;
  DType dtype = DType::bytes;
  size_t elem = 1;
  size_t rows = 0, cols = 0, ld = 0;
  std::byte* host = nullptr;  // element (0, 0)
  void* owned = nullptr;      // freed with the buffer when hcr allocated it, as `how` says
  size_t owned_bytes = 0;
  enum class Owned : uint8_t { heap, pool, mapping } how = Owned::heap;

  // A tile of a partitioned buffer: `parent` and its position.
  Ref<BufferState> parent;
  size_t row0 = 0, col0 = 0;
  std::atomic<bool> detached{false};  // the parent was unpartitioned: this tile is dead
  // A halo tile (partition with a Halo): rows, cols, row0, col0 and host are its region's (its
  // interior and the ghosts around it); `halo` is the ghost width and grid_* its place in the
  // grid, through which its neighbours are found in the parent's `tiles` (engine/halo_reads.hpp).
  uint32_t halo = 0;  // 0: no ghosts
  uint32_t grid_i = 0, grid_j = 0, grid_rows = 0, grid_cols = 0;
  // The halo tiles of its partition, kept past unpartition (which empties the parent's `tiles`)
  // for the tasks submitted before it that still fill their ghosts on a device (data/ghosts.hpp).
  std::shared_ptr<struct HaloGrid> halo_grid;

  // Dependency frontier (sequential consistency), guarded by `lock`. References held.
  SpinLock lock;
  TaskNode* last_writer = nullptr;
  boost::container::small_vector<TaskNode*, 4> readers;
  size_t prune_readers_at = 16;  // list length at which finished readers are next dropped
  // A run of commute accesses (task_graph.cpp), under `lock`, references held. While the run is
  // open (the last access was commute), `before_run` is what came before it, which each task
  // joining the run waits for, and last_writer and readers are empty. Once another access closes
  // it, `commuters` are the writers that later accesses wait for (last_writer stays empty until
  // the next write). Both empty: no run.
  struct Before {
    TaskNode* task;
    bool data;  // it wrote the buffer: its failure is the run's
  };
  boost::container::small_vector<TaskNode*, 2> commuters;
  boost::container::small_vector<Before, 2> before_run;
  bool run_open = false;
  size_t prune_commuters_at = 16;
  // Mutual exclusion among the tasks of a run (engine/commute_locks.hpp), under `lock`: the task
  // that holds the buffer, and those waiting for it, first to last (TaskNode::commute_next).
  TaskNode* commute_holder = nullptr;
  TaskNode* commute_first = nullptr;
  TaskNode* commute_last = nullptr;

  // Partition state, guarded by `lock`. The tiles hold their parent; the parent knows them by
  // plain pointer only (a tile's destructor clears its slot), so no reference cycle forms.
  bool partitioned = false;
  std::vector<BufferState*> tiles;

  // Its declared reduction and the private copies of its reduce accesses (engine/reductions.hpp),
  // made on the first Buffer::set_reduction, owned, never replaced.
  std::atomic<ReductionState*> reduction{nullptr};
  // Replicas on device memory nodes (data_manager.cpp); null while only host memory was used.
  std::atomic<BufferData*> data{nullptr};

  size_t bytes() const noexcept { return rows * cols * elem; }
  ~BufferState();

  // Buffers come from a per-thread pool, as tasks do (node_pool.hpp): made in a submit loop, freed
  // by the worker that ran their last task.
  static void* operator new(size_t size);
  static void operator delete(void* p) noexcept;
};

/// The halo tiles of one partition by plain pointer (row-major), each slot cleared by its tile's
/// destructor, so that none holds another alive (its neighbours are found here).
struct HaloGrid {
  SpinLock lock;
  std::vector<BufferState*> tiles;
};

/// A reference to `b` unless its count already reached 0 (it is being destroyed).
inline bool try_retain(BufferState* b) noexcept {
  uint32_t r = b->refs.load(std::memory_order_relaxed);
  while (r != 0)
    if (b->refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel)) return true;
  return false;
}

/// The one walk over a halo tile's neighbours (the dependency order's, engine/halo_reads.hpp, and
/// the ghosts', data/ghosts.hpp): calls `f(nb, di, dj)` for each place (di, dj) around `h` that is
/// inside its grid, `nb` the tile there with a reference taken for `f`, or null when that tile is
/// gone (its count reached 0; its data is home). Found through `h`'s HaloGrid, under its lock:
/// `f` must not take it again, nor release a reference there (one may be the last).
template <class F>
void for_each_halo_neighbour(const BufferState& h, F&& f) {
  HaloGrid& grid = *h.halo_grid;
  grid.lock.lock();
  for (int di = -1; di <= 1; ++di)
    for (int dj = -1; dj <= 1; ++dj) {
      const int64_t i = int64_t{h.grid_i} + di, j = int64_t{h.grid_j} + dj;
      if ((di == 0 && dj == 0) || i < 0 || j < 0 || i >= h.grid_rows || j >= h.grid_cols) continue;
      BufferState* nb = grid.tiles[static_cast<size_t>(i) * h.grid_cols + j];
      f(nb != nullptr && try_retain(nb) ? nb : nullptr, di, dj);
    }
  grid.lock.unlock();
}

/// A rectangle of elements in the coordinates of the partitioned buffer (or of the buffer itself).
struct ElementRect {
  size_t row0 = 0, col0 = 0, rows = 0, cols = 0;
};

/// What `b` holds as its own data: a halo tile's interior (its region less the ghosts, which are
/// its neighbours' data), any other buffer's whole shape.
inline ElementRect own_elements(const BufferState& b) noexcept {
  if (b.halo == 0) return {b.row0, b.col0, b.rows, b.cols};
  const size_t top = b.grid_i > 0 ? b.halo : 0, left = b.grid_j > 0 ? b.halo : 0;
  const size_t bottom = b.grid_i + 1 < b.grid_rows ? b.halo : 0;
  const size_t right = b.grid_j + 1 < b.grid_cols ? b.halo : 0;
  return {b.row0 + top, b.col0 + left, b.rows - top - bottom, b.cols - left - right};
}

/// For messages: "4x4 f32 buffer", "2x2 f32 tile at (0, 2) of a 4x4 buffer".
inline std::string describe(const BufferState& b) {
  std::string s = std::to_string(b.rows) + "x" + std::to_string(b.cols) + " " +
                  std::string(dtype_name(b.dtype));
  if (!b.parent) return s + " buffer";
  return s + (b.halo != 0 ? " halo tile at (" : " tile at (") + std::to_string(b.row0) + ", " +
         std::to_string(b.col0) + ") of a " + std::to_string(b.parent->rows) + "x" +
         std::to_string(b.parent->cols) + " buffer";
}

/// A buffer of hcr's own memory (Runtime::buffer's): contiguous, zeroed when `zero`.
Ref<BufferState> make_owned_buffer(std::shared_ptr<RuntimeCore> rt, DType dtype, size_t rows,
                                   size_t cols, bool zero);

/// "read", "write", "read_write", "commute", "reduce".
inline const char* access_name(Access a) noexcept {
  switch (a) {
    case Access::read: return "read";
    case Access::write: return "write";
    case Access::read_write: return "read_write";
    case Access::commute: return "commute";
    case Access::reduce: return "reduce";
  }
  return "?";
}

}  // namespace hcr::detail
