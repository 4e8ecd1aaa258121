/* The plugin header compiles as strict C99, and C sees the same struct sizes as C++. */
#include <hcr/plugin.h>

const size_t hcr_c_struct_sizes[] = {
    HCR_HOST_SERVICES_STRUCT_SIZE,      HCR_OPTION_STRUCT_SIZE,
    HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE, HCR_DEVICE_INFO_STRUCT_SIZE,
    HCR_COMPLETION_INFO_STRUCT_SIZE,    HCR_MEM_ALLOC_ARGS_STRUCT_SIZE,
    HCR_COPY_ARGS_STRUCT_SIZE,          HCR_ARG_STRUCT_SIZE,
    HCR_EXEC_CONTEXT_STRUCT_SIZE,       HCR_KERNEL_DESC_STRUCT_SIZE,
    HCR_KERNEL_GET_ARGS_STRUCT_SIZE,    HCR_LAUNCH_ARGS_STRUCT_SIZE,
    HCR_GEMM_PARAMS_STRUCT_SIZE,        HCR_PLUGIN_API_STRUCT_SIZE,
    HCR_GRAPH_NODE_STRUCT_SIZE,         HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE,
    HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE,
};
const size_t hcr_c_struct_count = sizeof hcr_c_struct_sizes / sizeof hcr_c_struct_sizes[0];
