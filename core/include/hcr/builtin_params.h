/*
 * hcr built-in kernels — the names and parameter blocks of the kernels every backend that offers
 * them agrees on (gemm, syrk, trsm, potrf, getrf_nopiv): what an application library fills in to
 * call one, and what a backend reads.
 *
 * Part of the plugin ABI (<hcr/plugin.h> includes it, and its versioning rules hold here: APPEND
 * ONLY, every block starts with `struct_size`), in a header of its own so that code that only calls
 * the built-ins (hcr::linalg, hcr::mpi, the runtime's submit-time checks) need not include the
 * whole plugin table. Pure C, like plugin.h; nothing here but types, constants and their layout.
 */
#ifndef HCR_BUILTIN_PARAMS_H_
#define HCR_BUILTIN_PARAMS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of `type` up to and including `last_field` (as in plugin.h, which defines it too). */
#ifndef HCR_STRUCT_SIZE
#define HCR_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))
#endif

/* Every matrix is row-major with its buffer's leading dimension (hcr_arg_t::ld). The suffix names
 * the element type: "_f32", "_f64" (and for gemm "_f16", "_bf16" with f32 accumulation where
 * offered). A backend that lacks one of them declines it in kernel_get (HCR_ERROR_NOT_FOUND): the
 * runtime then never places such a task there. Shapes or parameters that do not fit fail the
 * launch with HCR_ERROR_INVALID_ARGUMENT naming them (the runtime checks them at submit already).
 * The enumerations below are the values of the int32_t fields of the parameter blocks. */
typedef enum hcr_blas_trans { HCR_NO_TRANS = 0, HCR_TRANS = 1 } hcr_blas_trans_t;
typedef enum hcr_blas_uplo { HCR_LOWER = 0, HCR_UPPER = 1 } hcr_blas_uplo_t;
typedef enum hcr_blas_side { HCR_LEFT = 0, HCR_RIGHT = 1 } hcr_blas_side_t;
typedef enum hcr_blas_diag { HCR_NON_UNIT = 0, HCR_UNIT = 1 } hcr_blas_diag_t;

/* "gemm_<t>": args[0] = A (read), args[1] = B (read), args[2] = C (read-write, m x n);
 * C = alpha * op(A) * op(B) + beta * C, op(A) m x k (A itself k x m when trans_a), op(B) k x n
 * (B itself n x k when trans_b); params = hcr_gemm_params_t. With beta == 0 C's old contents are
 * not read at all (BLAS semantics: NaN or garbage there must not leak into the result), so the
 * runtime may hand a C that was never written. trans_a and trans_b were appended in ABI 1.1: a
 * block of an older caller (struct_size up to beta) means no transposes. */
typedef struct hcr_gemm_params {
  size_t struct_size;
  double alpha;
  double beta;
  int32_t trans_a; /* hcr_blas_trans_t (ABI 1.1) */
  int32_t trans_b; /* hcr_blas_trans_t (ABI 1.1) */
} hcr_gemm_params_t;
#define HCR_GEMM_PARAMS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_gemm_params_t, trans_b)
/* The size of an ABI 1.0 block (alpha and beta only). */
#define HCR_GEMM_PARAMS_STRUCT_SIZE_1_0 HCR_STRUCT_SIZE(hcr_gemm_params_t, beta)

/* "syrk_<t>" (ABI 1.1): args[0] = A (read), args[1] = C (read-write, n x n);
 * C = alpha * op(A) * op(A)^T + beta * C on the `uplo` triangle of C only (the other triangle is
 * neither read nor written); op(A) n x k (A itself k x n when trans). With beta == 0 the triangle's
 * old contents are not read (as for gemm). */
typedef struct hcr_syrk_params {
  size_t struct_size;
  double alpha;
  double beta;
  int32_t uplo;  /* hcr_blas_uplo_t */
  int32_t trans; /* hcr_blas_trans_t */
} hcr_syrk_params_t;
#define HCR_SYRK_PARAMS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_syrk_params_t, trans)

/* "trsm_<t>" (ABI 1.1): args[0] = A (read, triangular: m x m when side is left, n x n when right;
 * only its `uplo` triangle is read, and with diag unit not its diagonal either), args[1] = B
 * (read-write, m x n); B = alpha * op(A)^-1 * B (left) or alpha * B * op(A)^-1 (right). */
typedef struct hcr_trsm_params {
  size_t struct_size;
  double alpha;
  int32_t side;  /* hcr_blas_side_t */
  int32_t uplo;  /* hcr_blas_uplo_t */
  int32_t trans; /* hcr_blas_trans_t */
  int32_t diag;  /* hcr_blas_diag_t */
} hcr_trsm_params_t;
#define HCR_TRSM_PARAMS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_trsm_params_t, diag)

/* "potrf_<t>" (ABI 1.1): args[0] = A (read-write, n x n, symmetric positive definite, its `uplo`
 * triangle read); the Cholesky factor overwrites that triangle: A = L * L^T with L lower (uplo
 * lower) or A = U^T * U with U upper; the other triangle is untouched. A matrix that is not
 * positive definite fails the launch with HCR_ERROR_INVALID_ARGUMENT naming the order of the
 * leading minor that is not (LAPACK's info). */
typedef struct hcr_potrf_params {
  size_t struct_size;
  int32_t uplo; /* hcr_blas_uplo_t */
} hcr_potrf_params_t;
#define HCR_POTRF_PARAMS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_potrf_params_t, uplo)

