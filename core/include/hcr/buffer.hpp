/// \file buffer.hpp
/// Buffers: typed, sized data the runtime tracks dependencies on and moves between memories.
///
/// \code
/// hcr::Buffer<float> a = rt.buffer<float>(1024, 1024);       // owned by hcr, zeroed
/// hcr::Buffer<float> t = rt.buffer<float>(64, 64, hcr::uninitialized);  // no zero fill
/// hcr::Buffer<float> b = rt.wrap(user_ptr, 1024, 1024);      // registered host memory
/// {
///   auto v = a.acquire(hcr::Access::write);   // waits for earlier tasks; later ones wait for v
///   v(0, 0) = 1.0f;
/// }                                           // released here
/// std::vector<float> host = b.to_vector();    // waits, copies out
/// \endcode
///
/// A buffer is a row-major matrix (a vector is 1 x n). Copies of a Buffer are handles to the same
/// data. Tasks that use a buffer are ordered by their access modes in submission order
/// (sequential consistency). Thread safety: handles may be used from any thread.
#pragma once

#include <hcr/detail/handles.hpp>
#include <hcr/error.hpp>
#include <hcr/event.hpp>
#include <hcr/kernel.hpp>
#include <hcr/types.hpp>

#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace hcr {

namespace detail {
struct BufferShape {
  size_t rows, cols, ld;
  DType dtype;
};
struct HostAccess {
  void* data;
  Ref<TaskNode> token;
};
struct TileGrid {
  size_t grid_rows = 0, grid_cols = 0;
  std::vector<Ref<BufferState>> tiles;  // row-major grid
  size_t halo = 0;                      // ghost width (partition with a Halo); 0: plain tiles
};
HCR_API BufferShape buffer_shape(const BufferState* b);
HCR_API HostAccess buffer_acquire(BufferState* b, Access mode);
HCR_API void buffer_release(TaskNode* token) noexcept;
/// Buffer::acquire_async's hook (layers such as hcr::mpi call it directly, with a record of their
/// own as `user`, to avoid the allocation of the callable). `fn` is called once per access: granted
/// (data, token set, error null) or failed before it was granted (data and token null, error set).
/// The callee owns the token's reference and ends the access with buffer_release_async.
using AsyncGrant = void (*)(void* user, void* data, TaskNode* token, std::exception_ptr error);
HCR_API void buffer_acquire_async(BufferState* b, Access mode, AsyncGrant fn, void* user);
HCR_API void buffer_release_async(TaskNode* token, std::exception_ptr error) noexcept;
HCR_API void buffer_set_reduction(BufferState* b, Reduction op);
HCR_API void buffer_set_reduction_kernels(BufferState* b, KernelState* identity,
                                          KernelState* combine);
HCR_API TileGrid buffer_partition(BufferState* b, size_t tile_rows, size_t tile_cols);
HCR_API TileGrid buffer_partition_halo(BufferState* b, size_t tile_rows, size_t tile_cols,
                                       size_t halo);
HCR_API Ref<TaskNode> buffer_unpartition(BufferState* b);  // the join
[[noreturn]] HCR_API void null_buffer();
}  // namespace detail

/// Tag asking Runtime::buffer and Runtime::vector to skip the zero fill.
struct Uninitialized {
  explicit constexpr Uninitialized() = default;
};
/// `rt.buffer<float>(rows, cols, hcr::uninitialized)`: contents unspecified until written.
inline constexpr Uninitialized uninitialized{};

template <class T>
class Buffer;

/// Host access to a buffer's data, from Buffer::acquire() until destruction (or release()).
/// Move-only. Tasks submitted after the acquire wait until the view is released.
template <class T>
class HostView {
 public:
  HostView(HostView&&) noexcept = default;
  HostView& operator=(HostView&&) noexcept = default;
  ~HostView() { release(); }

  T* data() const noexcept { return view_.data; }
  size_t rows() const noexcept { return view_.rows; }
  size_t cols() const noexcept { return view_.cols; }
  size_t ld() const noexcept { return view_.ld; }
  T& operator()(size_t r, size_t c) const noexcept { return view_(r, c); }
  const MatrixView<T>& view() const noexcept { return view_; }
  /// The elements as one span; only for contiguous buffers (not tiles of a wider matrix).
  std::span<T> span() const { return view_.span(); }
  void release() noexcept {
    if (token_) detail::buffer_release(token_.detach());
  }

