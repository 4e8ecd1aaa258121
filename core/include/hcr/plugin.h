/*
 * hcr plugin ABI — the contract between the hcr runtime (the host) and a backend plugin.
 *
 * Pure C. A plugin is a shared library that exports exactly one symbol,
 *
 *     const hcr_plugin_api_t* hcr_plugin_get_api(void);
 *
 * returning a table of function pointers that stays valid while the library is loaded. Nothing
 * else crosses the boundary: no C++ type, no exception, no allocator. Options reach a plugin as
 * key/value strings; errors come back as opaque objects the plugin creates and the host frees
 * through the table.
 *
 * Versioning: HCR_ABI_MAJOR changes when anything is removed, reordered or retyped; HCR_ABI_MINOR
 * when something is appended. APPEND ONLY: new fields go at the end of a struct, new entries at the
 * end of the table, and every struct starts with `struct_size` so either side can tell which
 * fields the other knows. The host refuses a plugin of another major version, a table smaller
 * than HCR_PLUGIN_API_STRUCT_SIZE_1_0, or a NULL required entry.
 *
 * Struct sizes: the caller of a function sets `struct_size` of every struct it passes in to the
 * HCR_*_STRUCT_SIZE constant it was compiled with (for out-structs too). The callee reads and
 * writes only the fields that fit in min(its size, caller's size). Arrays of structs (arguments,
 * options) are laid out by the sender: element i starts i * array[0].struct_size bytes in, and
 * every struct's size is a multiple of 8, so a receiver built with another minor version steps
 * through them by that stride (hcr/sdk/backend.hpp's sdk::element does).
 *
 * Threads: every entry may be called from any host thread, concurrently, except plugin_create and
 * plugin_destroy, which the host never overlaps with other calls on the same instance. Completion
 * callbacks may run on any thread, including inside the call that started the operation.
 *
 * Conventions in comments: "borrowed" means the pointer is valid only for the stated span and the
 * receiver must copy what it keeps; "owned by X" says who frees it; "// out" marks fields the
 * callee writes.
 */
#ifndef HCR_PLUGIN_H_
#define HCR_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#include <hcr/builtin_params.h> /* the built-in kernels' parameter blocks (part of this ABI) */

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Versions, export, struct-size helpers
 * ====================================================================================== */

#define HCR_ABI_MAJOR 1
#define HCR_ABI_MINOR 2

/* Name of the one exported symbol. */
#define HCR_PLUGIN_ENTRY_SYMBOL "hcr_plugin_get_api"

#if defined(_WIN32)
#define HCR_PLUGIN_EXPORT __declspec(dllexport)
#else
#define HCR_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Size of `type` up to and including `last_field`: the struct-size constants are computed this way
 * so that trailing padding never changes the number. */
#ifndef HCR_STRUCT_SIZE /* builtin_params.h defines the same */
#define HCR_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))
#endif

/* ======================================================================================
 * Errors
 * ====================================================================================== */

typedef enum hcr_error_code {
  HCR_ERROR_UNKNOWN = 1,
  HCR_ERROR_INVALID_ARGUMENT = 2, /* bad option, bad argument shape, bad kernel description */
  HCR_ERROR_NOT_FOUND = 3,        /* no such device or kernel */
  HCR_ERROR_UNSUPPORTED = 4,      /* the device cannot do this (kernel kind, operation) */
  HCR_ERROR_OUT_OF_MEMORY = 5,
  HCR_ERROR_DEVICE_LOST = 6, /* the device is gone or unusable; do not schedule on it again */
  HCR_ERROR_BACKEND = 7,     /* a native API (driver, BLAS, compiler) reported a failure */
  HCR_ERROR_INTERNAL = 8,
  HCR_ERROR_TIMEOUT = 9,
  HCR_ERROR_KERNEL = 10 /* the kernel itself reported a failure (user code) */
} hcr_error_code_t;

/* Opaque error created by the plugin. NULL means success. Ownership passes to whoever receives it
 * (the host, for every entry in this table); it is freed with hcr_plugin_api_t.error_destroy. */
