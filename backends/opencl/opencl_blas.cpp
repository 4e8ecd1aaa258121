// The built-in BLAS kernels on CLBlast: each launch checked against <hcr/builtin_params.h>'s
// contract (buffers, shapes, the parameter block read by the SDK), then one CLBlast call in its
// row-major layout, offsets in elements, on one of the device's compute queues. Where beta is 0
// what the kernel writes is zeroed first: CLBlast computes beta * C, and 0 * NaN is NaN.
#include "opencl_blas.hpp"

#include "cl_error.hpp"
#include "completion.hpp"

#include <hcr/sdk/blas.hpp>
#include <hcr/sdk/memory.hpp>

#include <clblast.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace hcr::opencl {
namespace {

using sdk::BlasOp;
using sdk::Error;

std::string shape(const hcr_arg_t& a) {
  return std::to_string(a.rows) + "x" + std::to_string(a.cols);
}

// One launch of a built-in, its parameters read and checked (plugin.h's defaults when the caller
// sent none): alpha and beta, and the flags that stand for the enumerations.
sdk::BlasParams blas_params(BlasOp op, const std::string& kname, const hcr_launch_args_t& a) {
  // The block is the whole of the parameters: one more after it would be ignored without a word
  // (the runtime refuses such a task at submit; a host that calls the plugin directly may not).
  if (a.num_params > 1)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, kname + " takes one parameter, an " +
                                                sdk::blas_operands(op).params + "; got " +
                                                std::to_string(a.num_params));
  return sdk::read_blas_params(op, kname, a);
}

clblast::Transpose transpose(bool t) {
  return t ? clblast::Transpose::kYes : clblast::Transpose::kNo;
}
clblast::Triangle triangle(bool upper) {
  return upper ? clblast::Triangle::kUpper : clblast::Triangle::kLower;
}

// CLBlast compiles a routine's program on first use in a context, for seconds. Do it now, when
// the host asks for the kernel (on a submitting thread), rather than in the first launch, which
// may run on a completion thread and would hold up every other completion of the device
// meanwhile (and inflate the first measured duration). A call of size 0 builds the program and
// stops at the dimension check. (trsm builds a second, small program, for inverting its diagonal
// blocks, on its first real call.)
template <class T>
std::unique_ptr<Kernel> make_blas(Device& d, size_t device, BlasOp op, const std::string& name,
                                  const sdk::Host& host) {
  const int slot = sizeof(T) == 4 ? 0 : 1;
  std::lock_guard<std::mutex> lock(d.blas_mutex);
  bool& ready = d.blas_ready[static_cast<int>(op)][slot];
  if (!ready) {
    if (!d.scratch)
      d.scratch = Mem(cl_create("clCreateBuffer", [&](cl_int* e) {
        return clCreateBuffer(d.context, CL_MEM_READ_WRITE, 64, nullptr, e);
      }));
    cl_command_queue q = d.compute[0].get();
    cl_mem s = d.scratch.get();
    const auto t0 = std::chrono::steady_clock::now();
    const auto row = clblast::Layout::kRowMajor;
    const auto no = clblast::Transpose::kNo;
    clblast::StatusCode status = clblast::StatusCode::kSuccess;
    switch (op) {
      case BlasOp::gemm:
        status = clblast::Gemm<T>(row, no, no, 0, 1, 1, T(1), s, 0, 1, s, 0, 1, T(0), s, 0, 1, &q,
                                  nullptr);
        break;
      case BlasOp::syrk:
        status = clblast::Syrk<T>(row, clblast::Triangle::kLower, no, 0, 1, T(1), s, 0, 1, T(0), s,
                                  0, 1, &q, nullptr);
        break;
      case BlasOp::trsm:
        status = clblast::Trsm<T>(row, clblast::Side::kLeft, clblast::Triangle::kLower, no,
                                  clblast::Diagonal::kNonUnit, 0, 1, T(1), s, 0, 1, s, 0, 1, &q,
                                  nullptr);
        break;
      case BlasOp::potrf:
      case BlasOp::getrf_nopiv: break;  // never made: declined in kernel_get
    }
    if (status != clblast::StatusCode::kInvalidDimension &&
        status != clblast::StatusCode::kSuccess) {
      const std::string call = std::string("clblast::") +
                               (op == BlasOp::gemm   ? "Gemm"
                                : op == BlasOp::syrk ? "Syrk"
                                                     : "Trsm") +
                               " (building its kernels)";
      try {
        throw_clblast(status, call.c_str());
      } catch (const Error& e) {
        throw Error(e.code() == HCR_ERROR_UNSUPPORTED ? HCR_ERROR_NOT_FOUND : e.code(),
                    name + " on '" + d.name + "': " + e.what());
      }
    }
    ready = true;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Seconds here are CLBlast compiling (once per process) without a driver-side cache hit:
    // worth telling a user who wonders why the first call was slow.
    host.log(secs > 1 ? HCR_LOG_INFO : HCR_LOG_DEBUG,
             "opencl: CLBlast built its " + name + " kernels for '" + d.name + "' in " +
                 std::to_string(secs) +
                 " s (once per process; the driver's program cache, PoCL's kcache for "
                 "one, shortens it in later processes)");
  }
  auto k = std::make_unique<Kernel>();
  k->device = device;
  k->type = KernelType::blas;
  k->op = op;
  k->f64 = sizeof(T) == 8;
  k->name = name;
  return k;
}