/* "getrf_nopiv_<t>" (ABI 1.1, where a library offers it): args[0] = A (read-write, n x n);
 * A = L * U in place without pivoting, L unit lower (its diagonal not stored), U upper. A zero
 * pivot fails the launch with HCR_ERROR_INVALID_ARGUMENT naming its row. No params. */

/* ======================================================================================
 * Layout checks — the blocks cross the plugin boundary as bytes: a field that moves breaks
 * every plugin built before. Checked where the compiler can (C++, C11); LP64 figures frozen.
 * ====================================================================================== */

#if defined(__cplusplus)
#define HCR_BUILTIN_PARAMS_ASSERT(cond, what) static_assert(cond, what)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define HCR_BUILTIN_PARAMS_ASSERT(cond, what) _Static_assert(cond, what)
#else /* C99: an array of negative size where the condition fails */
#define HCR_BUILTIN_PARAMS_CAT2_(a, b) a##b
#define HCR_BUILTIN_PARAMS_CAT_(a, b) HCR_BUILTIN_PARAMS_CAT2_(a, b)
#define HCR_BUILTIN_PARAMS_ASSERT(cond, what) \
  typedef char HCR_BUILTIN_PARAMS_CAT_(hcr_builtin_params_check_, __LINE__)[(cond) ? 1 : -1]
#endif

HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_gemm_params_t, struct_size) == 0, "gemm: struct_size first");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_syrk_params_t, struct_size) == 0, "syrk: struct_size first");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_trsm_params_t, struct_size) == 0, "trsm: struct_size first");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_potrf_params_t, struct_size) == 0,
                          "potrf: struct_size first");
HCR_BUILTIN_PARAMS_ASSERT(HCR_GEMM_PARAMS_STRUCT_SIZE_1_0 == offsetof(hcr_gemm_params_t, trans_a),
                          "gemm: the ABI 1.0 block ends where trans_a starts");
HCR_BUILTIN_PARAMS_ASSERT(HCR_GEMM_PARAMS_STRUCT_SIZE <= sizeof(hcr_gemm_params_t), "gemm size");
HCR_BUILTIN_PARAMS_ASSERT(HCR_SYRK_PARAMS_STRUCT_SIZE <= sizeof(hcr_syrk_params_t), "syrk size");
HCR_BUILTIN_PARAMS_ASSERT(HCR_TRSM_PARAMS_STRUCT_SIZE <= sizeof(hcr_trsm_params_t), "trsm size");
HCR_BUILTIN_PARAMS_ASSERT(HCR_POTRF_PARAMS_STRUCT_SIZE <= sizeof(hcr_potrf_params_t), "potrf size");

#if defined(__LP64__) || defined(_WIN64)
/* ABI 1.1 on 64-bit targets (tests/core/plugin_abi_test.cpp freezes the same sizes). */
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_gemm_params_t, alpha) == 8, "gemm.alpha at 8");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_gemm_params_t, beta) == 16, "gemm.beta at 16");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_gemm_params_t, trans_a) == 24, "gemm.trans_a at 24");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_gemm_params_t, trans_b) == 28, "gemm.trans_b at 28");
HCR_BUILTIN_PARAMS_ASSERT(HCR_GEMM_PARAMS_STRUCT_SIZE_1_0 == 24, "gemm 1.0 block: 24 bytes");
HCR_BUILTIN_PARAMS_ASSERT(HCR_GEMM_PARAMS_STRUCT_SIZE == 32, "gemm block: 32 bytes");
HCR_BUILTIN_PARAMS_ASSERT(sizeof(hcr_gemm_params_t) == 32, "sizeof gemm block: 32");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_syrk_params_t, alpha) == 8, "syrk.alpha at 8");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_syrk_params_t, beta) == 16, "syrk.beta at 16");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_syrk_params_t, uplo) == 24, "syrk.uplo at 24");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_syrk_params_t, trans) == 28, "syrk.trans at 28");
HCR_BUILTIN_PARAMS_ASSERT(HCR_SYRK_PARAMS_STRUCT_SIZE == 32, "syrk block: 32 bytes");
HCR_BUILTIN_PARAMS_ASSERT(sizeof(hcr_syrk_params_t) == 32, "sizeof syrk block: 32");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_trsm_params_t, alpha) == 8, "trsm.alpha at 8");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_trsm_params_t, side) == 16, "trsm.side at 16");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_trsm_params_t, uplo) == 20, "trsm.uplo at 20");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_trsm_params_t, trans) == 24, "trsm.trans at 24");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_trsm_params_t, diag) == 28, "trsm.diag at 28");
HCR_BUILTIN_PARAMS_ASSERT(HCR_TRSM_PARAMS_STRUCT_SIZE == 32, "trsm block: 32 bytes");
HCR_BUILTIN_PARAMS_ASSERT(sizeof(hcr_trsm_params_t) == 32, "sizeof trsm block: 32");
HCR_BUILTIN_PARAMS_ASSERT(offsetof(hcr_potrf_params_t, uplo) == 8, "potrf.uplo at 8");
HCR_BUILTIN_PARAMS_ASSERT(HCR_POTRF_PARAMS_STRUCT_SIZE == 12, "potrf block: 12 bytes");
HCR_BUILTIN_PARAMS_ASSERT(sizeof(hcr_potrf_params_t) == 16, "sizeof potrf block: 16");
#endif

#undef HCR_BUILTIN_PARAMS_ASSERT
#undef HCR_BUILTIN_PARAMS_CAT_
#undef HCR_BUILTIN_PARAMS_CAT2_

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HCR_BUILTIN_PARAMS_H_ */
