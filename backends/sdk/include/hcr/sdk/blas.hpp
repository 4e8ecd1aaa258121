// hcr backend SDK: the built-in BLAS and LAPACK kernels of <hcr/builtin_params.h> as a backend
// reads a launch of one: which built-in a kernel name is, the buffers it takes, and its parameter
// block decoded into plain values (alpha, beta and the flags the enumerations stand for), checked
// the same way whichever library computes it.
//
//   auto b = hcr::sdk::find_blas_builtin(desc.name);           // {BlasOp::syrk, HCR_DTYPE_F64}
//   ...
//   const hcr::sdk::BlasParams p = hcr::sdk::read_blas_params(b->op, "syrk_f64", args);
//   cblas_dsyrk(CblasRowMajor, p.upper ? CblasUpper : CblasLower, ...);
//
// Header-only, as the rest of the SDK. Every function is thread-safe (none holds state).
#pragma once

#include <hcr/sdk/backend.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace hcr::sdk {

/// The operations of the built-in kernels.
enum class BlasOp : uint8_t { gemm, syrk, trsm, potrf, getrf_nopiv };

/// "gemm", "syrk", "trsm", "potrf", "getrf_nopiv".
inline const char* blas_op_name(BlasOp op) noexcept {
  switch (op) {
    case BlasOp::gemm: return "gemm";
    case BlasOp::syrk: return "syrk";
    case BlasOp::trsm: return "trsm";
    case BlasOp::potrf: return "potrf";
    case BlasOp::getrf_nopiv: return "getrf_nopiv";
  }
  return "?";
}

/// A built-in kernel: the operation and its element type.
struct BlasBuiltin {
  BlasOp op = BlasOp::gemm;
  hcr_dtype_t dtype = HCR_DTYPE_F32;
};

/// The built-in named `name` ("gemm_f32", "getrf_nopiv_f64", ...), or nullopt: every operation in
/// f32 and f64, and, where `half_gemm`, gemm in f16 and bf16 too ("gemm_bf16").
inline std::optional<BlasBuiltin> find_blas_builtin(std::string_view name,
                                                    bool half_gemm = false) noexcept {
  const size_t us = name.rfind('_');
  if (us == std::string_view::npos) return std::nullopt;
  const std::string_view base = name.substr(0, us), type = name.substr(us + 1);
  for (BlasOp op : {BlasOp::gemm, BlasOp::syrk, BlasOp::trsm, BlasOp::potrf, BlasOp::getrf_nopiv}) {
    if (base != blas_op_name(op)) continue;
    if (type == "f32") return BlasBuiltin{op, HCR_DTYPE_F32};
    if (type == "f64") return BlasBuiltin{op, HCR_DTYPE_F64};
    if (half_gemm && op == BlasOp::gemm && type == "f16") return BlasBuiltin{op, HCR_DTYPE_F16};
    if (half_gemm && op == BlasOp::gemm && type == "bf16") return BlasBuiltin{op, HCR_DTYPE_BF16};
    return std::nullopt;
  }
  return std::nullopt;
}

/// The kernel's name: "trsm_f32".
inline std::string blas_builtin_name(BlasBuiltin b) {
  return std::string(blas_op_name(b.op)) + "_" + dtype_name(b.dtype);
}

/// The buffers an operation takes, in order (the launch's arguments), and its parameter block.
struct BlasOperands {
  const char* names[3];    ///< "A", "B", "C"; null past `count`
  size_t count;            ///< gemm 3; syrk, trsm 2; potrf, getrf_nopiv 1
  const char* list;        ///< "A, B, C"
  const char* params;      ///< "hcr_gemm_params_t"; null for getrf_nopiv, which takes none
  size_t params_min_size;  ///< the block's size in the oldest ABI that has it
};