typedef struct hcr_error hcr_error_t;

/* ======================================================================================
 * Host services — what the host hands the plugin at creation
 * ====================================================================================== */

typedef enum hcr_log_level {
  HCR_LOG_TRACE = 0,
  HCR_LOG_DEBUG = 1,
  HCR_LOG_INFO = 2,
  HCR_LOG_WARN = 3,
  HCR_LOG_ERROR = 4,
  HCR_LOG_OFF = 5
} hcr_log_level_t;

typedef struct hcr_host_services {
  size_t struct_size;
  void* extension;
  uint32_t abi_major; /* the ABI the host speaks */
  uint32_t abi_minor;
  void* host_context; /* opaque; pass back to every callback below */
  /* Thread-safe. `message` is borrowed for the call. Plugins never print; they log here. */
  void (*log)(void* host_context, hcr_log_level_t level, const char* message);
  hcr_log_level_t log_level; /* messages below this level are dropped; skip formatting them */
} hcr_host_services_t;
#define HCR_HOST_SERVICES_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_host_services_t, log_level)

/* ======================================================================================
 * Plugin instance
 * ====================================================================================== */

/* One backend option from the configuration ([[backend]] table), as strings. Nested tables and
 * arrays of tables are flattened to dotted keys: `device.0.name`. Arrays of values are joined with
 * commas. */
typedef struct hcr_option {
  size_t struct_size;
  const char* key;   /* borrowed for the plugin_create call */
  const char* value; /* borrowed for the plugin_create call */
} hcr_option_t;
#define HCR_OPTION_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_option_t, value)

typedef struct hcr_plugin hcr_plugin_t; /* opaque plugin instance, owned by the plugin */

typedef struct hcr_plugin_create_args {
  size_t struct_size;
  void* extension;
  /* Borrowed; valid until plugin_destroy returns. */
  const hcr_host_services_t* services;
  /* Borrowed for the call. A plugin rejects keys it does not know with HCR_ERROR_INVALID_ARGUMENT
   * and a message naming the key. */
  const hcr_option_t* options;
  size_t num_options;
  /* Borrowed for the call: the library file this plugin was loaded from (for diagnostics and for
   * finding files installed beside it). */
  const char* library_path;
  hcr_plugin_t* plugin; /* out; owned by the plugin, freed by plugin_destroy */
} hcr_plugin_create_args_t;
#define HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_plugin_create_args_t, plugin)

/* ======================================================================================
 * Devices
 * ====================================================================================== */

typedef enum hcr_device_kind {
  HCR_DEVICE_CPU = 1,
  HCR_DEVICE_GPU = 2,
  HCR_DEVICE_ACCELERATOR = 3, /* FPGAs and other OpenCL accelerators */
  HCR_DEVICE_SIM = 4          /* simulated device */
} hcr_device_kind_t;

/* Device flags. */
#define HCR_DEVICE_HOST_MEMORY                                                                     \
  0x1u                              /* kernels read and write host memory directly: no allocation, \
                                       no copies; arguments arrive as host pointers */
#define HCR_DEVICE_PINNED_HOST 0x2u /* the plugin offers host_alloc (page-locked host memory) */

typedef struct hcr_device_info {
  size_t struct_size;
  void* extension;
  const char* name;       /* out; owned by the plugin, valid until plugin_destroy */
  const char* arch;       /* out; architecture key: identical devices share a cost model. Owned by
                             the plugin, valid until plugin_destroy */
  hcr_device_kind_t kind; /* out */
  uint32_t flags;         /* out; HCR_DEVICE_* */
  uint64_t memory_bytes;  /* out; usable device memory (host RAM for host-memory devices) */
  uint32_t compute_units; /* out; cores, multiprocessors, compute units */
  uint32_t concurrency;   /* out; tasks the device runs at once (>= 1): CPU worker threads,
                             GPU streams */
  double peak_gflops;     /* out; first estimate for the cost model, 0 when unknown */
  double link_bandwidth;  /* out; bytes/s between host memory and this device, 0 when unknown */
  double link_latency;    /* out; seconds per transfer, 0 when unknown */
} hcr_device_info_t;
#define HCR_DEVICE_INFO_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_device_info_t, link_latency)

