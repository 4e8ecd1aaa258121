# Installs hcr into a fresh prefix, builds samples/plugin against that install only, drops the
# plugin into a directory, and checks that `hcr devices` picks it up and its kernel runs.
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, and SANITIZE (HCR_SANITIZE of the build).
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
file(GLOB plugin "${WORK_DIR}/plugin-build/libhcr-sample.so")
if(NOT plugin)
  message(FATAL_ERROR "the sample plugin was not built")
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
