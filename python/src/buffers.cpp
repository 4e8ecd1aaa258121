// hcr.Buffer over NumPy memory: wrapping without a copy (and the clear errors where the layout
// does not allow it), host views that follow acquire/release, tiles, and the lifetime rule: the
// memory stays referenced until every task submitted before the Buffer object died has finished.
#include "binding.hpp"

#include <cstring>

namespace hcrpy {

namespace {

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a.shape(i));
  }
  if (a.ndim() == 1) s += ",";
  return s + ")";
}

std::string strides_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a.strides(i));
  }
  if (a.ndim() == 1) s += ",";
  return s + ")";
}

AnyBuffer make_wrapped(hcr::Runtime& rt, hcr::DType dt, void* data, size_t rows, size_t cols,
                       size_t ld) {
  return visit_dtype(dt, [&](auto tag) -> AnyBuffer {
    using T = typename decltype(tag)::type;
    return rt.wrap(static_cast<T*>(data), rows, cols, ld);
  });
}

/// The object a kernel's or view's array keeps alive when nothing else should be (a sentinel).
py::handle sentinel_base() {
  static PyObject* s = [] {
    PyObject* o = PyUnicode_FromString("hcr host view");
    return o;
  }();
  return s;
}

/// A host access in progress (hcr.HostView): the typed C++ view and the NumPy array over it.
struct HostViewObj {
  std::variant<std::monostate, hcr::HostView<hcr::half>, hcr::HostView<float>,
               hcr::HostView<double>, hcr::HostView<int32_t>, hcr::HostView<int64_t>,
               hcr::HostView<uint8_t>>
      view;
  py::object array;
  py::object buffer;
  hcr::Access mode = hcr::Access::read;

  bool active() const { return view.index() != 0; }
  void release() {
    if (!active()) return;
    view = std::monostate{};  // the HostView's destructor releases
    // The array stays valid memory (its base keeps it), but writes through it after the release
    // would race with later tasks: it becomes read-only.
    if (array) clear_writeable(array);
  }
};

/// A grid of tiles of a partitioned buffer (hcr.Tiles).
struct TilesObj {
  py::object parent;
  size_t grid_rows = 0, grid_cols = 0;
  std::vector<py::object> tiles;

  py::object at(size_t i, size_t j) const {
    if (i >= grid_rows || j >= grid_cols)
      throw hcr::Error(hcr::ErrorCode::invalid_argument,
                       "tile (" + std::to_string(i) + ", " + std::to_string(j) + ") outside a " +
                           std::to_string(grid_rows) + "x" + std::to_string(grid_cols) + " grid");
    return tiles[i * grid_cols + j];
  }
};

py::object new_buffer_object(std::unique_ptr<BufferObj> b) {
  return py::cast(std::move(b), py::return_value_policy::take_ownership);
}

}  // namespace

hcr::detail::BufferState* BufferObj::state() const {
  return std::visit([](const auto& b) { return b.state(); }, buf);
}

std::string BufferObj::describe() const {
  return "the " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
         std::string(hcr::dtype_name(dtype)) + (is_tile ? " tile" : " buffer");
}

void BufferObj::check_writable(const char* what, hcr::Access mode) const {
  if (readonly && hcr::writes(mode))
    throw_invalid(std::string(what) + ": " + describe() +
                  " wraps read-only memory (a NumPy array whose flags.writeable is False): it "
                  "cannot be given '" +
                  access_name(mode) + "' access");
}