/* ======================================================================================
 * Completion — how asynchronous operations report back
 * ====================================================================================== */

typedef struct hcr_completion_info {
  size_t struct_size;
  /* Seconds the operation occupied the device (measured by the plugin, or modelled by a simulated
   * device); < 0 when the plugin does not know and the host should use its own clock. */
  double device_seconds;
  /* (ABI 1.1) Joules the operation used above the device's idle draw, where the plugin knows it
   * for the operation alone (a modelled device); < 0 when it does not (the host then attributes
   * the device meter's readings over the operations of each interval). */
  double joules;
} hcr_completion_info_t;
#define HCR_COMPLETION_INFO_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_completion_info_t, joules)
/* The size of an ABI 1.0 completion info (device_seconds only). */
#define HCR_COMPLETION_INFO_STRUCT_SIZE_1_0 HCR_STRUCT_SIZE(hcr_completion_info_t, device_seconds)

/* ======================================================================================
 * Energy (ABI 1.1)
 * ====================================================================================== */

typedef enum hcr_energy_source {
  HCR_ENERGY_NONE = 0,     /* no meter */
  HCR_ENERGY_MEASURED = 1, /* read from the hardware (NVML, RAPL) */
  HCR_ENERGY_MODELLED = 2  /* computed from a power model (a simulated device) */
} hcr_energy_source_t;

typedef struct hcr_energy_reading {
  size_t struct_size;
  uint32_t source;   /* out: hcr_energy_source_t */
  double joules;     /* out: energy used since the plugin was created; never decreases (the
                      * plugin unwraps counters that wrap around) */
  double watts;      /* out: the draw now; < 0 unknown */
  double idle_watts; /* out: the draw of the device doing nothing; < 0 unknown */
  double resolution; /* out: seconds between updates of `joules` (0: exact; RAPL ~0.001, NVML
                      * ~0.1): the host attributes readings over intervals at least this long */
} hcr_energy_reading_t;
#define HCR_ENERGY_READING_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_energy_reading_t, resolution)

/* Called exactly once per operation that was started successfully (the starting call returned
 * NULL), from any thread, possibly before the starting call returns. `error` is NULL on success;
 * otherwise ownership passes to the host. `info` is borrowed for the call and may be NULL. The
 * callback is short and never blocks on the plugin. */
typedef void (*hcr_done_fn)(void* user_data, hcr_error_t* error, const hcr_completion_info_t* info);

/* ======================================================================================
 * Memory
 * ====================================================================================== */

typedef struct hcr_memory hcr_memory_t; /* opaque device allocation, owned by the plugin */

typedef struct hcr_mem_alloc_args {
  size_t struct_size;
  void* extension;
  size_t device;
  uint64_t bytes;
  hcr_memory_t* memory; /* out; freed with mem_free */
} hcr_mem_alloc_args_t;
#define HCR_MEM_ALLOC_ARGS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_mem_alloc_args_t, memory)

/* A 2-D copy of `rows` rows of `width` bytes. One side of each end is set: `memory` (device
 * allocation of this plugin, at byte `offset`) or `host` (a host pointer, `offset` ignored).
 * Pitches are bytes between row starts; rows == 1 is a plain 1-D copy. */
typedef struct hcr_copy_args {
  size_t struct_size;
  void* extension;
  size_t device;            /* the device whose engine performs the copy */
  hcr_memory_t* src_memory; /* borrowed until done */
  const void* src_host;     /* borrowed until done */
  uint64_t src_offset;
  uint64_t src_pitch;
  hcr_memory_t* dst_memory; /* borrowed until done */
  void* dst_host;           /* borrowed until done */
  uint64_t dst_offset;
  uint64_t dst_pitch;
  uint64_t width; /* bytes per row */
  uint64_t rows;
  hcr_done_fn done;
  void* done_user_data;
} hcr_copy_args_t;
#define HCR_COPY_ARGS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_copy_args_t, done_user_data)

