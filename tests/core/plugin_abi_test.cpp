// The plugin ABI's layout is a contract: these sizes may only grow by appending (minor version),
// and every struct starts with struct_size.
#include <hcr/plugin.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <type_traits>

extern "C" const size_t hcr_c_struct_sizes[];
extern "C" const size_t hcr_c_struct_count;

namespace {

#define HCR_CHECK_STRUCT(type, size_const)                                          \
  static_assert(offsetof(type, struct_size) == 0, #type ": struct_size first");     \
  static_assert(size_const <= sizeof(type), #type ": size constant within struct"); \
  static_assert(std::is_standard_layout_v<type>, #type ": standard layout");

HCR_CHECK_STRUCT(hcr_host_services_t, HCR_HOST_SERVICES_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_option_t, HCR_OPTION_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_plugin_create_args_t, HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_device_info_t, HCR_DEVICE_INFO_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_completion_info_t, HCR_COMPLETION_INFO_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_energy_reading_t, HCR_ENERGY_READING_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_mem_alloc_args_t, HCR_MEM_ALLOC_ARGS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_copy_args_t, HCR_COPY_ARGS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_arg_t, HCR_ARG_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_exec_context_t, HCR_EXEC_CONTEXT_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_kernel_desc_t, HCR_KERNEL_DESC_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_kernel_get_args_t, HCR_KERNEL_GET_ARGS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_launch_args_t, HCR_LAUNCH_ARGS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_gemm_params_t, HCR_GEMM_PARAMS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_syrk_params_t, HCR_SYRK_PARAMS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_trsm_params_t, HCR_TRSM_PARAMS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_potrf_params_t, HCR_POTRF_PARAMS_STRUCT_SIZE)
HCR_CHECK_STRUCT(hcr_plugin_api_t, HCR_PLUGIN_API_STRUCT_SIZE)

// The version fields keep their places in every major version: the loader reads them before it
// knows which major a plugin speaks.
static_assert(offsetof(hcr_plugin_api_t, abi_major) == 2 * sizeof(void*));
static_assert(offsetof(hcr_plugin_api_t, abi_minor) == 2 * sizeof(void*) + 4);
static_assert(HCR_PLUGIN_API_STRUCT_SIZE >= HCR_PLUGIN_API_STRUCT_SIZE_1_0);

TEST(PluginAbi, SizesAreFrozenForAbi1OnLp64) {
  if (sizeof(void*) != 8) GTEST_SKIP() << "frozen figures are for LP64 targets";
  // Changing one of these numbers breaks every plugin built before: append instead, and bump
  // HCR_ABI_MINOR; or bump HCR_ABI_MAJOR for a deliberate break.
  EXPECT_EQ(HCR_HOST_SERVICES_STRUCT_SIZE, 44u);
  EXPECT_EQ(HCR_OPTION_STRUCT_SIZE, 24u);
  EXPECT_EQ(HCR_PLUGIN_CREATE_ARGS_STRUCT_SIZE, 56u);
  EXPECT_EQ(HCR_DEVICE_INFO_STRUCT_SIZE, 80u);
  EXPECT_EQ(HCR_COMPLETION_INFO_STRUCT_SIZE_1_0, 16u);
  EXPECT_EQ(HCR_COMPLETION_INFO_STRUCT_SIZE, 24u);  // 1.1: joules
  EXPECT_EQ(HCR_MEM_ALLOC_ARGS_STRUCT_SIZE, 40u);
  EXPECT_EQ(HCR_COPY_ARGS_STRUCT_SIZE, 120u);
  EXPECT_EQ(HCR_ARG_STRUCT_SIZE, 64u);
  EXPECT_EQ(HCR_EXEC_CONTEXT_STRUCT_SIZE, 104u);
  EXPECT_EQ(HCR_KERNEL_DESC_STRUCT_SIZE, 96u);
  EXPECT_EQ(HCR_KERNEL_GET_ARGS_STRUCT_SIZE, 40u);
  EXPECT_EQ(HCR_LAUNCH_ARGS_STRUCT_SIZE, 148u);
  EXPECT_EQ(HCR_GEMM_PARAMS_STRUCT_SIZE_1_0, 24u);  // alpha, beta
  // ABI 1.1: gemm's trans_a and trans_b appended; the other built-ins' parameter blocks.
  EXPECT_EQ(HCR_GEMM_PARAMS_STRUCT_SIZE, 32u);
  EXPECT_EQ(HCR_SYRK_PARAMS_STRUCT_SIZE, 32u);
  EXPECT_EQ(HCR_TRSM_PARAMS_STRUCT_SIZE, 32u);
  EXPECT_EQ(HCR_POTRF_PARAMS_STRUCT_SIZE, 12u);
  EXPECT_EQ(HCR_PLUGIN_API_STRUCT_SIZE_1_0, 176u);
  EXPECT_EQ(HCR_PLUGIN_API_STRUCT_SIZE_1_1, 184u);  // 1.1: device_energy
  EXPECT_EQ(HCR_PLUGIN_API_STRUCT_SIZE, 208u);  // 1.2: graph_create, graph_launch, graph_release
  EXPECT_EQ(HCR_GRAPH_NODE_STRUCT_SIZE, 128u);
  EXPECT_EQ(HCR_GRAPH_CREATE_ARGS_STRUCT_SIZE, 64u);
  EXPECT_EQ(HCR_GRAPH_LAUNCH_ARGS_STRUCT_SIZE, 72u);
  EXPECT_EQ(HCR_ENERGY_READING_STRUCT_SIZE, 48u);
}

TEST(PluginAbi, CSeesTheSameSizesAsCxx) {
  const size_t cxx[] = {
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
  ASSERT_EQ(hcr_c_struct_count, sizeof cxx / sizeof cxx[0]);
  for (size_t i = 0; i < hcr_c_struct_count; ++i) EXPECT_EQ(hcr_c_struct_sizes[i], cxx[i]) << i;
}

TEST(PluginAbi, EnumValuesMatchTheCxxApi) {
  EXPECT_EQ(HCR_ACCESS_READ | HCR_ACCESS_WRITE, HCR_ACCESS_READ_WRITE);
  EXPECT_EQ(HCR_LOG_TRACE, 0);
  EXPECT_EQ(HCR_LOG_OFF, 5);
  EXPECT_EQ(HCR_DTYPE_F32, 3);
  EXPECT_EQ(HCR_DTYPE_F64, 4);
}

}  // namespace
