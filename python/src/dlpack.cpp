// DLPack both ways, for host memory: Buffer.__dlpack__ shares a buffer's host memory (after the
// earlier tasks are done), Runtime.from_dlpack wraps a producer's host tensor as a buffer. A device
// tensor is refused: the C++ API has no way to register device memory as a buffer.
#include "dlpack.h"
#include "binding.hpp"

namespace hcrpy {

namespace {

constexpr const char* kCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";

const char* device_type_name(int t) {
  switch (t) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLVPI: return "kDLVPI";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLExtDev: return "kDLExtDev";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    case kDLOneAPI: return "kDLOneAPI";
    case kDLWebGPU: return "kDLWebGPU";
    case kDLHexagon: return "kDLHexagon";
    default: return "an unknown device type";
  }
}

/// Host memory (plain or page-locked) is what hcr can wrap.
void check_device(int type, int id) {
  if (type == kDLCPU || type == kDLCUDAHost || type == kDLROCMHost) return;
  throw hcr::Error(
      hcr::ErrorCode::unsupported,
      std::string("from_dlpack: the tensor is in ") + device_type_name(type) +
          " memory (device type " + std::to_string(type) + ", id " + std::to_string(id) +
          "): hcr wraps host memory only, as its C++ API registers no device memory as a buffer "
          "(Runtime::wrap takes a host pointer); copy the tensor to the host first");
}

DLDataType dl_dtype(hcr::DType t) {
  switch (t) {
    case hcr::DType::f16: return {kDLFloat, 16, 1};
    case hcr::DType::f32: return {kDLFloat, 32, 1};
    case hcr::DType::f64: return {kDLFloat, 64, 1};
    case hcr::DType::i32: return {kDLInt, 32, 1};
    case hcr::DType::i64: return {kDLInt, 64, 1};
    case hcr::DType::u8: return {kDLUInt, 8, 1};
    default:
      throw hcr::Error(hcr::ErrorCode::unsupported,
                       "__dlpack__: element type " + std::string(hcr::dtype_name(t)));
  }
}

hcr::DType from_dl_dtype(const DLDataType& d) {
  if (d.lanes == 1) {
    if (d.code == kDLFloat && d.bits == 16) return hcr::DType::f16;
    if (d.code == kDLFloat && d.bits == 32) return hcr::DType::f32;
    if (d.code == kDLFloat && d.bits == 64) return hcr::DType::f64;
    if (d.code == kDLInt && d.bits == 32) return hcr::DType::i32;
    if (d.code == kDLInt && d.bits == 64) return hcr::DType::i64;
    if (d.code == kDLUInt && d.bits == 8) return hcr::DType::u8;
  }
  throw_invalid("from_dlpack: unsupported DLPack dtype (code " + std::to_string(d.code) +
                ", bits " + std::to_string(d.bits) + ", lanes " + std::to_string(d.lanes) +
                "): hcr buffers hold float16, float32, float64, int32, int64 or uint8");
}

/// What an exported tensor owns: its shape and strides, and the memory's owner.
struct ExportCtx {
  DLManagedTensor tensor{};
  int64_t shape[2] = {0, 0};
  int64_t strides[2] = {0, 0};
  PyRef owner;
};

void export_deleter(DLManagedTensor* t) { delete static_cast<ExportCtx*>(t->manager_ctx); }

void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": nobody consumed it, so the producer frees it.
  if (PyCapsule_IsValid(capsule, kCapsule)) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsule));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
}

/// Owns an imported tensor: calls its deleter when the buffer (and every view) has let it go.
struct DLPackOwner {
  DLManagedTensor* tensor = nullptr;
  DLPackOwner() = default;
  DLPackOwner(const DLPackOwner&) = delete;
  ~DLPackOwner() {
    if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
  }
};

py::object dlpack(py::object self, py::object stream, py::object max_version, py::object dl_device,
                  py::object copy) {
  BufferObj& b = as_buffer(self);
  (void)max_version;  // the unversioned capsule is what a consumer asking for more accepts
  if (!stream.is_none())
    throw py::buffer_error("__dlpack__: stream must be None for host (kDLCPU) memory, not " +
                           py::cast<std::string>(py::repr(stream)));
  if (!dl_device.is_none()) {
    auto dev = py::cast<std::pair<int, int>>(dl_device);
    if (dev.first != kDLCPU)
      throw py::buffer_error("__dlpack__: the buffer is exported as host memory (kDLCPU), not "
                             "to device type " +
                             std::to_string(dev.first));
  }
  if (!copy.is_none() && py::cast<bool>(copy))
    throw py::buffer_error("__dlpack__: copy=True: hcr exports its memory without copying");
  if (b.readonly)
    throw py::buffer_error("__dlpack__: " + b.describe() +
                           " wraps read-only memory, and DLPack cannot say read-only");
  // Earlier tasks finish and the host copy is current before the memory is shared.
  void* data = nullptr;
  std::visit(
      [&](auto& buf) {
        py::gil_scoped_release unlocked;
        auto v = buf.acquire(hcr::Access::read_write);
        data = v.data();
      },
      b.buf);
  auto ctx = std::make_unique<ExportCtx>();
  DLTensor& t = ctx->tensor.dl_tensor;
  t.data = data;
  t.device = {kDLCPU, 0};
  t.dtype = dl_dtype(b.dtype);
  t.byte_offset = 0;
  if (b.ndim == 1) {
    t.ndim = 1;
    ctx->shape[0] = static_cast<int64_t>(b.cols);
    ctx->strides[0] = 1;
  } else {
    t.ndim = 2;
    ctx->shape[0] = static_cast<int64_t>(b.rows);
    ctx->shape[1] = static_cast<int64_t>(b.cols);
    ctx->strides[0] = static_cast<int64_t>(b.ld);
    ctx->strides[1] = 1;
  }
  t.shape = ctx->shape;
  t.strides = ctx->strides;
  ctx->owner = PyRef(b.owner);
  ctx->tensor.manager_ctx = ctx.get();
  ctx->tensor.deleter = export_deleter;
  PyObject* cap = PyCapsule_New(&ctx->tensor, kCapsule, capsule_destructor);
  if (cap == nullptr) throw py::error_already_set();
  ctx.release();  // the capsule (then its consumer) owns it
  return py::reinterpret_steal<py::object>(cap);
}