BufferObj::~BufferObj() {
  uint64_t retirement = 0;
  if (wrap_key && holder) {
    std::lock_guard lock(holder->mutex);
    auto it = holder->wraps.find(*wrap_key);
    if (it != holder->wraps.end() && it->second.live == this) {
      it->second.live = nullptr;
      if (used && holder->rt) {
        it->second.retiring = buf;
        it->second.retiring_since = retirement = ++holder->retirements;
      } else if (!it->second.retiring) {
        holder->wraps.erase(it);
      }
    }
  }
  if (!used || !holder || holder->closed()) return;  // nothing may still use the memory
  // Tasks submitted before this object died may still use the memory: an asynchronous write
  // access, ordered after all of them, drops the references once they are done (and ends the
  // wrap's retirement: a later wrap of the memory is a new buffer).
  auto keep = std::make_unique<KeepAlive>();
  keep->owner = PyRef(std::move(owner));
  keep->parent = PyRef(std::move(parent));
  KeepAlive* raw = keep.get();
  std::weak_ptr<RuntimeHolder> weak = holder;
  std::optional<WrapKey> key = wrap_key;
  try {
    std::visit(
        [&](auto& b) {
          b.acquire_async(hcr::Access::read_write, [raw, weak, key, retirement](auto access) {
            access.release();
            delete raw;
            if (auto h = weak.lock(); h && key) {
              std::lock_guard lock(h->mutex);
              auto it = h->wraps.find(*key);
              if (it != h->wraps.end() && it->second.retiring_since == retirement) {
                it->second.retiring.reset();
                if (it->second.live == nullptr) h->wraps.erase(it);
              }
            }
          });
        },
        buf);
    keep.release();  // the callback owns it
  } catch (...) {
    // A buffer still partitioned (or a runtime ending meanwhile): kept until the runtime closes,
    // and a new wrap of the memory adopts it.
    holder->park(std::move(keep));
  }
}

BufferObj& as_buffer(py::handle o) {
  if (!py::isinstance<BufferObj>(o))
    throw_invalid("expected an hcr.Buffer, got " +
                  py::cast<std::string>(py::str(py::type::handle_of(o).attr("__name__"))));
  return py::cast<BufferObj&>(o);
}

py::array make_view(hcr::DType dtype, void* data, size_t rows, size_t cols, size_t ld, int ndim,
                    bool writeable, py::handle base) {
  py::dtype dt = numpy_dtype(dtype);
  const auto isz = static_cast<py::ssize_t>(dt.itemsize());
  std::vector<py::ssize_t> shape, strides;
  if (ndim == 1) {
    shape = {static_cast<py::ssize_t>(rows * cols)};
    strides = {isz};
  } else {
    shape = {static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)};
    strides = {static_cast<py::ssize_t>(ld) * isz, isz};
  }
  py::array a(dt, shape, strides, data, base ? base : sentinel_base());
  if (!writeable) clear_writeable(a);
  return a;
}

/// The buffer of memory at `key`: the live one, the one its tasks still use (adopted), or new.
py::object wrap_registered(const std::shared_ptr<RuntimeHolder>& holder, const WrapKey& key,
                           py::object owner) {
  auto rt = holder->get();
  std::optional<AnyBuffer> adopted;
  {
    std::lock_guard lock(holder->mutex);
    if (auto it = holder->wraps.find(key); it != holder->wraps.end()) {
      if (it->second.live != nullptr)  // the live Python object
        return py::cast(it->second.live, py::return_value_policy::reference);
      adopted = it->second.retiring;  // tasks may still use it: the same buffer goes on
    }
  }
  const auto dt = static_cast<hcr::DType>(key.dtype);
  auto b = std::make_unique<BufferObj>();
  b->holder = holder;
  b->buf = adopted ? std::move(*adopted)
                   : make_wrapped(*rt, dt, reinterpret_cast<void*>(key.data), key.rows, key.cols,
                                  key.ld);
  b->used = adopted.has_value();
  b->dtype = dt;
  b->rows = key.rows;
  b->cols = key.cols;
  b->ld = key.ld;
  b->ndim = key.ndim;
  b->readonly = key.readonly;
  b->owner = std::move(owner);
  b->wrap_key = key;
  BufferObj* raw = b.get();
  py::object o = new_buffer_object(std::move(b));
  std::lock_guard lock(holder->mutex);
  holder->wraps[key].live = raw;
  return o;
}

py::object wrap_memory(const std::shared_ptr<RuntimeHolder>& holder, void* data, hcr::DType dtype,
                       size_t rows, size_t cols, size_t ld, int ndim, py::object owner) {
  const WrapKey key{reinterpret_cast<uintptr_t>(data), rows, cols, ld,
                    static_cast<int>(dtype),           ndim, false};
  return wrap_registered(holder, key, std::move(owner));
}

