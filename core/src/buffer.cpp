// Buffers: creation, host access (acquire/release), and partitioning into tiles.
#include "buffer_state.hpp"
#include "data/data_manager.hpp"
#include "engine/halo_reads.hpp"
#include "engine/reductions.hpp"
#include "node_pool.hpp"
#include "runtime_core.hpp"

#include <hcr/runtime.hpp>

#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/mman.h>
#include <utility>

namespace hcr::detail {

namespace {
std::string shape_text(const BufferState& b) {
  return std::to_string(b.rows) + "x" + std::to_string(b.cols);
}
}  // namespace

// Small buffers' elements come from a pool too: a buffer made per task costs no malloc.
constexpr size_t kSmallData = 256;
using BufferPool = NodePool<sizeof(BufferState), alignof(BufferState)>;
using SmallDataPool = NodePool<kSmallData, 64>;

void* BufferState::operator new(size_t size) {
  if (size != sizeof(BufferState)) return ::operator new(size);
  return BufferPool::allocate();
}
void BufferState::operator delete(void* p) noexcept { BufferPool::deallocate(p); }

void retain(BufferState* p) noexcept { p->refs.fetch_add(1, std::memory_order_relaxed); }
void release(BufferState* p) noexcept {
  if (p->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
}

BufferState::~BufferState() {
  if (BufferData* d = data.load(std::memory_order_acquire)) {
    rt->data().forget(*this);
    delete d;
  }
  if (last_writer) release(last_writer);
  for (TaskNode* r : readers) release(r);
  for (TaskNode* c : commuters) release(c);
  for (const Before& x : before_run) release(x.task);
  if (parent) {  // forget us in the parent's grid (it holds plain pointers)
    parent->lock.lock();
    for (BufferState*& slot : parent->tiles)
      if (slot == this) slot = nullptr;
    parent->lock.unlock();
  }
  if (halo_grid) {
    halo_grid->lock.lock();
    halo_grid->tiles[size_t{grid_i} * grid_cols + grid_j] = nullptr;
    halo_grid->lock.unlock();
  }
  delete reduction.load(std::memory_order_acquire);
  if (owned != nullptr) switch (how) {
      case Owned::heap: std::free(owned); break;
      case Owned::pool: SmallDataPool::deallocate(owned); break;
      case Owned::mapping: munmap(owned, owned_bytes); break;
    }
}

Ref<BufferState> make_owned_buffer(std::shared_ptr<RuntimeCore> rt, DType t, size_t rows,
                                   size_t cols, bool zero) {
  const size_t elem = dtype_size(t);
  auto* b = new BufferState();
  auto ref = Ref<BufferState>::adopt(b);
  b->rt = std::move(rt);
  b->dtype = t;
  b->elem = elem;
  b->rows = rows;
  b->cols = cols;
  b->ld = cols;
  using Owned = BufferState::Owned;
  const size_t bytes = rows * cols * elem;
  const size_t padded = (bytes + 63) / 64 * 64;
  if (padded <= kSmallData) {
    b->owned = SmallDataPool::allocate();
    b->how = Owned::pool;
    if (zero) std::memset(b->owned, 0, padded);
  } else if (zero && bytes >= (size_t{1} << 20)) {
    // Large and zeroed: fresh pages from the kernel are zero already and appear where first
    // touched, so creating the buffer costs nothing and the first writer (a task on some core)
    // places it.
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error(ErrorCode::out_of_memory,
                  "cannot allocate a " + std::to_string(bytes) + "-byte buffer");
    b->owned = p;
    b->owned_bytes = bytes;
    b->how = Owned::mapping;
  } else {  // malloc reuses what earlier buffers freed: no system call in a steady loop
    b->owned = std::aligned_alloc(64, padded);
    if (b->owned == nullptr)
      throw Error(ErrorCode::out_of_memory,
                  "cannot allocate a " + std::to_string(bytes) + "-byte buffer");
    b->how = Owned::heap;
    if (zero) std::memset(b->owned, 0, padded);
  }
  b->host = static_cast<std::byte*>(b->owned);
  return ref;
}

BufferShape buffer_shape(const BufferState* b) { return {b->rows, b->cols, b->ld, b->dtype}; }

void null_buffer() { throw Error(ErrorCode::invalid_argument, "use of an empty Buffer handle"); }

namespace {
void check_usable(BufferState* b, const char* what) {
  b->rt->check_alive(what);
  if (b->detached.load(std::memory_order_acquire))
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": the " + describe(*b) +
                                                 " no longer exists: the buffer was unpartitioned");
}

// What acquire and acquire_async both refuse: a dead buffer, a mode that is no host access, a
// partitioned buffer (its tiles are what tasks use).
void check_host_access(BufferState* b, Access mode, const char* what) {
  check_usable(b, what);
  if (mode != Access::read && mode != Access::write && mode != Access::read_write)
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": access mode " +
                                                 std::to_string(static_cast<int>(mode)) +
                                                 " is not read, write or read_write");
  b->lock.lock();
  bool partitioned = b->partitioned;
  b->lock.unlock();
  if (partitioned)
    throw Error(ErrorCode::invalid_argument, std::string(what) + " of a partitioned " +
                                                 shape_text(*b) + " buffer: unpartition it first");
}

// Submits a task that runs nowhere, with the given buffer accesses.
TaskNode* make_join(RuntimeCore& rt, TaskKind kind) {
  auto* t = new TaskNode;
  t->kind = kind;
  t->rt = &rt;
  return t;
}
}  // namespace

