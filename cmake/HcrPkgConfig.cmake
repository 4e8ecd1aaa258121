# pkg-config files (lib/pkgconfig/<name>.pc) for builds that do not use CMake. Every path in them is
# relative to the file's own directory (${pcfiledir}), so that an install moved elsewhere (or made
# with --prefix) still holds; and their Libs carry a run path to the install's lib directory, so
# that a program linked with them runs as built (no LD_LIBRARY_PATH, no ldconfig after installing
# into /usr/local, whose lib directory the loader finds only through its cache).
file(RELATIVE_PATH HCR_PC_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" HCR_PC_PREFIX "${HCR_PC_PREFIX}")

# The run path is left out where the lib directory is one the linker searches anyway (a
# distribution's package into /usr): there it is redundant, and Debian's policy asks for none.
# Which directory that is is known at install time only (`cmake --install --prefix`, and CPack's
# packages into /usr from a build configured for /usr/local), so both forms are configured and
# the install takes one: AUTO by the lib directory installed to, ON or OFF always.
set(HCR_PKG_CONFIG_RPATH AUTO CACHE STRING
    "Give the pkg-config files' Libs a run path (-Wl,-rpath) to the install's lib directory: \
AUTO (unless it is a directory the linker searches anyway), ON or OFF")
set_property(CACHE HCR_PKG_CONFIG_RPATH PROPERTY STRINGS AUTO ON OFF)
set(_hcr_pc_implicit ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES}
    ${CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES})
list(REMOVE_DUPLICATES _hcr_pc_implicit)
if(HCR_PKG_CONFIG_RPATH STREQUAL "AUTO")
  install(CODE "
    set(_libdir \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\")
    cmake_path(NORMAL_PATH _libdir)
    string(REGEX REPLACE \"/+$\" \"\" _libdir \"\${_libdir}\")
    set(_implicit \"${_hcr_pc_implicit}\")
    list(FIND _implicit \"\${_libdir}\" _at)  # (install scripts run under old policies: no IN_LIST)
    set(HCR_PC_FORM rpath)
    if(NOT _at EQUAL -1)
      set(HCR_PC_FORM plain)
    endif()" COMPONENT dev)
elseif(HCR_PKG_CONFIG_RPATH)
  install(CODE "set(HCR_PC_FORM rpath)" COMPONENT dev)
else()
  install(CODE "set(HCR_PC_FORM plain)" COMPONENT dev)
endif()

# hcr_pkg_config(<name>): cmake/<name>.pc.in configured into the build tree in both forms
# (pkgconfig/rpath, pkgconfig/plain) and installed in the form chosen above.
function(hcr_pkg_config name)
  set(HCR_PC_RPATH " -Wl,-rpath,\${libdir}")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/${name}.pc.in"
                 "${PROJECT_BINARY_DIR}/pkgconfig/rpath/${name}.pc" @ONLY)
  set(HCR_PC_RPATH "")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/${name}.pc.in"
                 "${PROJECT_BINARY_DIR}/pkgconfig/plain/${name}.pc" @ONLY)
  set(dir "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  install(CODE "file(INSTALL DESTINATION \"${dir}\" TYPE FILE
    FILES \"${PROJECT_BINARY_DIR}/pkgconfig/\${HCR_PC_FORM}/${name}.pc\")" COMPONENT dev)
endfunction()
