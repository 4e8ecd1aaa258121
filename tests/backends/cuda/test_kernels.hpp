// What test_kernels.cu (compiled by nvcc) offers the CUDA backend tests (compiled by the host
// compiler, without CUDA headers).
#pragma once

#include <hcr/plugin.h>

#include <cstddef>
#include <cstdint>
#include <string>

/// What hcr_test_scale saw of its context, for the test to check.
struct NativeSeen {
  int calls = 0;
  int ordinal = -1;         ///< *(int*)native_device
  int current_device = -1;  ///< cudaGetDevice() inside the function
  uint32_t worker = 0;
  void* stream = nullptr;
};

/// args[0] (f32 matrix, device pointer in `host`) *= param 0 (float), on ctx->native_queue.
extern "C" int hcr_test_scale(void* user_data, const hcr_exec_context_t* ctx, char* message,
                              size_t message_size);
/// One step of an integer stencil over halo tiles: args[0] the input tile's region, args[1] the
/// output's (i32, device pointers in `host`, packed); parameters (u64): the ghosts top, left,
/// bottom, right, the interior's first row and column in the n x m grid, n, m. Each interior
/// element off the grid's border becomes (2 x + its four neighbours) % 10007; the border keeps.
extern "C" int hcr_test_halo_step(void* user_data, const hcr_exec_context_t* ctx, char* message,
                                  size_t message_size);
/// Always fails with "native failure on purpose".
extern "C" int hcr_test_fail(void* user_data, const hcr_exec_context_t* ctx, char* message,
                             size_t message_size);

/// Synchronizes its stream and succeeds whatever that returned: a launcher a stream capture
/// cannot record (device graphs).
extern "C" int hcr_test_sync_stream(void* user_data, const hcr_exec_context_t* ctx, char* message,
                                    size_t message_size);

/// cudaGetDeviceCount through the tests' own CUDA runtime; 0 and the error text when it fails.
int test_gpu_count(std::string* why = nullptr);
bool test_is_pinned(const void* p);

uint16_t test_f32_to_f16(float x);
float test_f16_to_f32(uint16_t bits);
uint16_t test_f32_to_bf16(float x);
float test_bf16_to_f32(uint16_t bits);
