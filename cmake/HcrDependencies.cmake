# Third-party packages, all from Debian 12 through find_package.

find_package(TBB 2021 REQUIRED)                       # libtbb-dev: TBB::tbb
find_package(Boost 1.74 REQUIRED)                     # libboost-dev: Boost::headers (Boost.DLL)
find_package(tomlplusplus 3 REQUIRED)                 # libtomlplusplus-dev
find_package(nlohmann_json 3 REQUIRED)                # nlohmann-json3-dev: trace files
find_package(Threads REQUIRED)

# libopenblas-dev ships an OpenBLASConfig.cmake with variables but no imported target: make one.
find_package(OpenBLAS 0.3 REQUIRED CONFIG)
if(NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES
    IMPORTED_LOCATION "${OpenBLAS_LIBRARIES}"
    INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIRS}")
endif()

# The CPU and simulated backends' own OpenBLAS: the single-threaded build (libopenblas-serial-dev),
# linked statically into each plugin, where hcr_add_plugin's version script hides it. The
# application's OpenBLAS (the shared library above, whatever it links) is then never touched: its
# thread count and its thread pool stay the application's, and the backends' tiles never compete
# for that pool (see backends/host_blas/README.md). Debian installs each OpenBLAS variant with its
# own OpenBLASConfig.cmake, which names the shared library; the archive lies beside it. Found in a
# function so that its OpenBLAS_* variables do not replace those of the shared library above.
function(_hcr_find_serial_openblas)
  find_package(OpenBLASSerial 0.3 CONFIG NAMES OpenBLAS
    PATHS "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-serial/cmake/openblas" NO_DEFAULT_PATH)
  if(NOT OpenBLASSerial_FOUND)
    message(FATAL_ERROR "The single-threaded OpenBLAS (Debian: libopenblas-serial-dev) was not "
                        "found; set OpenBLASSerial_DIR to the folder of its OpenBLASConfig.cmake")
  endif()
  get_filename_component(dir "${OpenBLAS_LIBRARIES}" DIRECTORY)
  if(NOT EXISTS "${dir}/libopenblas.a")
    message(FATAL_ERROR "OpenBLASSerial: no static archive libopenblas.a in ${dir} (from "
                        "${OpenBLASSerial_DIR})")
  endif()
  add_library(hcr_openblas_serial STATIC IMPORTED GLOBAL)
  add_library(hcr::openblas_serial ALIAS hcr_openblas_serial)
  set_target_properties(hcr_openblas_serial PROPERTIES
    IMPORTED_LOCATION "${dir}/libopenblas.a"
    INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;m")
endfunction()
_hcr_find_serial_openblas()