 private:
  friend class Buffer<T>;
  HostView(MatrixView<T> v, detail::Ref<detail::TaskNode> token)
      : view_(v), token_(std::move(token)) {}
  MatrixView<T> view_;
  detail::Ref<detail::TaskNode> token_;
};

/// An asynchronous host access (Buffer::acquire_async), handed to its callback. Move-only.
///
/// Either granted (ok(): data() is the buffer's host memory, valid until release) or failed
/// before it was granted (error() is why: an earlier writer failed, or the runtime ended).
/// release() may be called from any thread, once; the destructor releases what was not released.
/// Releasing with an error finishes the access failed: later tasks that read what it may have
/// written fail with ErrorCode::dependency, as successors of a failed writer task do.
template <class T>
class AsyncAccess {
 public:
  AsyncAccess(AsyncAccess&&) noexcept = default;
  AsyncAccess& operator=(AsyncAccess&& o) noexcept {
    if (this != &o) {
      release();
      view_ = o.view_;
      token_ = std::move(o.token_);
      error_ = std::move(o.error_);
    }
    return *this;
  }
  ~AsyncAccess() { release(); }

  bool ok() const noexcept { return !error_; }
  /// Why the access failed before it was granted; null when granted.
  const std::exception_ptr& error() const noexcept { return error_; }
  T* data() const noexcept { return view_.data; }
  size_t rows() const noexcept { return view_.rows; }
  size_t cols() const noexcept { return view_.cols; }
  size_t ld() const noexcept { return view_.ld; }
  const MatrixView<T>& view() const noexcept { return view_; }
  /// Ends the access (any thread); `failure` non-null fails it with that error. No-op after
  /// the first call and on a failed access.
  void release(std::exception_ptr failure = nullptr) noexcept {
    if (token_) detail::buffer_release_async(token_.detach(), std::move(failure));
  }

  /// For Buffer::acquire_async's callback adapters.
  AsyncAccess(MatrixView<T> v, detail::TaskNode* token, std::exception_ptr error) noexcept
      : view_(v), token_(detail::Ref<detail::TaskNode>::adopt(token)), error_(std::move(error)) {}

 private:
  MatrixView<T> view_;
  detail::Ref<detail::TaskNode> token_;
  std::exception_ptr error_;
};

/// Ghost rows and columns around tiles: `buf.partition(512, 512, hcr::Halo{1})`.
struct Halo {
  size_t width = 0;  ///< ghost rows above and below, ghost columns left and right (0: none)
};

/// Where a halo tile's interior sits in the region its kernels see: the ghost rows above
/// (`top`) and below (`bottom`), the ghost columns left and right. 0 on a side where the tile
/// touches the border of the partitioned buffer (there are no ghosts beyond it).
struct Ghosts {
  size_t top = 0, left = 0, bottom = 0, right = 0;
};

