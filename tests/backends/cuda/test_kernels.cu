// Device code for the CUDA backend tests: native launcher functions, as an application would
// write them (a __global__ kernel plus a host function with the hcr_kernel_fn signature that
// enqueues it on the stream hcr hands over), and host-side f16/bf16 conversions.
#include "test_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

__global__ void scale_kernel(float* x, unsigned long long rows, unsigned long long cols,
                             unsigned long long ld, float a) {
  const unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const unsigned long long r = i / cols, c = i % cols;
  x[r * ld + c] *= a;
}

// One step of the halo-tile stencil (test_kernels.hpp): a thread per interior element.
__global__ void halo_step_kernel(const int* a, int* b, unsigned long long ld,
                                 unsigned long long top, unsigned long long left,
                                 unsigned long long rows, unsigned long long cols,
                                 unsigned long long row0, unsigned long long col0,
                                 unsigned long long n, unsigned long long m) {
  const unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const unsigned long long r = i / cols, c = i % cols, gr = row0 + r, gc = col0 + c;
  const unsigned long long x = (top + r) * ld + left + c;
  b[x] = gr == 0 || gc == 0 || gr + 1 == n || gc + 1 == m
             ? a[x]
             : (2 * a[x] + a[x - 1] + a[x + 1] + a[x - ld] + a[x + ld]) % 10007;
}

int fail(char* message, size_t size, const char* text) {
  std::snprintf(message, size, "%s", text);
  return 1;
}

}  // namespace

extern "C" int hcr_test_scale(void* user_data, const hcr_exec_context_t* ctx, char* message,
                              size_t message_size) {
  if (ctx->num_args != 1 || ctx->args[0].dtype != HCR_DTYPE_F32)
    return fail(message, message_size, "hcr_test_scale takes one f32 buffer");
  if (ctx->args[0].host == nullptr && ctx->args[0].rows * ctx->args[0].cols != 0)
    return fail(message, message_size, "no device pointer in args[0].host");
  if (ctx->native_queue == nullptr) return fail(message, message_size, "no stream");
  if (ctx->num_params != 1 || ctx->params_size < sizeof(float))
    return fail(message, message_size, "hcr_test_scale takes one float parameter");
  float a = 0;
  std::memcpy(&a, static_cast<const char*>(ctx->params) + ctx->param_offsets[0], sizeof a);
  const hcr_arg_t& x = ctx->args[0];
  const unsigned long long n = x.rows * x.cols;
  if (auto* seen = static_cast<NativeSeen*>(user_data)) {
    seen->calls += 1;
    seen->ordinal = ctx->native_device ? *static_cast<const int*>(ctx->native_device) : -1;
    seen->worker = ctx->worker;
    seen->stream = ctx->native_queue;
    int current = -1;
    cudaGetDevice(&current);
    seen->current_device = current;
  }
  if (n == 0) return 0;
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  scale_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(ctx->native_queue)>>>(
      static_cast<float*>(x.host), x.rows, x.cols, x.ld, a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return fail(message, message_size, cudaGetErrorString(e));
  return 0;
}

extern "C" int hcr_test_halo_step(void*, const hcr_exec_context_t* ctx, char* message,
                                  size_t message_size) {
  if (ctx->num_args != 2 || ctx->num_params != 8)
    return fail(message, message_size, "hcr_test_halo_step takes 2 buffers, 8 parameters");
  unsigned long long p[8];
  for (int i = 0; i < 8; ++i)
    std::memcpy(&p[i], static_cast<const char*>(ctx->params) + ctx->param_offsets[i], sizeof p[i]);
  const hcr_arg_t& a = ctx->args[0];
  const unsigned long long rows = a.rows - p[0] - p[2], cols = a.cols - p[1] - p[3];
  const unsigned blocks = static_cast<unsigned>((rows * cols + 255) / 256);
  halo_step_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(ctx->native_queue)>>>(
      static_cast<const int*>(a.host), static_cast<int*>(ctx->args[1].host), a.ld, p[0], p[1], rows,
      cols, p[4], p[5], p[6], p[7]);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return fail(message, message_size, cudaGetErrorString(e));
  return 0;
}

extern "C" int hcr_test_fail(void*, const hcr_exec_context_t*, char* message, size_t message_size) {
  return fail(message, message_size, "native failure on purpose");
}

extern "C" int hcr_test_sync_stream(void*, const hcr_exec_context_t* ctx, char*, size_t) {
  // What a careless launcher does: the error (a capturing stream cannot be synchronized) is lost.
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(ctx->native_queue));
  (void)cudaGetLastError();
  return 0;
}

int test_gpu_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool test_is_pinned(const void* p) {
  cudaPointerAttributes at{};
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return at.type == cudaMemoryTypeHost;
}

uint16_t test_f32_to_f16(float x) {
  __half h = __float2half_rn(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float test_f16_to_f32(uint16_t bits) {
  __half h;
  std::memcpy(&h, &bits, sizeof bits);
  return __half2float(h);
}

uint16_t test_f32_to_bf16(float x) {
  __nv_bfloat16 h = __float2bfloat16_rn(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float test_bf16_to_f32(uint16_t bits) {
  __nv_bfloat16 h;
  std::memcpy(&h, &bits, sizeof bits);
  return __bfloat162float(h);
}