HostAccess buffer_acquire(BufferState* b, Access mode) {
  check_host_access(b, mode, "acquire");
  combine_reductions(*b);
  // A second view of the same data from the thread that holds the first would wait for itself,
  // and so would a kernel waiting for data its own task uses.
  b->rt->host().check_view_conflict(*b, mode);
  b->rt->pauses().check_not_held(*b, mode);
  if (const TaskNode* running = running_cpu_task();
      running != nullptr && running->rt == b->rt.get())
    for (const ArgRec& a : running->args) {
      if (a.buffer == b && (writes(mode) || writes(a.access)))
        throw Error(ErrorCode::invalid_argument,
                    "acquire(" + std::string(access_name(mode)) + ") of a " + describe(*b) +
                        " inside kernel '" + running->kernel->name + "', whose task has it as " +
                        access_name(a.access) +
                        " argument: it would wait forever for that task; use ctx.arg() instead");
      if (ordered_through_ghosts(*a.buffer, a.access, *b, mode))
        throw Error(ErrorCode::invalid_argument,
                    "acquire(" + std::string(access_name(mode)) + ") of a " + describe(*b) +
                        " inside kernel '" + running->kernel->name + "', whose task has the " +
                        "neighbouring " + describe(*a.buffer) + " as " + access_name(a.access) +
                        " argument: one reads the other's edge through its ghosts, so it would "
                        "wait forever for that task");
    }
  TaskNode* t = make_join(*b->rt, TaskKind::host_access);
  retain(b);
  t->args.push_back({b, mode});
  Ref<TaskNode> token = Ref<TaskNode>::share(t);
  b->rt->submit(t);
  while (t->granted.load(std::memory_order_acquire) == 0 &&
         t->state.load(std::memory_order_acquire) == kPending)
    t->granted.wait(0, std::memory_order_acquire);
  if (t->state.load(std::memory_order_acquire) == kFailed) {
    // A task that wrote this data failed: the host must not read garbage silently.
    std::exception_ptr e = t->error;
    std::rethrow_exception(e);
  }
  b->rt->host().view_granted(t);
  retain(b);
  t->view = b;
  return {b->host, std::move(token)};
}

void buffer_release(TaskNode* token) noexcept {
  token->rt->host().view_released(token);
  // Whoever moves `granted` from 1 ends the access (here, or the runtime's end while this view
  // was still held: HostAccesses::end_views_of_this_thread).
  if (token->granted.exchange(2, std::memory_order_acq_rel) == 1) token->rt->finish(token, nullptr);
  if (BufferState* b = std::exchange(token->view, nullptr)) release(b);
  release(token);
}

void buffer_acquire_async(BufferState* b, Access mode, AsyncGrant fn, void* user) {
  check_host_access(b, mode, "acquire_async");
  combine_reductions(*b);
  // No thread holds an async access, so none of acquire's self-wait checks apply: nothing blocks.
  TaskNode* t = make_join(*b->rt, TaskKind::host_access);
  retain(b);
  t->args.push_back({b, mode});
  retain(b);  // the access's own: its memory outlives the task if the runtime's end finishes it
  t->view = b;
  t->grant_fn = fn;
  t->grant_user = user;
  b->rt->submit(t);  // takes our reference; HostAccesses::grant_async hands the callback another
}

void buffer_release_async(TaskNode* token, std::exception_ptr error) noexcept {
  RuntimeCore* rt = token->rt;
  rt->host().async_released(token);
  rt->host().end_async(token, std::move(error));
  if (BufferState* b = std::exchange(token->view, nullptr)) release(b);
  release(token);
}

void combine_contributions(BufferState& b) { b.rt->reductions().combine(b); }

void buffer_set_reduction(BufferState* b, Reduction op) {
  check_usable(b, "set_reduction");
  b->rt->reductions().declare(*b, op);
}

