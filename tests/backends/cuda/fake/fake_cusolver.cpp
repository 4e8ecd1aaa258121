// A fake cuSOLVER (built as libcusolver.so.<major> beside the fake CUDA runtime) for the CUDA
// backend's tests without a GPU: the dense entries the plugin opens (potrf and getrf with their
// workspace queries), with cuSOLVER's column-major semantics and argument checks, computed on the
// host with naive loops on the handle's stream of the fake runtime. Like the real library it needs
// a workspace of the size its query returned and a devInfo in device memory, and reports a failed
// factorization only through devInfo: the plugin's status path is checked for real. The workspace
// is scribbled over on every call, so a plugin that shared it between concurrent operations would
// produce wrong numbers.
//
// Built a second time with HCR_FAKE_CUSOLVER_INCOMPLETE (without cusolverDnDpotrf): the library a
// test loads in place of this one to see the plugin decline the factorizations.
#include <cusolverDn.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

extern "C" void hcr_fake_enqueue(cudaStream_t stream, void (*fn)(void*), void* ctx);
extern "C" int hcr_fake_device_range(const void* p, size_t bytes);
extern "C" void hcr_fake_fault();
extern "C" void hcr_fake_track(int delta);

struct cusolverDnContext {
  cudaStream_t stream = nullptr;
};

namespace {

// Workspace sizes (elements): odd, growing with n and larger than a small scratch block, so that a
// plugin that ignores the query (or reuses too small a workspace) is caught.
int potrf_lwork(int n) { return 64 * n + 517; }
int getrf_lwork(int m, int n) { return 48 * std::max(m, n) + 1029; }

bool on_device(const void* p, int rows, int cols, int ld, size_t es) {
  if (rows <= 0 || cols <= 0) return true;
  return hcr_fake_device_range(p, ((static_cast<size_t>(cols) - 1) * ld + rows) * es) != 0;
}

template <class T>
void scribble(T* work, int lwork) {
  for (int i = 0; i < lwork; ++i) work[i] = std::numeric_limits<T>::quiet_NaN();
}

// Cholesky of the `upper` (else lower) triangle, column-major: A = L L^T with L lower, or
// A = U^T U with U upper, in place; the other triangle is neither read nor written. On a leading
// minor that is not positive definite it stops with info = its order, as LAPACK does.
template <class T>
struct Potrf {
  bool upper;
  int n;
  T* a;
  int lda;
  T* work;
  int lwork;
  int* info;

  // L(i, j) for i >= j: stored at (i, j) when lower, at (j, i) (that is U(j, i)) when upper.
  T& l(int i, int j) const {
    return upper ? a[j + static_cast<size_t>(i) * lda] : a[i + static_cast<size_t>(j) * lda];
  }
  static void run(void* self) {
    auto* f = static_cast<Potrf*>(self);
    scribble(f->work, f->lwork);
    int status = 0;
    for (int j = 0; j < f->n && status == 0; ++j) {
      double d = f->l(j, j);
      for (int p = 0; p < j; ++p) d -= static_cast<double>(f->l(j, p)) * f->l(j, p);
      if (!(d > 0)) {  // NaN too
        status = j + 1;
        break;
      }
      const double djj = std::sqrt(d);
      f->l(j, j) = static_cast<T>(djj);
      for (int i = j + 1; i < f->n; ++i) {
        double v = f->l(i, j);
        for (int p = 0; p < j; ++p) v -= static_cast<double>(f->l(i, p)) * f->l(j, p);
        f->l(i, j) = static_cast<T>(v / djj);
      }
    }
    *f->info = status;
    delete f;
  }
};

template <class T>
cusolverStatus_t potrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, T* A, int lda, T* work,
                       int lwork, int* info) {
  if (h == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if ((uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) || n < 0 ||
      lda < std::max(1, n) || lwork < potrf_lwork(n))
    return CUSOLVER_STATUS_INVALID_VALUE;
  if (!on_device(A, n, n, lda, sizeof(T)) || !on_device(work, lwork, 1, lwork, sizeof(T)) ||
      !on_device(info, 1, 1, 1, sizeof(int))) {
    hcr_fake_fault();
    return CUSOLVER_STATUS_SUCCESS;  // the launch "succeeds"; the stream faults
  }
  hcr_fake_enqueue(h->stream, &Potrf<T>::run,
                   new Potrf<T>{uplo == CUBLAS_FILL_MODE_UPPER, n, A, lda, work, lwork, info});
  return CUSOLVER_STATUS_SUCCESS;
}

// LU without pivoting, column-major m x n: A = L U in place, L unit lower (diagonal not stored).
// A zero pivot sets info to its (1-based) index and leaves its column unscaled; the factorization
// carries on, as LAPACK's getf2 does.
template <class T>
struct Getrf {
  int m, n;
  T* a;
  int lda;
  T* work;
  int lwork;
  int* info;

  static void run(void* self) {
    auto* f = static_cast<Getrf*>(self);
    scribble(f->work, f->lwork);
    auto A = [f](int i, int j) -> T& { return f->a[i + static_cast<size_t>(j) * f->lda]; };
    int status = 0;
    for (int j = 0; j < std::min(f->m, f->n); ++j) {
      const T pivot = A(j, j);
      if (pivot != T(0)) {
        for (int i = j + 1; i < f->m; ++i) A(i, j) /= pivot;
      } else if (status == 0) {
        status = j + 1;
      }
      for (int c = j + 1; c < f->n; ++c)
        for (int i = j + 1; i < f->m; ++i) A(i, c) -= A(i, j) * A(j, c);
    }
    *f->info = status;
    delete f;
  }
};

template <class T>
cusolverStatus_t getrf(cusolverDnHandle_t h, int m, int n, T* A, int lda, T* work, int* ipiv,
                       int* info) {
  if (h == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || lda < std::max(1, m)) return CUSOLVER_STATUS_INVALID_VALUE;
  // The fake does only what hcr asks for: LU without pivoting (devIpiv NULL).
  if (ipiv != nullptr) return CUSOLVER_STATUS_NOT_SUPPORTED;
  const int lwork = getrf_lwork(m, n);
  if (!on_device(A, m, n, lda, sizeof(T)) || !on_device(work, lwork, 1, lwork, sizeof(T)) ||
      !on_device(info, 1, 1, 1, sizeof(int))) {
    hcr_fake_fault();
    return CUSOLVER_STATUS_SUCCESS;
  }
  hcr_fake_enqueue(h->stream, &Getrf<T>::run, new Getrf<T>{m, n, A, lda, work, lwork, info});
  return CUSOLVER_STATUS_SUCCESS;
}

}  // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t* h) {
  *h = new cusolverDnContext;
  hcr_fake_track(1);
  return CUSOLVER_STATUS_SUCCESS;
}