inline BlasOperands blas_operands(BlasOp op) noexcept {
  switch (op) {
    case BlasOp::gemm:
      return {{"A", "B", "C"}, 3, "A, B, C", "hcr_gemm_params_t", HCR_GEMM_PARAMS_STRUCT_SIZE_1_0};
    case BlasOp::syrk:
      return {{"A", "C", nullptr}, 2, "A, C", "hcr_syrk_params_t", HCR_SYRK_PARAMS_STRUCT_SIZE};
    case BlasOp::trsm:
      return {{"A", "B", nullptr}, 2, "A, B", "hcr_trsm_params_t", HCR_TRSM_PARAMS_STRUCT_SIZE};
    case BlasOp::potrf:
      return {{"A", nullptr, nullptr}, 1, "A", "hcr_potrf_params_t", HCR_POTRF_PARAMS_STRUCT_SIZE};
    case BlasOp::getrf_nopiv: return {{"A", nullptr, nullptr}, 1, "A", nullptr, 0};
  }
  return {{nullptr, nullptr, nullptr}, 0, "", nullptr, 0};
}

/// A launch's parameter block, decoded: plugin.h's defaults for what the caller did not send.
struct BlasParams {
  double alpha = 1, beta = 0;             ///< gemm, syrk: both; trsm: alpha
  bool trans_a = false, trans_b = false;  ///< gemm; syrk's and trsm's `trans` is trans_a
  bool upper = false;                     ///< syrk, trsm, potrf: uplo is HCR_UPPER
  bool right = false;                     ///< trsm: side is HCR_RIGHT
  bool unit = false;                      ///< trsm: diag is HCR_UNIT
};

/// Two conventions for reading a block, each held to by its backends' tests; kept apart so that
/// neither changes what it accepts or says.
enum class BlasParamsRules : uint8_t {
  /// The device backends (cuda, opencl): a launch without a block takes the defaults, whatever the
  /// kernel; getrf_nopiv's parameters are not read. Messages: "gemm_f32 parameter trans_a = 2: must
  /// be HCR_NO_TRANS (0) or HCR_TRANS (1)", "syrk_f32 parameters: 24 bytes, expected an
  /// hcr_syrk_params_t of at least 32 bytes".
  device,
  /// host_blas (the cpu and sim backends): only gemm may go without a block, getrf_nopiv takes
  /// none. Messages: "gemm_f32: trans_a 2 is neither HCR_NO_TRANS (0) nor HCR_TRANS (1)",
  /// "potrf_f64: parameters: 0 bytes, expected an hcr_potrf_params_t".
  host,
};

namespace detail {

[[noreturn]] inline void blas_params_invalid(const std::string& kernel, const std::string& what) {
  throw Error(HCR_ERROR_INVALID_ARGUMENT, kernel + ": " + what);
}

// A block of type T under the host rules: at least `min_size` bytes known to the caller's ABI,
// struct_size within the bytes given, what this build does not know ignored (APPEND ONLY).
template <class T>
T read_host_block(const std::string& kernel, const char* type, const void* params, size_t size,
                  size_t min_size) {
  if (size < sizeof(size_t) || params == nullptr)
    blas_params_invalid(
        kernel, std::string("parameters: ") + std::to_string(size) + " bytes, expected an " + type);
  size_t struct_size = 0;
  std::memcpy(&struct_size, params, sizeof struct_size);
  if (struct_size < min_size || struct_size > size)
    blas_params_invalid(kernel, std::string(type) + ": struct_size " + std::to_string(struct_size) +
                                    " in " + std::to_string(size) +
                                    " bytes of parameters (it must be at least " +
                                    std::to_string(min_size) + " and fit in them)");
  T out{};
  std::memcpy(static_cast<void*>(&out), params, std::min(struct_size, sizeof(T)));
  return out;
}

// An enumeration field that is 0 or 1, as a flag; either rules' message for any other value.
inline bool blas_flag(BlasParamsRules rules, const std::string& kernel, const char* field,
                      int32_t v, const char* zero, const char* one) {
  if (rules == BlasParamsRules::device) return param_flag(kernel, field, v, zero, one);
  if (v != 0 && v != 1)
    blas_params_invalid(kernel, std::string(field) + " " + std::to_string(v) + " is neither " +
                                    zero + " (0) nor " + one + " (1)");
  return v == 1;
}

template <class T>
std::optional<T> read_block(BlasParamsRules rules, const std::string& kernel, const char* type,
                            const void* params, size_t size, size_t min_size) {
  if (rules == BlasParamsRules::host)
    return read_host_block<T>(kernel, type, params, size, min_size);
  hcr_launch_args_t a{};
  a.params = params;
  a.params_size = size;
  return read_params<T>(kernel, type, a, min_size);
}

}  // namespace detail