void buffer_set_reduction_kernels(BufferState* b, KernelState* identity, KernelState* combine) {
  check_usable(b, "set_reduction");
  b->rt->reductions().declare(*b, identity, combine);
}

namespace {
TileGrid partition(BufferState* b, size_t tile_rows, size_t tile_cols, size_t halo) {
  check_usable(b, "partition");
  if (tile_rows == 0 || tile_cols == 0)
    throw Error(ErrorCode::invalid_argument, "partition into " + std::to_string(tile_rows) + "x" +
                                                 std::to_string(tile_cols) +
                                                 " tiles: tiles need at least one element");
  const size_t grid_rows = (b->rows + tile_rows - 1) / tile_rows;
  const size_t grid_cols = (b->cols + tile_cols - 1) / tile_cols;
  if (halo != 0) {
    // Ghosts come from the adjacent tiles only: none may be narrower than the ghosts (the last
    // row and column of tiles may be smaller than the others).
    const size_t fewest_rows = std::min(tile_rows, b->rows - (grid_rows - 1) * tile_rows);
    const size_t fewest_cols = std::min(tile_cols, b->cols - (grid_cols - 1) * tile_cols);
    const bool rows_short = grid_rows > 1 && halo > fewest_rows;
    const bool cols_short = grid_cols > 1 && halo > fewest_cols;
    if (rows_short || cols_short)
      throw Error(ErrorCode::invalid_argument,
                  "partition of a " + shape_text(*b) + " buffer into " + std::to_string(tile_rows) +
                      "x" + std::to_string(tile_cols) + " tiles with hcr::Halo{" +
                      std::to_string(halo) + "}: the ghosts are wider " +
                      "than a tile, which has " +
                      (rows_short ? std::to_string(fewest_rows) + " rows"
                                  : std::to_string(fewest_cols) + " columns") +
                      " (a halo may be at most as wide as the smallest tile)");
    if (halo > UINT32_MAX || grid_rows > UINT32_MAX || grid_cols > UINT32_MAX)
      throw Error(ErrorCode::invalid_argument,
                  "partition with hcr::Halo{" + std::to_string(halo) + "}: implausibly large");
  }
  if (b->halo != 0)
    throw Error(ErrorCode::invalid_argument,
                "partition of a " + describe(*b) +
                    ": a tile with ghosts cannot be partitioned again (its region overlaps its "
                    "neighbours')");
  combine_reductions(*b);
  b->lock.lock();
  bool partitioned = b->partitioned;
  b->partitioned = true;  // from here on, tasks must use the tiles
  b->lock.unlock();
  if (partitioned)
    throw Error(ErrorCode::invalid_argument,
                "the " + shape_text(*b) + " buffer is already partitioned");

  // The tiles start after every earlier use of the whole buffer.
  TaskNode* join = make_join(*b->rt, TaskKind::join);
  retain(b);
  join->args.push_back({b, Access::read_write});
  retain(join);  // ours, to seed the tiles' frontiers
  b->rt->submit(join);

  TileGrid grid;
  grid.grid_rows = grid_rows;
  grid.grid_cols = grid_cols;
  grid.halo = halo;
  grid.tiles.reserve(grid.grid_rows * grid.grid_cols);
  std::shared_ptr<HaloGrid> halo_grid;
  if (halo != 0) {
    halo_grid = std::make_shared<HaloGrid>();
    halo_grid->tiles.assign(grid_rows * grid_cols, nullptr);
  }
  for (size_t i = 0; i < grid.grid_rows; ++i)
    for (size_t j = 0; j < grid.grid_cols; ++j) {
      auto* c = new BufferState();
      c->rt = b->rt;
      c->dtype = b->dtype;
      c->elem = b->elem;
      c->row0 = i * tile_rows;
      c->col0 = j * tile_cols;
      c->rows = std::min(tile_rows, b->rows - c->row0);
      c->cols = std::min(tile_cols, b->cols - c->col0);
      if (halo != 0) {  // the region: the interior grown by the ghosts on each side inside b
        const size_t top = i > 0 ? halo : 0, left = j > 0 ? halo : 0;
        const size_t bottom = i + 1 < grid_rows ? halo : 0, right = j + 1 < grid_cols ? halo : 0;
        c->row0 -= top;
        c->col0 -= left;
        c->rows += top + bottom;
        c->cols += left + right;
        c->halo = static_cast<uint32_t>(halo);
        c->grid_i = static_cast<uint32_t>(i);
        c->grid_j = static_cast<uint32_t>(j);
        c->grid_rows = static_cast<uint32_t>(grid_rows);
        c->grid_cols = static_cast<uint32_t>(grid_cols);
        c->halo_grid = halo_grid;
        halo_grid->tiles[i * grid_cols + j] = c;  // (no other thread sees the grid yet)
      }
      c->ld = b->ld;
      c->host = b->host + (c->row0 * b->ld + c->col0) * b->elem;
      c->parent = Ref<BufferState>::share(b);
      retain(join);
      c->last_writer = join;
      grid.tiles.push_back(Ref<BufferState>::adopt(c));
    }
  release(join);

  b->lock.lock();
  b->tiles.clear();
  for (auto& t : grid.tiles) b->tiles.push_back(t.get());
  b->lock.unlock();
  return grid;
}
}  // namespace

