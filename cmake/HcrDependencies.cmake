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
