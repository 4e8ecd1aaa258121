/* The DLPack structures (the legacy, unversioned ABI that every producer and consumer speaks),
 * written from the published specification (dmlc/dlpack, include/dlpack/dlpack.h, v0.8):
 * https://dmlc.github.io/dlpack/latest/c_api.html. The Python exchange: a PyCapsule named
 * "dltensor" holding a DLManagedTensor*; the consumer renames it "used_dltensor" and calls the
 * deleter when done; a capsule destroyed still named "dltensor" calls it itself. */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3, /* pinned host memory, reachable from the host */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11, /* pinned host memory, reachable from the host */
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;   /* DLDataTypeCode */
  uint8_t bits;   /* per lane */
  uint16_t lanes; /* 1 for scalars */
} DLDataType;

typedef struct {
  void* data; /* the allocation's start; element (0, ...) is at data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;   /* ndim entries */
  int64_t* strides; /* ndim entries, in elements (not bytes); NULL: compact row-major */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;                             /* the producer's */
  void (*deleter)(struct DLManagedTensor* self); /* called by the consumer when done; may be NULL */
} DLManagedTensor;

#ifdef __cplusplus
}  // extern "C"
static_assert(sizeof(DLDevice) == 8 && sizeof(DLDataType) == 4, "DLPack layout");
static_assert(sizeof(void*) != 8 || (sizeof(DLTensor) == 48 && sizeof(DLManagedTensor) == 64),
              "DLPack layout");
#endif