// Enqueues a fill of zeros over `elems` elements of `mem` from element `off`.
template <class T>
cl_event zero(cl_command_queue q, cl_mem mem, size_t off, size_t elems) {
  const T z = T(0);
  cl_event e = nullptr;
  HCR_CL_CHECK(clEnqueueFillBuffer(q, mem, &z, sizeof z, off * sizeof(T), elems * sizeof(T), 0,
                                   nullptr, &e));
  return e;
}

template <class T>
void launch_typed(Devices& devices, Allocations& memory, const hcr_launch_args_t& a,
                  const Kernel& kern) {
  Device& d = devices[a.device];
  const std::string& name = kern.name;
  const BlasOp op = kern.op;
  const sdk::BlasOperands operands = sdk::blas_operands(op);
  const char* const* role = operands.names;
  const size_t want = operands.count;
  if (a.num_args != want)
    throw Error(HCR_ERROR_INVALID_ARGUMENT, name + " takes " + std::to_string(want) + " buffers (" +
                                                operands.list + "), got " +
                                                std::to_string(a.num_args));
  const hcr_dtype_t dtype = sizeof(T) == 4 ? HCR_DTYPE_F32 : HCR_DTYPE_F64;
  hcr_arg_t x[3];
  Memory* mem[3] = {nullptr, nullptr, nullptr};
  size_t off[3] = {0, 0, 0}, ld[3] = {1, 1, 1};
  for (size_t i = 0; i < want; ++i) {
    x[i] = sdk::read_struct(&sdk::element(a.args, i));
    const std::string which =
        name + " argument " + std::to_string(i) + " (" + role[i] + ", " + shape(x[i]) + ")";
    if (x[i].dtype != dtype)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  which + " is not an " + (sizeof(T) == 4 ? "f32" : "f64") + " matrix");
    if (x[i].memory == nullptr)
      throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " is not in device memory");
    mem[i] = memory.live(x[i].memory, name + " argument " + std::to_string(i));
    if (mem[i]->device != a.device &&
        devices.platform_of(mem[i]->device) != devices.platform_of(a.device))
      throw Error(HCR_ERROR_INVALID_ARGUMENT, which + " lives in another OpenCL context");
    if (x[i].offset % sizeof(T) != 0)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  which + ": byte offset " + std::to_string(x[i].offset) +
                      " is not a multiple of the element size " + std::to_string(sizeof(T)));
    if (x[i].rows > 1 && x[i].ld < x[i].cols)
      throw Error(HCR_ERROR_INVALID_ARGUMENT,
                  which + ": ld " + std::to_string(x[i].ld) + " is below its columns");
    // BLAS wants ld >= max(1, columns) even where one row makes ld meaningless.
    ld[i] = static_cast<size_t>(std::max<uint64_t>({x[i].ld, x[i].cols, 1}));
    off[i] = static_cast<size_t>(x[i].offset / sizeof(T));
    sdk::check_span(mem[i]->bytes, x[i].offset, x[i].rows, ld[i] * sizeof(T), x[i].cols * sizeof(T),
                    which);
  }
  const sdk::BlasParams p = blas_params(op, name, a);

  // Shapes, in plugin.h's terms. gemm: C m x n = op(A) m x k times op(B) k x n. syrk: C n x n,
  // op(A) n x k. trsm: B m x n, A square of order m (left) or n (right).
  uint64_t m = 0, n = 0, k = 0;
  switch (op) {
    case BlasOp::gemm: {
      const hcr_arg_t &A = x[0], &B = x[1], &C = x[2];
      m = p.trans_a ? A.cols : A.rows;
      k = p.trans_a ? A.rows : A.cols;
      n = p.trans_b ? B.rows : B.cols;
      const uint64_t bk = p.trans_b ? B.cols : B.rows;
      if (bk != k || C.rows != m || C.cols != n) {
        std::string trans;
        if (p.trans_a || p.trans_b)
          trans = std::string(", ") + (p.trans_a ? "A" : "") +
                  (p.trans_a && p.trans_b ? " and " : "") + (p.trans_b ? "B" : "") + " transposed";
        throw Error(HCR_ERROR_INVALID_ARGUMENT, name + " shapes do not match: A is " + shape(A) +
                                                    ", B is " + shape(B) + ", C is " + shape(C) +
                                                    " (need op(A) m x k, op(B) k x n, C m x n" +
                                                    trans + ")");
      }
      break;
    }
    case BlasOp::syrk: {
      const hcr_arg_t &A = x[0], &C = x[1];
      n = p.trans_a ? A.cols : A.rows;
      k = p.trans_a ? A.rows : A.cols;
      if (C.rows != C.cols || C.rows != n)
        throw Error(HCR_ERROR_INVALID_ARGUMENT, name + " shapes do not match: A is " + shape(A) +
                                                    ", C is " + shape(C) +
                                                    " (C must be n x n and A n x k" +
                                                    (p.trans_a ? ", transposed: k x n" : "") + ")");
      break;
    }
    case BlasOp::trsm: {
      const hcr_arg_t &A = x[0], &B = x[1];
      m = B.rows;
      n = B.cols;
      const uint64_t order = p.right ? n : m;
      if (A.rows != A.cols || A.rows != order)
        throw Error(HCR_ERROR_INVALID_ARGUMENT,
                    name + " shapes do not match: A is " + shape(A) + ", B is " + shape(B) +
                        " (A must be square with B's " + (p.right ? "columns" : "rows") +
                        " as its order: side is " + (p.right ? "right" : "left") + ")");
      break;
    }
    case BlasOp::potrf:
    case BlasOp::getrf_nopiv: break;  // never made: declined in kernel_get
  }
  // The matrix the kernel writes: C of gemm and syrk, B of trsm. Rows x cols of it.
  const size_t out = op == BlasOp::trsm ? 1 : want - 1;
  const uint64_t out_rows = op == BlasOp::syrk ? n : m, out_cols = n;
  const bool nothing =
      out_rows == 0 || out_cols == 0 || (op != BlasOp::trsm && k == 0 && p.beta == 1);
  if (nothing) {  // the output is empty or unchanged
    sdk::complete(a.done, a.done_user_data, nullptr, 0);
    return;
  }

  auto opn = std::make_unique<Op>();
  opn->done = a.done;
  opn->done_user_data = a.done_user_data;
  opn->measure = (a.flags & HCR_LAUNCH_MEASURE) != 0;
  // "gemm_f32 (m x k x n)", "syrk_f32 (n x k)", "trsm_f32 (m x n)": the sizes that set its cost.
  const std::string dims =
      op == BlasOp::gemm   ? std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n)
      : op == BlasOp::syrk ? std::to_string(n) + "x" + std::to_string(k)
                           : std::to_string(m) + "x" + std::to_string(n);
  opn->what = name + " (" + dims + ") on '" + d.name + "'";
  Ticket ticket(*d.completer);
  cl_command_queue q = d.pick_compute(opn->load);
  cl_mem c_mem = mem[out]->mem.get();
  const size_t c_off = off[out], c_ld = ld[out];
  Event first, last;
  auto keep = [&](cl_event e) {
    last = Event(e);
    if (!first) first = last;
  };
  // The part of row r of the output that the kernel writes: all of it, or syrk's triangle.
  auto row_span = [&](uint64_t r) -> std::pair<size_t, size_t> {
    if (op != BlasOp::syrk) return {0, static_cast<size_t>(n)};
    return p.upper ? std::pair<size_t, size_t>{r, n - r} : std::pair<size_t, size_t>{0, r + 1};
  };
  const bool whole = op != BlasOp::syrk && (out_rows == 1 || c_ld == out_cols);
  if (op != BlasOp::trsm && p.beta == 0) {
    // BLAS ignores C's old values when beta is 0, but CLBlast computes beta * C: a fresh
    // allocation (a C the task only writes) may hold NaNs, and 0 * NaN is NaN. Zero what the
    // kernel writes first — for syrk only its triangle, row by row: the other is not ours.
    if (whole) {
      keep(zero<T>(q, c_mem, c_off, static_cast<size_t>(out_rows * out_cols)));
    } else {
      for (uint64_t r = 0; r < out_rows; ++r) {
        auto [c0, len] = row_span(r);
        keep(zero<T>(q, c_mem, c_off + static_cast<size_t>(r) * c_ld + c0, len));
      }
    }
  } else if (opn->measure) {
    cl_event e = nullptr;  // marks the start for the profiled duration
    HCR_CL_CHECK(clEnqueueMarkerWithWaitList(q, 0, nullptr, &e));
    keep(e);
  }
  const auto row = clblast::Layout::kRowMajor;
  const size_t M = static_cast<size_t>(m), N = static_cast<size_t>(n);
  const size_t K = static_cast<size_t>(k);
  if (op == BlasOp::trsm) {
    cl_event e = nullptr;
    HCR_CLBLAST_CHECK(clblast::Trsm<T>(
        row, p.right ? clblast::Side::kRight : clblast::Side::kLeft, triangle(p.upper),
        transpose(p.trans_a), p.unit ? clblast::Diagonal::kUnit : clblast::Diagonal::kNonUnit, M, N,
        static_cast<T>(p.alpha), mem[0]->mem.get(), off[0], ld[0], c_mem, c_off, c_ld, &q, &e));
    keep(e);
  } else if (k > 0) {
    cl_event e = nullptr;
    if (op == BlasOp::gemm)
      HCR_CLBLAST_CHECK(clblast::Gemm<T>(row, transpose(p.trans_a), transpose(p.trans_b), M, N, K,
                                         static_cast<T>(p.alpha), mem[0]->mem.get(), off[0], ld[0],
                                         mem[1]->mem.get(), off[1], ld[1], static_cast<T>(p.beta),
                                         c_mem, c_off, c_ld, &q, &e));
    else
      HCR_CLBLAST_CHECK(clblast::Syrk<T>(row, triangle(p.upper), transpose(p.trans_a), N, K,
                                         static_cast<T>(p.alpha), mem[0]->mem.get(), off[0], ld[0],
                                         static_cast<T>(p.beta), c_mem, c_off, c_ld, &q, &e));
    keep(e);
  } else if (p.beta != 0) {
    // k == 0: C = beta * C (on syrk's triangle), row by row unless contiguous.
    for (uint64_t r = 0; r < (whole ? 1 : out_rows); ++r) {
      auto [c0, len] = row_span(r);
      cl_event e = nullptr;
      HCR_CLBLAST_CHECK(clblast::Scal<T>(whole ? static_cast<size_t>(out_rows * out_cols) : len,
                                         static_cast<T>(p.beta), c_mem,
                                         c_off + static_cast<size_t>(r) * c_ld + c0, 1, &q, &e));
      keep(e);
    }
  }
  if (opn->measure) opn->start = first;
  if (!last) throw Error(HCR_ERROR_INTERNAL, opn->what + ": no command to wait for");
  opn->event = std::move(last);
  HCR_CL_CHECK(clFlush(q));
  opn->load->fetch_add(1, std::memory_order_relaxed);  // the completer takes it off again
  ticket.watch(std::move(opn));
}

}  // namespace