py::object from_dlpack(const std::shared_ptr<RuntimeHolder>& holder, py::object obj) {
  py::object capsule;
  if (PyCapsule_CheckExact(obj.ptr())) {
    capsule = obj;
  } else {
    if (py::hasattr(obj, "__dlpack_device__")) {
      auto dev = py::cast<std::pair<int, int>>(obj.attr("__dlpack_device__")());
      check_device(dev.first, dev.second);  // before the producer hands anything over
    }
    if (!py::hasattr(obj, "__dlpack__"))
      throw_invalid(
          "from_dlpack: " + py::cast<std::string>(py::type::handle_of(obj).attr("__name__")) +
          " has no __dlpack__ method and is not a DLPack capsule");
    capsule = obj.attr("__dlpack__")();
  }
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsule))
    throw_invalid("from_dlpack: not an unused DLPack capsule (its name is not 'dltensor': "
                  "a capsule can be consumed once)");
  auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsule));
  const DLTensor& t = mt->dl_tensor;
  check_device(t.device.device_type, t.device.device_id);
  const hcr::DType dt = from_dl_dtype(t.dtype);
  const int64_t isz = t.dtype.bits / 8;
  if (t.ndim < 1 || t.ndim > 2)
    throw_invalid("from_dlpack: a " + std::to_string(t.ndim) +
                  "-d tensor: hcr buffers are matrices (2-d) or vectors (1-d)");
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] < 0) throw_invalid("from_dlpack: a negative extent in the tensor's shape");
  size_t rows = t.ndim == 1 ? 1 : static_cast<size_t>(t.shape[0]);
  size_t cols = static_cast<size_t>(t.shape[t.ndim - 1]);
  int64_t col_stride = t.strides ? t.strides[t.ndim - 1] : 1;
  int64_t row_stride = t.ndim == 2 ? (t.strides ? t.strides[0] : t.shape[1]) : 0;
  if (cols > 1 && col_stride != 1)
    throw_invalid("from_dlpack: the tensor's column stride is " + std::to_string(col_stride) +
                  " elements: hcr buffers are row-major with contiguous rows (a column-major "
                  "tensor: transpose it first)");
  size_t ld = cols;
  if (rows > 1) {
    if (row_stride < 0 || static_cast<size_t>(row_stride) < cols)
      throw_invalid("from_dlpack: the tensor's row stride is " + std::to_string(row_stride) +
                    " elements, less than a row of " + std::to_string(cols));
    ld = static_cast<size_t>(row_stride);
  }
  char* data = static_cast<char*>(t.data) + t.byte_offset;
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(isz) != 0)
    throw_invalid("from_dlpack: the tensor's data is not aligned to its element size");
  // Consumed from here on: the owner calls the deleter once the buffer and its views are gone.
  auto owner = std::make_unique<DLPackOwner>();
  owner->tensor = mt;
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsule) != 0) {
    owner->tensor = nullptr;
    throw py::error_already_set();
  }
  py::object owner_obj = py::cast(std::move(owner), py::return_value_policy::take_ownership);
  return wrap_memory(holder, data, dt, rows, cols, ld, t.ndim, std::move(owner_obj));
}

}  // namespace

py::object runtime_from_dlpack(const std::shared_ptr<RuntimeHolder>& holder, py::object obj) {
  return from_dlpack(holder, std::move(obj));
}

void register_dlpack(py::module_& m) {
  py::class_<DLPackOwner>(m, "_DLPackOwner", "Keeps an imported DLPack tensor until released.");
  auto buffer = py::reinterpret_borrow<py::object>(m.attr("Buffer"));
  py::cpp_function export_fn(&dlpack, py::name("__dlpack__"), py::is_method(buffer),
                             py::sibling(py::getattr(buffer, "__dlpack__", py::none())),
                             py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
                             py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
                             "DLPack export of the host memory (a 'dltensor' capsule), once the "
                             "earlier tasks have finished. The memory is shared, not copied: "
                             "later tasks and the consumer must not race.");
  buffer.attr("__dlpack__") = export_fn;
  py::cpp_function device_fn([](py::object) { return py::make_tuple(int(kDLCPU), 0); },
                             py::name("__dlpack_device__"), py::is_method(buffer),
                             "(kDLCPU, 0): buffers export their host memory.");
  buffer.attr("__dlpack_device__") = device_fn;
}

}  // namespace hcrpy