/* ======================================================================================
 * Kernels
 * ====================================================================================== */

typedef enum hcr_dtype {
  HCR_DTYPE_BYTES = 0,
  HCR_DTYPE_F16 = 1,
  HCR_DTYPE_BF16 = 2,
  HCR_DTYPE_F32 = 3,
  HCR_DTYPE_F64 = 4,
  HCR_DTYPE_I32 = 5,
  HCR_DTYPE_I64 = 6,
  HCR_DTYPE_U8 = 7
} hcr_dtype_t;

typedef enum hcr_access {
  HCR_ACCESS_READ = 1,
  HCR_ACCESS_WRITE = 2,
  HCR_ACCESS_READ_WRITE = 3
} hcr_access_t;

/* One buffer argument: a row-major matrix view of `rows` x `cols` elements with `ld` elements
 * between row starts (a vector is 1 x n). On a device with HCR_DEVICE_HOST_MEMORY, `host` points at
 * element (0,0) and `memory` is NULL; otherwise `memory` holds the data from byte `offset`. */
typedef struct hcr_arg {
  size_t struct_size;
  hcr_memory_t* memory; /* borrowed until the launch's done */
  void* host;           /* borrowed until the launch's done */
  uint64_t offset;
  hcr_dtype_t dtype;
  hcr_access_t access;
  uint64_t rows;
  uint64_t cols;
  uint64_t ld;
} hcr_arg_t;
#define HCR_ARG_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_arg_t, ld)

typedef struct hcr_kernel hcr_kernel_t; /* opaque per-device kernel handle, owned by the plugin */

/* What a host-function or native-function implementation receives when it runs. */
typedef struct hcr_exec_context {
  size_t struct_size;
  void* extension;
  const hcr_arg_t* args; /* borrowed for the call */
  size_t num_args;
  const void* params; /* borrowed for the call: the task's scalar parameters, packed */
  size_t params_size;
  void* host_token;    /* the launch's host_token, unchanged */
  void* native_queue;  /* backend's queue (cudaStream_t, cl_command_queue) or NULL */
  void* native_device; /* backend's device handle (what it is, each backend documents) or NULL */
  size_t device;
  uint32_t worker; /* which of the device's concurrent slots runs this (0..concurrency-1) */
  /* The scalar parameters one by one: the i-th starts at byte param_offsets[i] of `params` and
   * runs to the next offset (or to params_size). Borrowed for the call. */
  const uint32_t* param_offsets;
  size_t num_params;
} hcr_exec_context_t;
#define HCR_EXEC_CONTEXT_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_exec_context_t, num_params)

/* A host or native function implementation. Returns 0 on success; otherwise writes a
 * NUL-terminated message of at most `message_size` bytes into `message` and returns non-zero. */
typedef int (*hcr_kernel_fn)(void* user_data, const hcr_exec_context_t* context, char* message,
                             size_t message_size);

typedef enum hcr_impl_kind {
  HCR_IMPL_BUILTIN = 0,         /* the plugin's own kernel of that name (gemm_f32, ...) */
  HCR_IMPL_HOST_FUNCTION = 1,   /* `fn` runs on a host thread with host pointers (CPU, simulated) */
  HCR_IMPL_NATIVE_FUNCTION = 2, /* `fn` runs on a host thread and enqueues native work on
                                   context->native_queue; for the backend named by `api`. On a
                                   device with its own memory each argument's `host` holds the
                                   device address of its data (memory + offset), so `fn` needs no
                                   knowledge of the backend's hcr_memory_t */
  HCR_IMPL_SOURCE = 3,          /* source text the backend named by `api` compiles */
  HCR_IMPL_BINARY = 4           /* a prebuilt binary file for the backend named by `api` */
} hcr_impl_kind_t;