std::unique_ptr<Kernel> make_blas_kernel(Device& d, size_t device, const std::string& name,
                                         const sdk::Host& host) {
  // Declined with NOT_FOUND (the runtime never places the kernel here): what CLBlast lacks, and
  // double precision on a device without it.
  const auto b = sdk::find_blas_builtin(name);
  if (!b)
    throw Error(HCR_ERROR_NOT_FOUND,
                "no built-in kernel '" + name + "' on OpenCL device '" + d.name + "'");
  if (b->op == BlasOp::potrf || b->op == BlasOp::getrf_nopiv)
    throw Error(HCR_ERROR_NOT_FOUND, "no built-in " + name +
                                         " on OpenCL devices: CLBlast has no LAPACK "
                                         "factorizations (potrf, getrf_nopiv)");
  if (b->dtype == HCR_DTYPE_F32) return make_blas<float>(d, device, b->op, name, host);
  if (!d.fp64)
    throw Error(HCR_ERROR_NOT_FOUND,
                "device '" + d.name + "' has no double precision (cl_khr_fp64): no " + name);
  return make_blas<double>(d, device, b->op, name, host);
}

void launch_blas(Devices& devices, Allocations& memory, const hcr_launch_args_t& a,
                 const Kernel& k) {
  if (k.f64) launch_typed<double>(devices, memory, a, k);
  else launch_typed<float>(devices, memory, a, k);
}

}  // namespace hcr::opencl
