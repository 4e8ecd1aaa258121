# hcr_add_plugin(<target> [NAME <plugin>] <sources>...)
#
# Builds a backend plugin: a MODULE library against the plugin SDK, with hidden symbols and a
# version script that exports only the entry point hcr_plugin_get_api. Installed with hcr so that
# out-of-tree backends build the same way (see samples/plugin).
#
# The library is named libhcr-<plugin>.so, where <plugin> should be the name the plugin gives
# itself (HCR_SDK_PLUGIN's second argument, what [[backend]] tables say): with [[backend]] tables
# the loader opens a libhcr-<name>.so only when a table names <name> (and the others only when a
# named plugin is missing). NAME defaults to the target's name without a leading "hcr_" or "hcr-":
# hcr_add_plugin(hcr_mine ...) and hcr_add_plugin(mine ...) both make libhcr-mine.so.
set(_HCR_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/hcr-plugin.map")

function(hcr_add_plugin target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "NAME" "")
  if(arg_NAME)
    set(name "${arg_NAME}")
  else()
    string(REGEX REPLACE "^hcr[_-]" "" name "${target}")
  endif()
  if(NOT name MATCHES "^[A-Za-z0-9_.-]+$")
    message(FATAL_ERROR "hcr_add_plugin(${target}): '${name}' is not a plugin name "
                        "(letters, digits, '_', '-', '.')")
  endif()
  add_library(${target} MODULE ${arg_UNPARSED_ARGUMENTS})
  if(TARGET hcr::sdk)
    target_link_libraries(${target} PRIVATE hcr::sdk)
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "hcr-${name}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_features(${target} PRIVATE cxx_std_20)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${target} PRIVATE
      "LINKER:--version-script=${_HCR_PLUGIN_MAP}" "LINKER:--no-undefined")
  endif()
endfunction()