TileGrid buffer_partition(BufferState* b, size_t tile_rows, size_t tile_cols) {
  return partition(b, tile_rows, tile_cols, 0);
}

TileGrid buffer_partition_halo(BufferState* b, size_t tile_rows, size_t tile_cols, size_t halo) {
  return partition(b, tile_rows, tile_cols, halo);
}

Ref<TaskNode> buffer_unpartition(BufferState* b) {
  b->rt->check_alive("unpartition");
  b->lock.lock();
  if (!b->partitioned) {
    b->lock.unlock();
    throw Error(ErrorCode::invalid_argument,
                "unpartition of a " + shape_text(*b) + " buffer that is not partitioned");
  }
  std::vector<BufferState*> alive;
  for (BufferState* slot : b->tiles)
    if (slot && try_retain(slot)) alive.push_back(slot);
  // A tile partitioned in turn: tasks on its own tiles are not in its frontier, so the join
  // could not wait for them. Its tiles must be joined first.
  for (BufferState* c : alive) {
    c->lock.lock();
    const bool nested = c->partitioned;
    c->lock.unlock();
    if (nested) {
      const std::string what = shape_text(*c) + " tile at (" + std::to_string(c->row0) + ", " +
                               std::to_string(c->col0) + ")";
      b->lock.unlock();  // first: dropping the last reference to a tile takes b->lock
      for (BufferState* x : alive) release(x);
      throw Error(ErrorCode::invalid_argument,
                  "unpartition of a " + shape_text(*b) + " buffer whose " + what +
                      " is partitioned itself: unpartition that tile first");
    }
  }
  b->tiles.clear();
  b->lock.unlock();
  for (BufferState* c : alive) combine_reductions(*c);

  // The whole buffer comes back after every task on any tile; the join takes the tiles'
  // references we just made.
  TaskNode* join = make_join(*b->rt, TaskKind::join);
  for (BufferState* c : alive) {
    join->args.push_back({c, Access::read_write});
    c->detached.store(true, std::memory_order_release);
  }
  retain(join);  // becomes the buffer's last writer
  Ref<TaskNode> event = Ref<TaskNode>::share(join);
  b->rt->submit(join);

  b->lock.lock();
  b->partitioned = false;
  for (TaskNode* r : b->readers) release(r);
  b->readers.clear();
  for (TaskNode* c : b->commuters) release(c);  // (the partition's join closed any run)
  b->commuters.clear();
  for (const BufferState::Before& x : b->before_run) release(x.task);
  b->before_run.clear();
  b->run_open = false;
  if (b->last_writer) release(b->last_writer);
  b->last_writer = join;
  b->lock.unlock();
  return event;
}

}  // namespace hcr::detail

namespace hcr {

detail::Ref<detail::BufferState> Runtime::make_buffer(DType t, size_t rows, size_t cols, void* data,
                                                      size_t ld, bool zero) {
  core_->check_alive("buffer");
  if (rows == 0 || cols == 0)
    throw Error(ErrorCode::invalid_argument, "buffer of " + std::to_string(rows) + "x" +
                                                 std::to_string(cols) +
                                                 " elements: both must be at least 1");
  if (ld < cols)
    throw Error(ErrorCode::invalid_argument, "leading dimension " + std::to_string(ld) +
                                                 " is less than the " + std::to_string(cols) +
                                                 " columns");
  size_t elem = dtype_size(t);
  if (rows > SIZE_MAX / ld / elem)
    throw Error(ErrorCode::invalid_argument,
                "buffer of " + std::to_string(rows) + "x" + std::to_string(ld) + " overflows");
  if (data == nullptr) return detail::make_owned_buffer(core_, t, rows, cols, zero);
  auto* b = new detail::BufferState();
  auto ref = detail::Ref<detail::BufferState>::adopt(b);
  b->rt = core_;
  b->dtype = t;
  b->elem = elem;
  b->rows = rows;
  b->cols = cols;
  b->ld = ld;
  b->host = static_cast<std::byte*>(data);
  return ref;
}

}  // namespace hcr
