// The submit-time contract of the built-in kernels: <hcr/builtin_params.h> read against a task's
// buffers (shape, element type, access mode) and its parameter block. The backends check launches
// again (the ABI asks them to); this catches the mistake where it was made.
#include "builtin_check.hpp"

#include "buffer_state.hpp"
#include "kernel_state.hpp"
#include "task_node.hpp"

#include <hcr/builtin_params.h>
#include <hcr/error.hpp>

#include <cstring>
#include <string>

namespace hcr::detail {

enum class BuiltinOp : uint8_t { gemm, syrk, trsm, potrf, getrf_nopiv };

struct BuiltinSpec {
  const char* name;
  BuiltinOp op;
  DType dtype;
};

namespace {

constexpr BuiltinSpec kBuiltins[] = {
    {"gemm_f32", BuiltinOp::gemm, DType::f32},
    {"gemm_f64", BuiltinOp::gemm, DType::f64},
    {"gemm_f16", BuiltinOp::gemm, DType::f16},
    {"gemm_bf16", BuiltinOp::gemm, DType::bf16},
    {"syrk_f32", BuiltinOp::syrk, DType::f32},
    {"syrk_f64", BuiltinOp::syrk, DType::f64},
    {"trsm_f32", BuiltinOp::trsm, DType::f32},
    {"trsm_f64", BuiltinOp::trsm, DType::f64},
    {"potrf_f32", BuiltinOp::potrf, DType::f32},
    {"potrf_f64", BuiltinOp::potrf, DType::f64},
    {"getrf_nopiv_f32", BuiltinOp::getrf_nopiv, DType::f32},
    {"getrf_nopiv_f64", BuiltinOp::getrf_nopiv, DType::f64},
};

// What a kernel does with each buffer: reads it only, writes all of it without reading (gemm's C
// with beta 0), or reads what it keeps (C with beta != 0, one triangle of syrk's C, trsm's B,
// the factorizations' A).
enum class Use : uint8_t { read, overwrite, update };

struct Operand {
  const char* name;
  Use use;
};

class Checker {
 public:
  Checker(const BuiltinSpec& spec, const TaskNode& t) : spec_(spec), t_(t) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::invalid_argument,
                std::string("Runtime::submit: ") + spec_.name + ": " + what);
  }

  const BufferState& buffer(size_t i) const { return *t_.args[i].buffer; }
  std::string shape(size_t i) const {
    return std::to_string(buffer(i).rows) + "x" + std::to_string(buffer(i).cols);
  }
  std::string which(size_t i) const {
    return std::string(operands_[i].name) + " (argument " + std::to_string(i) + ", a " +
           describe(buffer(i)) + ")";
  }

  void operands(std::initializer_list<Operand> list) {
    size_t n = 0;
    std::string names;
    for (const Operand& o : list) {
      operands_[n++] = o;
      names += (names.empty() ? "" : ", ") + std::string(o.name);
    }
    count_ = n;
    if (t_.args.size() != n)
      fail("takes " + std::to_string(n) + (n == 1 ? " buffer (" : " buffers (") + names +
           "), got " + std::to_string(t_.args.size()));
    const std::string want(dtype_name(spec_.dtype));
    for (size_t i = 0; i < n; ++i)
      if (buffer(i).dtype != spec_.dtype)
        fail(which(i) + " is not " + (want == "bf16" ? "a " : "an ") + want + " matrix");
  }

  // The task's one parameter as block type P: at least `min_size` bytes of it known to the
  // caller's ABI, struct_size within the bytes given; fields this build does not know ignored.
  template <class P>
  P params(const char* type, size_t min_size) const {
    if (t_.param_offsets.size() != 1)
      fail("takes one parameter, an " + std::string(type) + "; got " +
           std::to_string(t_.param_offsets.size()));
    const size_t size = t_.params.size() - t_.param_offsets[0];
    const std::byte* p = t_.params.data() + t_.param_offsets[0];
    size_t struct_size = 0;
    if (size >= sizeof struct_size) std::memcpy(&struct_size, p, sizeof struct_size);
    if (size < sizeof struct_size || struct_size < min_size || struct_size > size)
      fail("the parameter is " + std::to_string(size) + " bytes with struct_size " +
           (size < sizeof struct_size ? std::string("(none)") : std::to_string(struct_size)) +
           ", not an " + type + " (struct_size at least " + std::to_string(min_size) +
           " and within the parameter)");
    P out{};
    std::memcpy(static_cast<void*>(&out), p, std::min(struct_size, sizeof(P)));
    return out;
  }

  void enumeration(const char* field, int32_t v, const char* zero, const char* one) const {
    if (v != 0 && v != 1)
      fail(std::string(field) + " " + std::to_string(v) + " is neither " + zero + " (0) nor " +
           one + " (1)");
  }

  uint64_t square(size_t i) const {
    if (buffer(i).rows != buffer(i).cols) fail(which(i) + " is not square");
    return buffer(i).rows;
  }