py::object wrap_array(const std::shared_ptr<RuntimeHolder>& holder, py::handle obj,
                      std::optional<bool> readonly) {
  if (!py::isinstance<py::array>(obj))
    throw_invalid("wrap: expected a numpy.ndarray, got " +
                  py::cast<std::string>(py::type::handle_of(obj).attr("__name__")) +
                  " (hcr wraps arrays without copying; numpy.asarray makes one)");
  auto a = py::reinterpret_borrow<py::array>(obj);
  const hcr::DType dt = dtype_from_numpy(a.dtype(), "wrap");
  const auto isz = static_cast<py::ssize_t>(a.itemsize());
  if (a.ndim() == 0 || a.ndim() > 2)
    throw_invalid("wrap: a " + std::to_string(a.ndim()) + "-d array of shape " + shape_text(a) +
                  ": hcr buffers are matrices (2-d) or vectors (1-d); reshape it");
  size_t rows, cols;
  py::ssize_t col_stride, row_stride = 0;
  if (a.ndim() == 1) {
    rows = 1;
    cols = static_cast<size_t>(a.shape(0));
    col_stride = a.strides(0);
  } else {
    rows = static_cast<size_t>(a.shape(0));
    cols = static_cast<size_t>(a.shape(1));
    col_stride = a.strides(1);
    row_stride = a.strides(0);
  }
  const bool empty = rows == 0 || cols == 0;  // the runtime refuses it, naming the shape
  if (!empty && cols > 1 && col_stride != isz) {
    if (a.ndim() == 2 && rows > 1 && row_stride == isz)
      throw_invalid("wrap: the " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " array is in Fortran (column-major) order, strides " + strides_text(a) +
                    ": hcr buffers are row-major; pass numpy.ascontiguousarray(a) (a copy) or "
                    "wrap a.T");
    throw_invalid("wrap: the array of shape " + shape_text(a) + " has strides " + strides_text(a) +
                  ": its elements within a row must be contiguous (a column stride of " +
                  std::to_string(isz) + " bytes, the itemsize)");
  }
  size_t ld = cols;
  if (!empty && rows > 1) {
    if (row_stride < 0 || row_stride % isz != 0 || static_cast<size_t>(row_stride / isz) < cols)
      throw_invalid("wrap: the array of shape " + shape_text(a) + " has strides " +
                    strides_text(a) + ": the row stride must be a non-negative multiple of the " +
                    "itemsize (" + std::to_string(isz) + ") of at least a row (" +
                    std::to_string(cols * isz) + " bytes)");
    ld = static_cast<size_t>(row_stride / isz);
  }
  void* data = py::detail::array_proxy(a.ptr())->data;
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(isz) != 0)
    throw_invalid("wrap: the array's data is not aligned to its itemsize (" + std::to_string(isz) +
                  " bytes): copy it with numpy.array(a)");
  const bool writeable = a.writeable();
  if (readonly.has_value() && !*readonly && !writeable)
    throw_invalid("wrap: the array is read-only (flags.writeable is False): it can only be wrapped "
                  "with readonly=True");
  const WrapKey key{reinterpret_cast<uintptr_t>(data),
                    rows,
                    cols,
                    ld,
                    static_cast<int>(dt),
                    static_cast<int>(a.ndim()),
                    readonly.value_or(!writeable)};
  return wrap_registered(holder, key, py::reinterpret_borrow<py::object>(obj));
}