typedef struct hcr_kernel_desc {
  size_t struct_size;
  void* extension;
  const char* name; /* borrowed for the call */
  hcr_impl_kind_t kind;
  const char* api;    /* borrowed for the call; "host" for HOST_FUNCTION, else e.g. "opencl" */
  hcr_kernel_fn fn;   /* HOST_FUNCTION, NATIVE_FUNCTION */
  void* user_data;    /* passed to fn; owned by the host, valid until kernel_release */
  const char* source; /* SOURCE: borrowed for the call */
  size_t source_size;
  const char* build_options; /* SOURCE, BINARY: borrowed for the call; may be NULL */
  const char* binary_path;   /* BINARY: borrowed for the call */
  const char* entry;         /* SOURCE, BINARY: function name inside the program; NULL: `name` */
} hcr_kernel_desc_t;
#define HCR_KERNEL_DESC_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_kernel_desc_t, entry)

typedef struct hcr_kernel_get_args {
  size_t struct_size;
  void* extension;
  size_t device;
  const hcr_kernel_desc_t* desc; /* borrowed for the call */
  hcr_kernel_t* kernel;          /* out; freed with kernel_release */
} hcr_kernel_get_args_t;
#define HCR_KERNEL_GET_ARGS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_kernel_get_args_t, kernel)

/* Launch flags. */
#define HCR_LAUNCH_MEASURE 0x1u /* the host wants device_seconds in the completion info */

typedef struct hcr_launch_args {
  size_t struct_size;
  void* extension;
  size_t device;
  hcr_kernel_t* kernel;
  const hcr_arg_t* args; /* borrowed until done: the host keeps them alive */
  size_t num_args;
  const void* params; /* borrowed until done */
  size_t params_size;
  void* host_token; /* opaque; handed to the implementation in hcr_exec_context_t */
  uint32_t flags;   /* HCR_LAUNCH_* */
  hcr_done_fn done;
  void* done_user_data;
  /* The scalar parameters one by one: the i-th starts at byte param_offsets[i] of `params` and
   * runs to the next offset (or to params_size). Borrowed until done. SOURCE and BINARY kernels
   * receive the buffer arguments first, then each parameter as its own kernel argument. */
  const uint32_t* param_offsets;
  size_t num_params;
  /* Work geometry for SOURCE and BINARY kernels: work items per dimension (global_size[0] == 0:
   * one per element of the first buffer the task writes, 1-D) and the work-group / block size
   * (0: the backend chooses). */
  uint64_t global_size[3];
  uint32_t local_size[3];
} hcr_launch_args_t;
#define HCR_LAUNCH_ARGS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_launch_args_t, local_size)

/* ======================================================================================
 * Built-in kernels — names and parameter blocks every backend that offers them agrees on
 * ====================================================================================== */

/* In <hcr/builtin_params.h>, included above: the enumerations (hcr_blas_trans_t, ...), the
 * parameter blocks (hcr_gemm_params_t, hcr_syrk_params_t, hcr_trsm_params_t, hcr_potrf_params_t)
 * with their struct-size constants, and what each built-in computes. */

/* ======================================================================================
 * Device graphs (ABI 1.2) — a recorded graph the device runs by itself
 * ====================================================================================== */

/* When every task of a recorded graph (hcr::Graph) ran on one device, the host may hand the whole
 * graph to that device's plugin once (graph_create) and then run it with one call per replay
 * (graph_launch), as CUDA graphs and Taskflow's executor do: the plugin follows the edges itself,
 * with no host round trip per task. The host keeps the graph's buffers acquired on the device for
 * the whole launch, in the modes its nodes access them. */

typedef struct hcr_graph hcr_graph_t; /* opaque device graph, owned by the plugin */

/* One node: a launch as hcr_launch_args_t describes one (no done, no flags: the graph's), and the
 * nodes that wait for it. Its buffer arguments are `num_args` consecutive elements of the graph's
 * argument array (node 0's first, then node 1's, ...; see hcr_graph_launch_args_t). */
