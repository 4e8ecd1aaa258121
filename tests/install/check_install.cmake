# Installs hcr into a fresh prefix, builds samples/plugin against that install only, drops the
# plugin into a directory, and checks that `hcr devices` picks it up and its kernel runs; builds
# and runs samples/cholesky.cpp against hcr::linalg from the package; then builds a client with
# nothing but `pkg-config --cflags --libs hcr` and runs it as built, without LD_LIBRARY_PATH (the
# .pc's run path), and reads hcr-linalg's flags. With hcr::mpi installed, builds a C++-only client
# of it with find_package, and one with nothing but `pkg-config --cflags --libs hcr-mpi`, run as
# built (an MPI singleton: no mpirun).
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, CXX (the C++ compiler), and SANITIZE
# (HCR_SANITIZE of the build).
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(dropin "${WORK_DIR}/dropin")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
# A sanitized hcr needs sanitized clients: the sanitizer runtime must be a program's first library.
set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/samples/plugin" -B "${WORK_DIR}/plugin-build"
    -G "${GENERATOR}" -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_C_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/plugin-build")

file(MAKE_DIRECTORY "${dropin}")
file(CHMOD "${dropin}" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
# hcr_add_plugin names the library after the plugin: libhcr-sample.so, no OUTPUT_NAME needed.
file(GLOB plugin "${WORK_DIR}/plugin-build/libhcr-sample.so")
if(NOT plugin)
  file(GLOB built "${WORK_DIR}/plugin-build/*.so")
  message(FATAL_ERROR "hcr_add_plugin(hcr_sample ...) did not make libhcr-sample.so (made: ${built})")
endif()
file(COPY ${plugin} DESTINATION "${dropin}")

file(GLOB hcr_tool "${prefix}/bin/hcr")
run(${CMAKE_COMMAND} -E env HCR_PLUGIN_PATH=${dropin} ${hcr_tool} devices)
message(STATUS "hcr devices (installed):\n${out}")
foreach(expect "loaded   sample 1.0" "sample accelerator" "[sample]" "libhcr-cpu.so  (1 device)"
        "${prefix}")
  string(FIND "${out}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "`hcr devices` output lacks '${expect}'")
  endif()
endforeach()

run(${CMAKE_COMMAND} -E env HCR_PLUGIN_PATH=${dropin} "${WORK_DIR}/plugin-build/sample_client")
string(FIND "${out}" "sample_scale ran on device" at)
if(at EQUAL -1)
  message(FATAL_ERROR "sample_client did not run the plugin's kernel:\n${out}")
endif()
message(STATUS "out-of-tree plugin: built against the install, loaded, kernel ran")

# hcr::linalg from the package: samples/cholesky.cpp built with find_package(hcr) alone, and run.
set(linalg_dir "${WORK_DIR}/linalg-sample")
file(MAKE_DIRECTORY "${linalg_dir}")
file(COPY "${SOURCE_DIR}/samples/cholesky.cpp" DESTINATION "${linalg_dir}")
file(WRITE "${linalg_dir}/CMakeLists.txt" [=[
cmake_minimum_required(VERSION 3.25)
project(linalg_sample LANGUAGES CXX)
find_package(hcr 0.1 REQUIRED)
add_executable(cholesky cholesky.cpp)
target_link_libraries(cholesky PRIVATE hcr::linalg)
]=])
run(${CMAKE_COMMAND} -S "${linalg_dir}" -B "${linalg_dir}/build" -G "${GENERATOR}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${linalg_dir}/build")
run("${linalg_dir}/build/cholesky" 300 64)
string(FIND "${out}" "||A x - b|| / (||A|| ||x|| + ||b||) = " at)
if(at EQUAL -1)
  message(FATAL_ERROR "the Cholesky sample did not solve its system:\n${out}")
endif()
message(STATUS "hcr::linalg: the Cholesky sample builds against the install and solves")

# The README's plugin, as a reader copies it: its C++ and CMake blocks build against the install
# into libhcr-mine.so, which `hcr devices` loads as plugin "mine".
file(READ "${SOURCE_DIR}/README.md" readme)
string(FIND "${readme}" "## Writing a backend plugin" at)
string(SUBSTRING "${readme}" ${at} -1 readme)
function(readme_block lang var)  # the first ```<lang> block of `readme`, without its fences
  string(FIND "${readme}" "```${lang}\n" from)
  if(from EQUAL -1)
    message(FATAL_ERROR "README: no ${lang} block in 'Writing a backend plugin'")
  endif()
  string(LENGTH "```${lang}\n" fence)
  math(EXPR from "${from} + ${fence}")
  string(SUBSTRING "${readme}" ${from} -1 rest)
  string(FIND "${rest}" "```" to)
  string(SUBSTRING "${rest}" 0 ${to} text)
  set(${var} "${text}" PARENT_SCOPE)
endfunction()
readme_block(cpp readme_cpp)
readme_block(cmake readme_cmake)
set(readme_dir "${WORK_DIR}/readme-plugin")
file(WRITE "${readme_dir}/my_backend.cpp" "${readme_cpp}")
file(WRITE "${readme_dir}/CMakeLists.txt"
     "cmake_minimum_required(VERSION 3.25)\nproject(readme_plugin LANGUAGES CXX)\n${readme_cmake}")
run(${CMAKE_COMMAND} -S "${readme_dir}" -B "${readme_dir}/build" -G "${GENERATOR}"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${readme_dir}/build")
if(NOT EXISTS "${readme_dir}/build/libhcr-mine.so")
  file(GLOB built "${readme_dir}/build/*.so")
  message(FATAL_ERROR "the README's plugin did not build into libhcr-mine.so (made: ${built})")
endif()
file(MAKE_DIRECTORY "${readme_dir}/dropin")
file(CHMOD "${readme_dir}/dropin" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
file(COPY "${readme_dir}/build/libhcr-mine.so" DESTINATION "${readme_dir}/dropin")
run(${CMAKE_COMMAND} -E env HCR_PLUGIN_PATH=${readme_dir}/dropin ${hcr_tool} devices)
string(FIND "${out}" "loaded   mine 1.0" at)
if(at EQUAL -1)
  message(FATAL_ERROR "`hcr devices` did not load the README's plugin:\n${out}")
endif()
message(STATUS "the README's plugin builds into libhcr-mine.so and loads")

# pkg-config: the flags alone build and link a client, which finds the install's plugins.
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (Debian: apt-get install pkgconf)")
endif()
file(GLOB_RECURSE pc_file "${prefix}/*/pkgconfig/hcr.pc")
if(NOT pc_file)
  message(FATAL_ERROR "no hcr.pc installed under ${prefix}")
endif()
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} ${PKG_CONFIG} --cflags --libs hcr)
string(STRIP "${out}" pc_flags)
message(STATUS "pkg-config --cflags --libs hcr: ${pc_flags}")
separate_arguments(pc_args UNIX_COMMAND "${pc_flags}")
# A program built with a .pc's flags alone runs as built: its libraries are found through the run
# path the .pc gave it, from this install (not from one the loader finds elsewhere).
function(run_as_built program what)
  run(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ldd "${program}")
  string(FIND "${out}" "libhcr.so.0 => ${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: libhcr.so.0 is not found in ${prefix} (no run path?):\n${out}")
  endif()
  run(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH "${program}")
  set(out "${out}" PARENT_SCOPE)
endfunction()
file(WRITE "${WORK_DIR}/pc_client.cpp" [=[
#include <hcr/hcr.hpp>
#include <cstdio>
int main() {
  hcr::Runtime rt;
  std::printf("pkg-config client: %zu device(s)\n", rt.devices().size());
  return rt.devices().empty() ? 1 : 0;
}
]=])
set(san_args "")
if(SANITIZE)
  set(san_args "-fsanitize=${SANITIZE}")
endif()
run(${CXX} -std=c++20 ${san_args} "${WORK_DIR}/pc_client.cpp" -o "${WORK_DIR}/pc_client"
    ${pc_args})
run_as_built("${WORK_DIR}/pc_client" "the hcr.pc client")
string(FIND "${out}" "pkg-config client: " at)
if(at EQUAL -1)
  message(FATAL_ERROR "the pkg-config client did not run:\n${out}")
endif()
message(STATUS "pkg-config: hcr.pc builds and links a client that runs as built and finds the "
               "installed plugins")
run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} ${PKG_CONFIG} --cflags --libs hcr-linalg)
foreach(expect "-lhcr_linalg" "-lhcr")
  string(FIND "${out}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "pkg-config --libs hcr-linalg lacks ${expect}: ${out}")
  endif()
endforeach()

# hcr::mpi from the package, where hcr was built with MPI: a C++-only project (find_package(hcr)
# must find MPI's C target for it) builds and links a Cluster program. Not run: that needs mpirun.
if(EXISTS "${prefix}/include/hcr/mpi.hpp")
  set(mpi_dir "${WORK_DIR}/mpi-client")
  file(MAKE_DIRECTORY "${mpi_dir}")
  file(WRITE "${mpi_dir}/CMakeLists.txt" [=[
cmake_minimum_required(VERSION 3.25)
project(mpi_client LANGUAGES CXX)
find_package(hcr 0.1 REQUIRED)
add_executable(mpi_client main.cpp)
target_link_libraries(mpi_client PRIVATE hcr::mpi)
]=])
  file(WRITE "${mpi_dir}/main.cpp" [=[
#include <hcr/mpi.hpp>
int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  {
    hcr::Runtime rt;
    hcr::mpi::Cluster cl(rt);
    auto b = cl.buffer<float>(4, 4, 0);
    cl.wait_all();
  }
  MPI_Finalize();
}
]=])
  run(${CMAKE_COMMAND} -S "${mpi_dir}" -B "${mpi_dir}/build" -G "${GENERATOR}"
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${flags}")
  run(${CMAKE_COMMAND} --build "${mpi_dir}/build")
  message(STATUS "hcr::mpi: a C++-only client built against the install")

  # hcr-mpi.pc: flags alone (hcr's, hcr::linalg's, MPI's) build a Cluster program that runs as
  # built, as one rank.
  run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} ${PKG_CONFIG} --cflags --libs hcr-mpi)
  string(STRIP "${out}" mpi_pc_flags)
  message(STATUS "pkg-config --cflags --libs hcr-mpi: ${mpi_pc_flags}")
  separate_arguments(mpi_pc_args UNIX_COMMAND "${mpi_pc_flags}")
  file(WRITE "${WORK_DIR}/mpi_pc_client.cpp" [=[
#include <hcr/mpi.hpp>
#include <cstdio>
int main(int argc, char** argv) {
  int provided = 0, value = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  {
    hcr::Config config;
    config.backends.push_back({"cpu", true, {{"threads", "1"}}, "mpi_pc_client"});
    hcr::Runtime rt(config);
    hcr::mpi::Cluster cl(rt);
    auto b = cl.buffer<int>(1, 1, 0);
    hcr::Kernel seven = rt.kernel("seven").cpu([](hcr::TaskContext& ctx) {
      ctx.arg<int>(0)(0, 0) = 7;
    });
    cl.submit(hcr::mpi::Task(seven).write(b));
    cl.wait_all();
    value = b.to_vector()[0];
    std::printf("pkg-config hcr-mpi client: rank %d of %d, the task wrote %d\n", cl.rank(),
                cl.size(), value);
  }
  MPI_Finalize();
  return value == 7 ? 0 : 1;
}
]=])
  run(${CXX} -std=c++20 ${san_args} "${WORK_DIR}/mpi_pc_client.cpp" -o "${WORK_DIR}/mpi_pc_client"
      ${mpi_pc_args})
  run_as_built("${WORK_DIR}/mpi_pc_client" "the hcr-mpi.pc client")
  string(FIND "${out}" "pkg-config hcr-mpi client: rank 0 of 1, the task wrote 7" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the hcr-mpi.pc client did not run its task:\n${out}")
  endif()
  message(STATUS "pkg-config: hcr-mpi.pc builds and links a Cluster program that runs as built")
endif()