namespace {

py::object acquire(py::object self, const std::string& mode_text) {
  BufferObj& b = as_buffer(self);
  const hcr::Access mode = access_from_string(mode_text);
  b.check_writable("acquire", mode);
  auto hv = std::make_unique<HostViewObj>();
  void* data = nullptr;
  std::visit(
      [&](auto& buf) {
        using T = ElemOf<decltype(buf)>;
        std::optional<hcr::HostView<T>> v;
        {
          py::gil_scoped_release unlocked;
          v.emplace(buf.acquire(mode));
        }
        data = v->data();
        hv->view = std::move(*v);
      },
      b.buf);
  hv->mode = mode;
  hv->buffer = self;
  hv->array = make_view(b.dtype, data, b.rows, b.cols, b.ld, b.ndim, hcr::writes(mode), b.owner);
  return py::cast(std::move(hv), py::return_value_policy::take_ownership);
}

py::object partition(py::object self, size_t tile_rows, size_t tile_cols) {
  BufferObj& b = as_buffer(self);
  auto t = std::make_unique<TilesObj>();
  t->parent = self;
  std::visit(
      [&](auto& buf) {
        std::optional<hcr::Tiles<ElemOf<decltype(buf)>>> made;
        {
          py::gil_scoped_release unlocked;  // it submits the tiles' tasks
          made.emplace(buf.partition(tile_rows, tile_cols));
        }
        auto& tiles = *made;
        t->grid_rows = tiles.rows();
        t->grid_cols = tiles.cols();
        for (size_t i = 0; i < tiles.rows(); ++i)
          for (size_t j = 0; j < tiles.cols(); ++j) {
            auto tile = tiles(i, j);
            auto o = std::make_unique<BufferObj>();
            o->holder = b.holder;
            o->rows = tile.rows();
            o->cols = tile.cols();
            o->ld = tile.ld();
            o->buf = std::move(tile);
            o->dtype = b.dtype;
            o->ndim = 2;
            o->readonly = b.readonly;
            o->owner = b.owner;
            o->parent = self;
            o->is_tile = true;
            t->tiles.push_back(new_buffer_object(std::move(o)));
          }
      },
      b.buf);
  b.used = true;
  return py::cast(std::move(t), py::return_value_policy::take_ownership);
}

py::object to_numpy(const BufferObj& b) {
  return std::visit(
      [&](auto& buf) -> py::object {
        using T = ElemOf<decltype(buf)>;
        std::optional<hcr::HostView<T>> v;
        {
          py::gil_scoped_release unlocked;
          v.emplace(buf.acquire(hcr::Access::read));
        }
        py::array view =
            make_view(b.dtype, v->data(), b.rows, b.cols, b.ld, b.ndim, false, py::handle());
        py::object copy = view.attr("copy")();
        return copy;
      },
      b.buf);
}

}  // namespace