typedef struct hcr_graph_node {
  size_t struct_size;
  void* extension;
  hcr_kernel_t* kernel; /* from kernel_get on the graph's device; valid while the graph lives */
  size_t num_args;
  const void* params; /* borrowed for graph_create (copy what you keep) */
  size_t params_size;
  const uint32_t* param_offsets; /* borrowed for graph_create */
  size_t num_params;
  uint64_t global_size[3];
  uint32_t local_size[3];
  void* host_token;           /* handed to the implementation in hcr_exec_context_t */
  const uint32_t* successors; /* borrowed for graph_create: indices of nodes after this one */
  size_t num_successors;
} hcr_graph_node_t;
#define HCR_GRAPH_NODE_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_graph_node_t, num_successors)

typedef struct hcr_graph_create_args {
  size_t struct_size;
  void* extension;
  size_t device;
  /* Borrowed for the call. In an order where every successor comes after its predecessors (a
   * node's successors are at higher indices); nodes without predecessors may run at once. */
  const hcr_graph_node_t* nodes; /* element i at i * nodes[0].struct_size bytes */
  size_t num_nodes;
  /* Every node's arguments as they are now, in node order (borrowed for the call). On a device
   * without HCR_DEVICE_HOST_MEMORY `memory` may be NULL: the data need not be there yet. A launch
   * may hand other memory (another buffer of the same shape bound by a replay, data moved):
   * shapes, types and access modes stay the same. */
  const hcr_arg_t* args;
  size_t num_args;
  hcr_graph_t* graph; /* out; freed with graph_release */
} hcr_graph_create_args_t;
#define HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_graph_create_args_t, graph)

typedef struct hcr_graph_launch_args {
  size_t struct_size;
  void* extension;
  hcr_graph_t* graph;
  /* Every node's arguments, laid out as at graph_create (borrowed until done). */
  const hcr_arg_t* args;
  size_t num_args;
  uint32_t flags; /* HCR_LAUNCH_MEASURE: device_seconds of the whole graph in the completion */
  /* Called once, when every node has run or been skipped. A node whose predecessor failed (or was
   * skipped) is skipped; the others run. The error is the first failure's; before calling done
   * the plugin writes that node's index to *failed_node (when failed_node is not NULL), and leaves
   * *failed_node as it was when it cannot tell which node failed (a fault of the whole graph). */
  hcr_done_fn done;
  void* done_user_data;
  uint64_t* failed_node; /* out (may be NULL) */
} hcr_graph_launch_args_t;
#define HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_graph_launch_args_t, failed_node)

/* ======================================================================================
 * The table
 * ====================================================================================== */