/// A grid of tiles (sub-buffers) of a partitioned buffer; tile (i, j) covers rows
/// [i*tile_rows, ...) and columns [j*tile_cols, ...), edge tiles being smaller.
///
/// With a Halo (`partition(tile_rows, tile_cols, hcr::Halo{h})`), tile (i, j) is the region of its
/// interior and `h` ghost rows and columns on each side that has a neighbour (clamped at the
/// buffer's border: no ghost beyond it). Its rows() and cols() are the region's, and a kernel,
/// or a host view, sees the region: element (ghosts(i, j).top, ghosts(i, j).left) is the interior's
/// first. A task may write only the interior; the ghosts are its neighbours' interiors, read-only.
/// Ordering is automatic: a task that reads a halo tile waits for the earlier writers of its
/// neighbours (their edges are its ghosts), and a later writer of a neighbour waits for it, so
/// nothing needs refreshing by hand. In host memory (CPU) halo tiles are views of the partitioned
/// buffer's memory: ghosts are the neighbours' memory and nothing is copied (the kernel's `ld` is
/// the buffer's). On a device with its own memory (GPU, OpenCL) a tile is held as its region,
/// packed (`ld` == cols: row stride left + interior + right); before a task reads it there, the
/// runtime copies in the ghost edges whose neighbour was written since (from that device, host
/// memory or a peer: edges only, never whole neighbours), and a copy home carries the interior
/// only.
///
/// \code
/// auto tiles = grid.partition(512, 512, hcr::Halo{1});   // tiles(i, j): up to 514 x 514
/// for (size_t i = 0; i < tiles.rows(); ++i)
///   for (size_t j = 0; j < tiles.cols(); ++j) {
///     hcr::Ghosts g = tiles.ghosts(i, j);
///     rt.submit(hcr::Task(step).read(tiles(i, j)).write(next(i, j))
///                   .param(uint64_t{g.top}).param(uint64_t{g.left}));
///   }
/// \endcode
template <class T>
class Tiles {
 public:
  Tiles() = default;
  explicit Tiles(detail::TileGrid g) : g_(std::move(g)) {}
  size_t rows() const noexcept { return g_.grid_rows; }
  size_t cols() const noexcept { return g_.grid_cols; }
  Buffer<T> operator()(size_t i, size_t j) const;
  /// The ghost width the tiles were made with (0: plain tiles).
  size_t halo() const noexcept { return g_.halo; }
  /// Ghost rows and columns of tile (i, j) on each side (all 0 for plain tiles).
  Ghosts ghosts(size_t i, size_t j) const {
    (void)(*this)(i, j);  // the bounds check
    const size_t h = g_.halo;
    return {i > 0 ? h : 0, j > 0 ? h : 0, i + 1 < g_.grid_rows ? h : 0,
            j + 1 < g_.grid_cols ? h : 0};
  }

 private:
  detail::TileGrid g_;
};

