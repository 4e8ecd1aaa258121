# hcr_add_plugin(<target> <sources>...)
#
# Builds a backend plugin: a MODULE library against the plugin SDK, with hidden symbols and a
# version script that exports only the entry point hcr_plugin_get_api. Installed with hcr so that
# out-of-tree backends build the same way (see samples/plugin).
set(_HCR_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/hcr-plugin.map")

function(hcr_add_plugin target)
  add_library(${target} MODULE ${ARGN})
  if(TARGET hcr::sdk)
    target_link_libraries(${target} PRIVATE hcr::sdk)
  endif()
  set_target_properties(${target} PROPERTIES
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_features(${target} PRIVATE cxx_std_20)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${target} PRIVATE
      "LINKER:--version-script=${_HCR_PLUGIN_MAP}" "LINKER:--no-undefined")
  endif()
endfunction()