FAKE_EXPORT cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h) {
  delete h;
  hcr_fake_track(-1);
  return CUSOLVER_STATUS_SUCCESS;
}

FAKE_EXPORT cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t s) {
  if (h == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUSOLVER_STATUS_SUCCESS;
}

FAKE_EXPORT cusolverStatus_t cusolverDnSpotrf_bufferSize(cusolverDnHandle_t h, cublasFillMode_t,
                                                         int n, float*, int lda, int* lwork) {
  if (h == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (n < 0 || lda < std::max(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;
  *lwork = potrf_lwork(n);
  return CUSOLVER_STATUS_SUCCESS;
}

FAKE_EXPORT cusolverStatus_t cusolverDnDpotrf_bufferSize(cusolverDnHandle_t h, cublasFillMode_t,
                                                         int n, double*, int lda, int* lwork) {
  if (h == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (n < 0 || lda < std::max(1, n)) return CUSOLVER_STATUS_INVALID_VALUE;
  *lwork = potrf_lwork(n);
  return CUSOLVER_STATUS_SUCCESS;
}

FAKE_EXPORT cusolverStatus_t cusolverDnSpotrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n,
                                              float* A, int lda, float* work, int lwork,
                                              int* info) {
  return potrf(h, uplo, n, A, lda, work, lwork, info);
}

#ifndef HCR_FAKE_CUSOLVER_INCOMPLETE
FAKE_EXPORT cusolverStatus_t cusolverDnDpotrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n,
                                              double* A, int lda, double* work, int lwork,
                                              int* info) {
  return potrf(h, uplo, n, A, lda, work, lwork, info);
}
#endif

FAKE_EXPORT cusolverStatus_t cusolverDnSgetrf_bufferSize(cusolverDnHandle_t h, int m, int n, float*,
                                                         int lda, int* lwork) {
  if (h == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || lda < std::max(1, m)) return CUSOLVER_STATUS_INVALID_VALUE;
  *lwork = getrf_lwork(m, n);
  return CUSOLVER_STATUS_SUCCESS;
}

FAKE_EXPORT cusolverStatus_t cusolverDnDgetrf_bufferSize(cusolverDnHandle_t h, int m, int n,
                                                         double*, int lda, int* lwork) {
  if (h == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || lda < std::max(1, m)) return CUSOLVER_STATUS_INVALID_VALUE;
  *lwork = getrf_lwork(m, n);
  return CUSOLVER_STATUS_SUCCESS;
}

FAKE_EXPORT cusolverStatus_t cusolverDnSgetrf(cusolverDnHandle_t h, int m, int n, float* A, int lda,
                                              float* work, int* ipiv, int* info) {
  return getrf(h, m, n, A, lda, work, ipiv, info);
}

FAKE_EXPORT cusolverStatus_t cusolverDnDgetrf(cusolverDnHandle_t h, int m, int n, double* A,
                                              int lda, double* work, int* ipiv, int* info) {
  return getrf(h, m, n, A, lda, work, ipiv, info);
}