  // Access modes against uses, then outputs that alias another operand.
  void access() const {
    for (size_t i = 0; i < count_; ++i) {
      const Access mode = t_.args[i].access;
      const Operand& o = operands_[i];
      if (o.use == Use::read && !reads(mode))
        fail(which(i) + " is passed " + access_name(mode) +
             ", but the kernel reads it: pass it read");
      if (o.use == Use::overwrite && !writes(mode))
        fail(which(i) + " is passed read, but the kernel writes it: pass it write or read_write");
      if (o.use == Use::update && !(reads(mode) && writes(mode)))  // read_write or commute
        fail(which(i) + " is passed " + access_name(mode) + ", but the kernel " +
             (spec_.op == BuiltinOp::gemm   ? "reads it (beta is not 0) and writes it"
              : spec_.op == BuiltinOp::syrk ? "writes one triangle and keeps the other"
                                            : "updates it in place") +
             ": pass it read_write");
    }
    for (size_t i = 0; i < count_; ++i) {
      if (operands_[i].use == Use::read) continue;
      for (size_t j = 0; j < count_; ++j)
        if (j != i && t_.args[j].buffer == t_.args[i].buffer)
          fail(std::string(operands_[i].name) + " and " + operands_[j].name + " are the same " +
               describe(buffer(i)) + " (arguments " + std::to_string(std::min(i, j)) + " and " +
               std::to_string(std::max(i, j)) + "): the kernel's output must not alias its inputs");
    }
  }

 private:
  const BuiltinSpec& spec_;
  const TaskNode& t_;
  Operand operands_[3] = {};
  size_t count_ = 0;
};

void check_gemm(Checker& c, const TaskNode& t) {
  hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0, HCR_NO_TRANS, HCR_NO_TRANS};
  // No parameter at all means alpha 1, beta 0 (what the backends take too).
  if (!t.param_offsets.empty())
    p = c.params<hcr_gemm_params_t>("hcr_gemm_params_t", HCR_GEMM_PARAMS_STRUCT_SIZE_1_0);
  c.operands(
      {{"A", Use::read}, {"B", Use::read}, {"C", p.beta == 0 ? Use::overwrite : Use::update}});
  c.enumeration("trans_a", p.trans_a, "HCR_NO_TRANS", "HCR_TRANS");
  c.enumeration("trans_b", p.trans_b, "HCR_NO_TRANS", "HCR_TRANS");
  const bool ta = p.trans_a == HCR_TRANS, tb = p.trans_b == HCR_TRANS;
  const BufferState &a = c.buffer(0), &b = c.buffer(1), &cc = c.buffer(2);
  const size_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const size_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (kb != k || cc.rows != m || cc.cols != n)
    c.fail("shapes do not match: A is " + c.shape(0) + ", B is " + c.shape(1) + ", C is " +
           c.shape(2) + " (trans_a " + std::to_string(ta) + ", trans_b " + std::to_string(tb) +
           ": need op(A) m x k, op(B) k x n, C m x n)");
  c.access();
}

void check_syrk(Checker& c) {
  auto p = c.params<hcr_syrk_params_t>("hcr_syrk_params_t", HCR_SYRK_PARAMS_STRUCT_SIZE);
  c.operands({{"A", Use::read}, {"C", Use::update}});
  c.enumeration("uplo", p.uplo, "HCR_LOWER", "HCR_UPPER");
  c.enumeration("trans", p.trans, "HCR_NO_TRANS", "HCR_TRANS");
  const uint64_t n = c.square(1);
  const bool t = p.trans == HCR_TRANS;
  if ((t ? c.buffer(0).cols : c.buffer(0).rows) != n)
    c.fail("shapes do not match: A is " + c.shape(0) + ", C is " + c.shape(1) + " (trans " +
           std::to_string(t) + ": need op(A) n x k, C n x n)");
  c.access();
}

void check_trsm(Checker& c) {
  auto p = c.params<hcr_trsm_params_t>("hcr_trsm_params_t", HCR_TRSM_PARAMS_STRUCT_SIZE);
  c.operands({{"A", Use::read}, {"B", Use::update}});
  c.enumeration("side", p.side, "HCR_LEFT", "HCR_RIGHT");
  c.enumeration("uplo", p.uplo, "HCR_LOWER", "HCR_UPPER");
  c.enumeration("trans", p.trans, "HCR_NO_TRANS", "HCR_TRANS");
  c.enumeration("diag", p.diag, "HCR_NON_UNIT", "HCR_UNIT");
  const uint64_t order = c.square(0);
  const bool left = p.side == HCR_LEFT;
  if (order != (left ? c.buffer(1).rows : c.buffer(1).cols))
    c.fail("shapes do not match: A is " + c.shape(0) + ", B is " + c.shape(1) +
           (left ? " (side left: need A m x m, B m x n)" : " (side right: need A n x n, B m x n)"));
  c.access();
}

void check_potrf(Checker& c) {
  auto p = c.params<hcr_potrf_params_t>("hcr_potrf_params_t", HCR_POTRF_PARAMS_STRUCT_SIZE);
  c.operands({{"A", Use::update}});
  c.enumeration("uplo", p.uplo, "HCR_LOWER", "HCR_UPPER");
  c.square(0);
  c.access();
}

void check_getrf_nopiv(Checker& c, const TaskNode& t) {
  if (!t.param_offsets.empty())
    c.fail("takes no parameters, got " + std::to_string(t.param_offsets.size()));
  c.operands({{"A", Use::update}});
  c.square(0);
  c.access();
}

}  // namespace

const BuiltinSpec* find_builtin(std::string_view name) noexcept {
  for (const BuiltinSpec& b : kBuiltins)
    if (name == b.name) return &b;
  return nullptr;
}

void check_builtin_task(const BuiltinSpec& spec, const TaskNode& t) {
  Checker c(spec, t);
  switch (spec.op) {
    case BuiltinOp::gemm: check_gemm(c, t); break;
    case BuiltinOp::syrk: check_syrk(c); break;
    case BuiltinOp::trsm: check_trsm(c); break;
    case BuiltinOp::potrf: check_potrf(c); break;
    case BuiltinOp::getrf_nopiv: check_getrf_nopiv(c, t); break;
  }
}

}  // namespace hcr::detail