typedef struct hcr_plugin_api {
  size_t struct_size; /* HCR_PLUGIN_API_STRUCT_SIZE of the plugin's build */
  void* extension;
  uint32_t abi_major; /* HCR_ABI_MAJOR of the plugin's build */
  uint32_t abi_minor;
  const char* name;    /* static; the backend name [[backend]] tables refer to, e.g. "cpu" */
  const char* version; /* static; the plugin's own version text */

  /* --- errors (required) --- */
  hcr_error_code_t (*error_code)(const hcr_error_t* error);
  const char* (*error_message)(const hcr_error_t* error); /* owned by the error */
  void (*error_destroy)(hcr_error_t* error);

  /* --- lifecycle (required) --- */
  hcr_error_t* (*plugin_create)(hcr_plugin_create_args_t* args);
  /* Waits for the plugin's outstanding operations, then frees everything it owns. */
  void (*plugin_destroy)(hcr_plugin_t* plugin);

  /* --- devices (required) --- */
  hcr_error_t* (*device_count)(hcr_plugin_t* plugin, size_t* count /* out */);
  hcr_error_t* (*device_info)(hcr_plugin_t* plugin, size_t device, hcr_device_info_t* info);

  /* --- memory (required for devices without HCR_DEVICE_HOST_MEMORY; may be NULL otherwise) --- */
  /* mem_alloc and mem_free are synchronous and quick: the host may call them while it holds its
   * own locks, so they must not wait for the device's outstanding work (free in stream order,
   * as cudaFreeAsync does, rather than cudaFree). mem_free of memory an operation in flight
   * still uses never happens: the host waits for those operations first. */
  hcr_error_t* (*mem_alloc)(hcr_plugin_t* plugin, hcr_mem_alloc_args_t* args);
  void (*mem_free)(hcr_plugin_t* plugin, size_t device, hcr_memory_t* memory);
  /* Asynchronous; args borrowed for the call, the memory it names until done. */
  hcr_error_t* (*copy)(hcr_plugin_t* plugin, const hcr_copy_args_t* args);

  /* --- kernels (required) --- */
  /* HCR_ERROR_NOT_FOUND or HCR_ERROR_UNSUPPORTED when the device cannot run this kernel: the host
   * then never places it there. Other errors are real failures (e.g. a build log). */
  hcr_error_t* (*kernel_get)(hcr_plugin_t* plugin, hcr_kernel_get_args_t* args);
  void (*kernel_release)(hcr_plugin_t* plugin, hcr_kernel_t* kernel);
  /* Asynchronous; args borrowed for the call, what they point to until done. */
  hcr_error_t* (*launch)(hcr_plugin_t* plugin, const hcr_launch_args_t* args);

  /* --- synchronisation (required) --- */
  /* Blocks until every operation started on `device` has called its done. */
  hcr_error_t* (*synchronize)(hcr_plugin_t* plugin, size_t device);

  /* --- optional (may be NULL) --- */
  /* Page-locked host memory for faster transfers (devices with HCR_DEVICE_PINNED_HOST). */
  hcr_error_t* (*host_alloc)(hcr_plugin_t* plugin, uint64_t bytes, void** out);
  void (*host_free)(hcr_plugin_t* plugin, void* ptr);
  /* A first estimate of a launch's duration before anything was measured; the cost model
   * replaces it with measurements. args->done is ignored. */
  hcr_error_t* (*estimate)(hcr_plugin_t* plugin, const hcr_launch_args_t* args,
                           double* seconds /* out */);

  /* --- appended in ABI 1.1 (optional: a 1.0 table ends before them, or they are NULL) --- */
  /* The device's energy meter (see hcr_energy_reading_t); HCR_ERROR_UNSUPPORTED or a source of
   * HCR_ENERGY_NONE when it has none. Quick: the host reads it every few tens of milliseconds. */
  hcr_error_t* (*device_energy)(hcr_plugin_t* plugin, size_t device,
                                hcr_energy_reading_t* reading /* in: struct_size; out */);

  /* --- appended in ABI 1.2 (optional: NULL, or beyond an older table's struct_size) --- */
  /* Device graphs (see hcr_graph_node_t). graph_create returns HCR_ERROR_UNSUPPORTED for a graph
   * the device cannot run as one (the host then replays it task by task). The host never launches
   * a graph while an earlier launch of it has not called done, and releases it only after. */
  hcr_error_t* (*graph_create)(hcr_plugin_t* plugin, hcr_graph_create_args_t* args);
  /* Asynchronous: args borrowed for the call, what they point to until done. */
  hcr_error_t* (*graph_launch)(hcr_plugin_t* plugin, const hcr_graph_launch_args_t* args);
  void (*graph_release)(hcr_plugin_t* plugin, hcr_graph_t* graph);
} hcr_plugin_api_t;

/* The smallest table a major-1 host accepts: every entry of ABI 1.0 (optional ones may be NULL). */
#define HCR_PLUGIN_API_STRUCT_SIZE_1_0 HCR_STRUCT_SIZE(hcr_plugin_api_t, estimate)
#define HCR_PLUGIN_API_STRUCT_SIZE_1_1 HCR_STRUCT_SIZE(hcr_plugin_api_t, device_energy)
#define HCR_PLUGIN_API_STRUCT_SIZE HCR_STRUCT_SIZE(hcr_plugin_api_t, graph_release)

/* The entry point every plugin exports. The returned table is static: valid while the library is
 * loaded, never freed. */
typedef const hcr_plugin_api_t* (*hcr_plugin_get_api_fn)(void);
HCR_PLUGIN_EXPORT const hcr_plugin_api_t* hcr_plugin_get_api(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HCR_PLUGIN_H_ */