/// Handle to a typed buffer. Cheap to copy; all copies name the same data.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(detail::Ref<detail::BufferState> s) : s_(std::move(s)) {}

  bool valid() const noexcept { return static_cast<bool>(s_); }
  size_t rows() const { return shape().rows; }
  size_t cols() const { return shape().cols; }
  /// Elements between row starts (cols, or the parent's width for a tile).
  size_t ld() const { return shape().ld; }
  size_t size() const { return rows() * cols(); }
  size_t bytes() const { return size() * sizeof(T); }

  /// Blocks until every earlier task that writes (for read) or uses (for write) this buffer has
  /// finished and the host copy is current; later tasks wait for the view's release. Throws
  /// Error(invalid_argument) instead of waiting forever when this thread holds a view it would
  /// wait for (a write view and any other view of the same data, or of a tile or the whole), or
  /// when called inside a kernel whose task uses the buffer.
  HostView<T> acquire(Access mode = Access::read_write) const {
    auto shape_ = shape();
    auto h = detail::buffer_acquire(state_or_throw(), mode);
    return HostView<T>(MatrixView<T>{static_cast<T*>(h.data), shape_.rows, shape_.cols, shape_.ld},
                       std::move(h.token));
  }
  /// The non-blocking acquire (StarPU's starpu_data_acquire_cb): takes its place in the buffer's
  /// order as acquire() does and returns at once. Once earlier conflicting tasks are done and the
  /// host copy is current, `callback(AsyncAccess<T>)` is called once, on a runtime thread (or on
  /// this one, before acquire_async returns, when nothing is in the way): it must not block. Later
  /// tasks on the buffer wait until the access is released, from any thread. When an earlier
  /// writer failed, or the runtime ends before the access could be granted, the callback gets a
  /// failed access (error() says why) instead. An exception thrown by the callback releases the
  /// access with that error.
  ///
  /// Unlike acquire(), no thread holds the access: the checks for a thread waiting on its own
  /// view do not apply, and Runtime::wait_all() waits for the release. Release every access
  /// before the runtime ends: its destructor ends accesses still granted, with an error logged,
  /// and fails those not yet granted with ErrorCode::shutdown.
  template <class F>
  void acquire_async(Access mode, F&& callback) const {
    using Fn = std::decay_t<F>;
    static_assert(std::is_invocable_v<Fn&, AsyncAccess<T>>, "callback(hcr::AsyncAccess<T>)");
    auto shape_ = shape();
    struct Holder {
      Fn fn;
      MatrixView<T> view;
    };
    auto holder = std::make_unique<Holder>(Holder{std::forward<F>(callback), {}});
    holder->view = MatrixView<T>{nullptr, shape_.rows, shape_.cols, shape_.ld};
    detail::AsyncGrant grant = [](void* user, void* data, detail::TaskNode* token,
                                  std::exception_ptr error) {
      std::unique_ptr<Holder> h(static_cast<Holder*>(user));
      MatrixView<T> v = h->view;
      v.data = static_cast<T*>(data);
      h->fn(AsyncAccess<T>(v, token, std::move(error)));
    };
    detail::buffer_acquire_async(state_or_throw(), mode, grant, holder.get());
    holder.release();  // the callback owns it now
  }
  /// The elements, row by row, once earlier writers have finished.
  std::vector<T> to_vector() const {
    auto v = acquire(Access::read);
    std::vector<T> out(v.rows() * v.cols());
    for (size_t r = 0; r < v.rows(); ++r)
      std::memcpy(out.data() + r * v.cols(), v.data() + r * v.ld(), v.cols() * sizeof(T));
    return out;
  }

  /// Declares how tasks reduce into this buffer (Access::reduce, Task::reduce): a built-in
  /// reduction over f32, f64, i32 or i64 elements. Contributions still waiting to be combined are
  /// combined first, with the reduction they were made under. Throws Error(invalid_argument) for
  /// another element type.
  ///
  /// \code
  /// auto dot = rt.buffer<float>(1, 1);
  /// dot.set_reduction(hcr::Reduction::sum);
  /// for (size_t i = 0; i < n; ++i)   // no task waits for another: each adds into its own copy
  ///   rt.submit(hcr::Task(partial_dot).read(x_tiles(i, 0)).read(y_tiles(i, 0)).reduce(dot));
  /// float result = dot.to_vector()[0];  // the copies are combined into `dot` first
  /// \endcode
  void set_reduction(Reduction op) { detail::buffer_set_reduction(state_or_throw(), op); }
  /// The same with the user's kernels: `identity` gets a task's private copy as its one argument
  /// (write) and fills it with the identity; `combine` gets (destination: read_write, source:
  /// read), both of this buffer's shape and type, and folds the source into the destination. Both
  /// run as tasks like any other, on whichever device implements them.
  void set_reduction(const Kernel& identity, const Kernel& combine) {
    detail::buffer_set_reduction_kernels(state_or_throw(), identity.state(), combine.state());
  }
  /// Splits the buffer into tiles of tile_rows x tile_cols without copying. Until unpartition(),
  /// tasks use the tiles and the buffer itself may not be used.
  Tiles<T> partition(size_t tile_rows, size_t tile_cols) {
    return Tiles<T>(detail::buffer_partition(state_or_throw(), tile_rows, tile_cols));
  }
  /// The same, each tile with `halo.width` ghost rows and columns of its neighbours (see Tiles).
  /// Throws Error(invalid_argument) when the ghosts would reach past a neighbour: a width wider
  /// than a tile (the smaller edge tiles included).
  Tiles<T> partition(size_t tile_rows, size_t tile_cols, Halo halo) {
    return Tiles<T>(
        detail::buffer_partition_halo(state_or_throw(), tile_rows, tile_cols, halo.width));
  }
  /// Joins the tiles back: later uses of the buffer wait for every task on the tiles. The
  /// returned event completes once they have (and fails if a task that wrote a tile failed).
  Event unpartition();

  detail::BufferState* state() const noexcept { return s_.get(); }
  friend bool operator==(const Buffer& a, const Buffer& b) noexcept { return a.s_ == b.s_; }

 private:
  detail::BufferState* state_or_throw() const {
    if (!s_) detail::null_buffer();
    return s_.get();
  }
  detail::BufferShape shape() const { return detail::buffer_shape(state_or_throw()); }
  detail::Ref<detail::BufferState> s_;
};

template <class T>
Event Buffer<T>::unpartition() {
  return Event(detail::buffer_unpartition(state_or_throw()));
}

template <class T>
Buffer<T> Tiles<T>::operator()(size_t i, size_t j) const {
  if (i >= g_.grid_rows || j >= g_.grid_cols)
    throw Error(ErrorCode::invalid_argument,
                "tile (" + std::to_string(i) + ", " + std::to_string(j) + ") outside a " +
                    std::to_string(g_.grid_rows) + "x" + std::to_string(g_.grid_cols) + " grid");
  return Buffer<T>(g_.tiles[i * g_.grid_cols + j]);
}

}  // namespace hcr