/// Reads and checks the parameter block of a launch of `op` (`params_size` bytes at `params`),
/// under `rules`; `kernel` ("gemm_f32") starts every message. Throws Error(HCR_ERROR_INVALID_
/// ARGUMENT) for a block too small, a struct_size outside the bytes given or below the oldest ABI's
/// block, or an enumeration that is neither 0 nor 1 (naming the field). Fields are checked in the
/// block's order.
inline BlasParams read_blas_params(BlasOp op, const std::string& kernel, const void* params,
                                   size_t params_size,
                                   BlasParamsRules rules = BlasParamsRules::device) {
  using detail::blas_flag;
  const BlasOperands o = blas_operands(op);
  BlasParams r;
  if (op == BlasOp::getrf_nopiv) {
    if (rules == BlasParamsRules::host && params_size != 0)
      detail::blas_params_invalid(
          kernel, "takes no parameters, got " + std::to_string(params_size) + " bytes of them");
    return r;
  }
  if (params_size == 0 && (rules == BlasParamsRules::device || op == BlasOp::gemm)) return r;
  switch (op) {
    case BlasOp::gemm:
      if (auto p = detail::read_block<hcr_gemm_params_t>(rules, kernel, o.params, params,
                                                         params_size, o.params_min_size)) {
        r.alpha = p->alpha;
        r.beta = p->beta;
        r.trans_a = blas_flag(rules, kernel, "trans_a", p->trans_a, "HCR_NO_TRANS", "HCR_TRANS");
        r.trans_b = blas_flag(rules, kernel, "trans_b", p->trans_b, "HCR_NO_TRANS", "HCR_TRANS");
      }
      break;
    case BlasOp::syrk:
      if (auto p = detail::read_block<hcr_syrk_params_t>(rules, kernel, o.params, params,
                                                         params_size, o.params_min_size)) {
        r.alpha = p->alpha;
        r.beta = p->beta;
        r.upper = blas_flag(rules, kernel, "uplo", p->uplo, "HCR_LOWER", "HCR_UPPER");
        r.trans_a = blas_flag(rules, kernel, "trans", p->trans, "HCR_NO_TRANS", "HCR_TRANS");
      }
      break;
    case BlasOp::trsm:
      if (auto p = detail::read_block<hcr_trsm_params_t>(rules, kernel, o.params, params,
                                                         params_size, o.params_min_size)) {
        r.alpha = p->alpha;
        r.right = blas_flag(rules, kernel, "side", p->side, "HCR_LEFT", "HCR_RIGHT");
        r.upper = blas_flag(rules, kernel, "uplo", p->uplo, "HCR_LOWER", "HCR_UPPER");
        r.trans_a = blas_flag(rules, kernel, "trans", p->trans, "HCR_NO_TRANS", "HCR_TRANS");
        r.unit = blas_flag(rules, kernel, "diag", p->diag, "HCR_NON_UNIT", "HCR_UNIT");
      }
      break;
    case BlasOp::potrf:
      if (auto p = detail::read_block<hcr_potrf_params_t>(rules, kernel, o.params, params,
                                                          params_size, o.params_min_size))
        r.upper = blas_flag(rules, kernel, "uplo", p->uplo, "HCR_LOWER", "HCR_UPPER");
      break;
    case BlasOp::getrf_nopiv: break;
  }
  return r;
}

/// As above, for the parameters of launch `a`.
inline BlasParams read_blas_params(BlasOp op, const std::string& kernel, const hcr_launch_args_t& a,
                                   BlasParamsRules rules = BlasParamsRules::device) {
  return read_blas_params(op, kernel, a.params, a.params_size, rules);
}

}  // namespace hcr::sdk
