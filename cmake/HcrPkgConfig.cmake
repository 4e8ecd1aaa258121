# pkg-config files (lib/pkgconfig/<name>.pc) for builds that do not use CMake. Every path in them is
# relative to the file's own directory (${pcfiledir}), so that an install moved elsewhere (or made
# with --prefix) still holds; and their Libs carry a run path to the install's lib directory, so
# that a program linked with them runs as built (no LD_LIBRARY_PATH, no ldconfig after installing
# into /usr/local, whose lib directory the loader finds only through its cache).
file(RELATIVE_PATH HCR_PC_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" HCR_PC_PREFIX "${HCR_PC_PREFIX}")

# The run path is left out where the lib directory is one the linker searches anyway (a
# distribution's package into /usr): there it is redundant, and Debian's policy asks for none.
set(_hcr_pc_rpath ON)
foreach(dir IN LISTS CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES)
  if(dir STREQUAL CMAKE_INSTALL_FULL_LIBDIR)
    set(_hcr_pc_rpath OFF)
  endif()
endforeach()
option(HCR_PKG_CONFIG_RPATH
       "Give the pkg-config files' Libs a run path (-Wl,-rpath) to the install's lib directory"
       ${_hcr_pc_rpath})
if(HCR_PKG_CONFIG_RPATH)
  set(HCR_PC_RPATH " -Wl,-rpath,\${libdir}")
else()
  set(HCR_PC_RPATH "")
endif()

# hcr_pkg_config(<name>): cmake/<name>.pc.in configured into the build tree and installed.
function(hcr_pkg_config name)
  configure_file("${PROJECT_SOURCE_DIR}/cmake/${name}.pc.in" "${PROJECT_BINARY_DIR}/${name}.pc"
                 @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/${name}.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
          COMPONENT dev)
endfunction()