void register_buffers(py::module_& m) {
  py::class_<BufferObj>(m, "Buffer",
                        R"doc(A runtime buffer over memory Python owns (made by Runtime.buffer,
Runtime.wrap or Runtime.from_dlpack): a row-major matrix, or a vector when made from a 1-d array.

Tasks that use it are ordered by their access modes in submission order. Read or write its data
on the host through acquire() (a context manager), or copy it out with to_numpy(). The memory
(the wrapped array) stays referenced until every task submitted before this object is dropped
has finished.)doc")
      .def_property_readonly(
          "shape",
          [](const BufferObj& b) -> py::tuple {
            if (b.ndim == 1) return py::make_tuple(b.rows * b.cols);
            return py::make_tuple(b.rows, b.cols);
          },
          "The shape of its views: (cols,) for a vector made from a 1-d array, else (rows, cols).")
      .def_property_readonly(
          "dtype", [](const BufferObj& b) { return numpy_dtype(b.dtype); },
          "The NumPy dtype of its elements.")
      .def_property_readonly("ndim", [](const BufferObj& b) { return b.ndim; })
      .def_property_readonly("rows", [](const BufferObj& b) { return b.rows; })
      .def_property_readonly("cols", [](const BufferObj& b) { return b.cols; })
      .def_property_readonly(
          "ld", [](const BufferObj& b) { return b.ld; },
          "Elements between row starts (cols, or the parent's for a tile).")
      .def_property_readonly(
          "nbytes", [](const BufferObj& b) { return b.rows * b.cols * hcr::dtype_size(b.dtype); })
      .def_property_readonly(
          "readonly", [](const BufferObj& b) { return b.readonly; },
          "True when it wraps read-only memory: tasks may only read it.")
      .def_property_readonly("is_tile", [](const BufferObj& b) { return b.is_tile; })
      .def("acquire", &acquire, py::arg("mode") = "read_write",
           R"doc(Host access to the data: waits (without the interpreter lock) until every earlier
task that writes it (mode 'read') or uses it ('write', 'read_write') has finished and the host
copy is current; later tasks wait for the release. Returns a HostView, a context manager whose
__enter__ gives the NumPy view:

    with buf.acquire("read") as a:
        print(a.sum())

After the release the array stays readable memory but turns read-only. Raises InvalidArgumentError
instead of waiting forever (this thread already holds a view the access would wait for).)doc")
      .def("to_numpy", &to_numpy,
           "A copy of the data (waits for earlier writers, as acquire('read')).")
      .def(
          "set_reduction",
          [](BufferObj& b, const std::string& op) {
            hcr::Reduction r;
            if (op == "sum") r = hcr::Reduction::sum;
            else if (op == "min") r = hcr::Reduction::min;
            else if (op == "max") r = hcr::Reduction::max;
            else throw_invalid("set_reduction: '" + op + "' is not 'sum', 'min' or 'max'");
            py::gil_scoped_release unlocked;  // pending contributions are combined first
            std::visit([&](auto& buf) { buf.set_reduction(r); }, b.buf);
          },
          py::arg("op"),
          R"doc(Declares how tasks reduce into this buffer (Task.reduce, reduces=[...], the
'reduce' access mode): 'sum', 'min' or 'max' over f32, f64, i32 or i64 elements. Each reducing
task updates a private copy holding the identity; the copies are combined into the buffer by
combine tasks before its next access of another mode (a task, acquire, to_numpy, wait_all).)doc")
      .def(
          "set_reduction",
          [](BufferObj& b, const KernelObj& identity, const KernelObj& combine) {
            if (identity.holder.get() != b.holder.get() || combine.holder.get() != b.holder.get())
              throw_invalid("set_reduction: the kernels belong to another runtime than " +
                            b.describe());
            py::gil_scoped_release unlocked;
            std::visit([&](auto& buf) { buf.set_reduction(identity.kernel, combine.kernel); },
                       b.buf);
          },
          py::arg("identity"), py::arg("combine"),
          R"doc(The same with the user's kernels: identity(copy) fills a task's private copy with
the identity (write); combine(into, source) folds source into into (read_write, read).)doc")
      .def("partition", &partition, py::arg("tile_rows"), py::arg("tile_cols"),
           R"doc(Splits the buffer into tiles of tile_rows x tile_cols (edge tiles smaller) without
copying. Until unpartition(), tasks use the tiles and the buffer itself may not be used.)doc")
      .def(
          "unpartition",
          [](BufferObj& b) {
            hcr::Event e;
            {
              py::gil_scoped_release unlocked;
              e = std::visit([](auto& buf) { return buf.unpartition(); }, b.buf);
            }
            return make_event(std::move(e));
          },
          "Joins the tiles back; the Event completes once every task on them has finished.")
      .def("__repr__", [](const BufferObj& b) {
        std::string s = "hcr.Buffer(" + std::string(hcr::dtype_name(b.dtype)) + ", ";
        s += b.ndim == 1 ? std::to_string(b.cols)
                         : std::to_string(b.rows) + "x" + std::to_string(b.cols);
        if (b.ld != b.cols && b.ndim == 2) s += ", ld=" + std::to_string(b.ld);
        if (b.is_tile) s += ", tile";
        if (b.readonly) s += ", readonly";
        return s + ")";
      });

  py::class_<HostViewObj>(m, "HostView",
                          "Host access to a buffer, from Buffer.acquire() until release() (or the "
                          "end of a with block).")
      .def("__enter__", [](HostViewObj& v) { return v.array; })
      .def("__exit__", [](HostViewObj& v, py::args) { v.release(); })
      .def_property_readonly(
          "array", [](HostViewObj& v) { return v.array; },
          "The NumPy view (read-only after the release).")
      .def_property_readonly("mode", [](HostViewObj& v) { return access_name(v.mode); })
      .def_property_readonly("active", &HostViewObj::active)
      .def("release", &HostViewObj::release, "Ends the access: later tasks may start. Idempotent.");

  py::class_<TilesObj>(m, "Tiles", "The tiles of a partitioned buffer, a row-major grid.")
      .def_property_readonly(
          "shape", [](const TilesObj& t) { return py::make_tuple(t.grid_rows, t.grid_cols); })
      .def("__len__", [](const TilesObj& t) { return t.tiles.size(); })
      .def("__getitem__", [](const TilesObj& t,
                             std::pair<size_t, size_t> ij) { return t.at(ij.first, ij.second); })
      .def("__iter__", [](const TilesObj& t) { return py::iter(py::cast(t.tiles)); })
      .def_property_readonly("parent", [](const TilesObj& t) { return t.parent; });
}

}  // namespace hcrpy
