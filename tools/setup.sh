#!/usr/bin/env bash
# hcr set-up for a Debian 12 machine (run as root): installs the Debian packages that are missing,
# configures and builds, then
#   bash tools/setup.sh run    runs the main job: a tiled matmul on every device found
#   bash tools/setup.sh test   runs every test three ways: the whole suite built with
#                              AddressSanitizer + UndefinedBehaviorSanitizer, a concurrency subset
#                              built with ThreadSanitizer, then the whole suite of the normal
#                              (Release) build, whose ctest summary ends the output (the Python
#                              module's pytest suite is one of its tests, python.pytest; so is
#                              packages.install_use_purge: the Debian packages built with cpack,
#                              installed, used and purged); between them the libFuzzer targets
#                              run for a bounded time (tests/fuzz)
# The build goes to ./build (HCR_BUILD_DIR overrides), the sanitizer builds beside it (build-asan,
# build-tsan). A sanitizer report fails its test, and so the run. HCR_CI_SANITIZERS=0 skips the
# sanitizer builds and the fuzzers (a quick local run; CI runs them). The CUDA backend is built when the toolkit is
# found (/usr/local/cuda or nvcc on PATH); without a GPU its tests skip.
set -euo pipefail

mode="${1:-run}"
case "$mode" in run | test) ;; *)
  echo "usage: bash tools/setup.sh run|test" >&2
  exit 2
  ;;
esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${HCR_BUILD_DIR:-build}"

packages=(
  build-essential cmake ninja-build pkgconf             # toolchain; pkg-config checks hcr.pc
  libtbb-dev libboost-dev libtomlplusplus-dev            # oneTBB, Boost.DLL, TOML++
  nlohmann-json3-dev libexpat1-dev                       # trace files (JSON), SVG check (XML)
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-pthread-dev                                # the cpu and sim backends' own BLAS
  liblapacke-dev                                         # linalg_bench: LAPACKE_?potrf baseline
  ocl-icd-opencl-dev opencl-headers libclblast-dev pocl-opencl-icd clinfo   # OpenCL, on PoCL
  libopenmpi-dev openmpi-bin                             # hcr::mpi and its tests (mpirun)
  pybind11-dev python3-dev python3-numpy python3-pytest  # the hcr Python module and its tests
  clang-format                                           # format.check: tools/format.sh check
)
if [ "$mode" = test ]; then
  packages+=(clang-14 libclang-rt-14-dev)                 # libFuzzer targets (tests/fuzz)
  # The Debian packages' test: dpkg-shlibdeps and file (cpack's Depends), addgroup (hcr-tools)
  packages+=(dpkg-dev file adduser)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The Python module is built for Debian's interpreter, where the packages above put NumPy and
# pytest (not for whichever python3 comes first on PATH).
python_args=()
if [ -x /usr/bin/python3 ]; then
  python_args+=(-DPython3_EXECUTABLE=/usr/bin/python3)
fi

cuda_args=()
if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi

timed() {  # timed LABEL COMMAND...: runs it, then says how long it took
  local start=$SECONDS
  "${@:2}"
  echo "== $1: $((SECONDS - start)) s"
}

# The Debian packages' test (packages.install_use_purge) installs them into /usr and purges them
# again: registered for `test` only, in the normal build only (never beside the sanitizer runs).
package_test=OFF
if [ "$mode" = test ]; then
  package_test=ON
fi

echo "== configuring and building in $build"
timed "configure" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" \
  "${python_args[@]}" -DHCR_PACKAGE_TEST=$package_test
timed "build" cmake --build "$build"

if [ "$mode" = run ]; then
  "$build/bin/hcr" devices
  echo
  "$build/bin/hcr" run --size 2048 --tile 512 --repeat 3
  exit 0
fi

# Sanitizer builds: -O1 with debug information and frame pointers (readable reports), no
# benchmarks or samples. The hcr::mpi tests (label mpi, under mpirun) run in the ASan build too:
# their leak check runs before MPI_Finalize, with Open MPI's libraries suppressed
# (tests/sanitizers/lsan_openmpi.supp). The options each test runs with (UBSan and LSan reports fatal, the
# suppressions in tests/sanitizers/) come from the test properties (tests/CMakeLists.txt). A test
# that hangs fails after 10 minutes rather than running into CI's limit.
san_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g"
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DHCR_BUILD_BENCH=OFF -DHCR_BUILD_SAMPLES=OFF)

# The ThreadSanitizer subset: the tests whose work crosses threads. Dependency tracking
# (dependency_test, and stress_test: 8 submitting threads, scaled by HCR_STRESS_TASKS), commute
# runs (commute_test: buffers handed from task to task as they end), the runtime
# and its host access (runtime_test, buffer_test, kernel_test), pause and resume (pause_test: held
# tasks let go while devices complete others), scheduling contexts (context_test: the context
# policy's arbitration, resizing while tasks run, a reserve's lapse timer), the data manager
# (data_test; halo_test and halo_host_read_test: halo tiles' ghost edges, and edge pieces coming
# home while host tasks wait on them), faults, timeouts and hot-plug (resilience_test, hotplug_test), the scheduler policies
# (policies_test; peft_test: its plan gate and registry of running tasks), the CPU backend on oneTBB (cpu_backend_test; device_graph_test: device graphs whose nodes it runs on its workers) and the simulated backend
# (sim_backend_test; sim_graph_abi_test: device graphs at its table), the node arbiter over its socket (arbiter_socket_test: runtimes' client
# threads applying grants while tasks run; arbitration_test; arbiter_trust_test: peers of another
# user; withheld_device_test: grants applied while a graph runs). Left out: the single-threaded ones (plugin loader and ABI, config, cost
# model, trace, blas shapes), the OpenCL tests and conformance_test, which run PoCL's
# uninstrumented LLVM-built kernels on threads TSan cannot follow, the CUDA tests (no toolkit
# in CI), and the hcr::mpi tests (label mpi: Open MPI's uninstrumented progress and shared-memory
# transport threads; the layer's own threading meets TSan through buffer_test's async accesses).
# The TSan build has no OpenCL, CUDA or tools, so the plugins found are cpu and sim.
tsan_tests=(dependency_test stress_test commute_test runtime_test pause_test context_test buffer_test kernel_test
  data_test halo_test halo_host_read_test resilience_test hotplug_test policies_test peft_test cpu_backend_test sim_backend_test
  sim_graph_abi_test device_graph_test
  arbitration_test arbiter_socket_test arbiter_trust_test withheld_device_test)

if [ "${HCR_CI_SANITIZERS:-1}" != 0 ]; then
  asan="${build}-asan"
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer: every test, built in $asan"
  timed "asan+ubsan configure" cmake -S . -B "$asan" "${san_args[@]}" "${cuda_args[@]}" \
    -DHCR_SANITIZE=address,undefined
  timed "asan+ubsan build" cmake --build "$asan"
  start=$SECONDS
  asan_status=0
  ctest --test-dir "$asan" --output-on-failure --no-label-summary --timeout 600 -j "$(nproc)" ||
    asan_status=$?
  echo "== asan+ubsan tests: $((SECONDS - start)) s"
  if [ "$asan_status" != 0 ]; then
    # LeakSanitizer's own stop-the-world tracer sometimes crashes at the exit of a test that ran
    # PoCL's threads, after the test passed ("Tracer caught signal 11 ... LeakSanitizer has
    # encountered a fatal error", google/sanitizers#1353). Only then, the failed tests run once
    # more, with every check on, and must pass; any other failure ends the run here.
    if grep -q "LeakSanitizer has encountered a fatal error" \
      "$asan/Testing/Temporary/LastTest.log"; then
      echo "== asan+ubsan: LeakSanitizer's tracer crashed; the failed tests run once more"
      timed "asan+ubsan rerun" ctest --test-dir "$asan" --output-on-failure --no-label-summary \
        --timeout 600 --rerun-failed
    else
      exit "$asan_status"
    fi
  fi

  tsan="${build}-tsan"
  echo "== ThreadSanitizer: ${tsan_tests[*]}, built in $tsan"
  timed "tsan configure" cmake -S . -B "$tsan" "${san_args[@]}" -DHCR_SANITIZE=thread \
    -DHCR_WITH_CUDA=OFF -DHCR_WITH_OPENCL=OFF -DHCR_BUILD_TOOLS=OFF
  timed "tsan build" \
    cmake --build "$tsan" --target "${tsan_tests[@]}" hcr_backend_cpu hcr_backend_sim
  labels="^($(IFS='|'; echo "${tsan_tests[*]}"))\$"
  timed "tsan tests" env HCR_STRESS_TASKS="${HCR_STRESS_TASKS:-100000}" \
    ctest --test-dir "$tsan" --output-on-failure --no-label-summary --no-tests=error \
    --timeout 600 -j "$(nproc)" -L "$labels"

  # The libFuzzer targets (clang, in their own build directory): each runs HCR_FUZZ_SECONDS
  # (default 60) over its corpus; a crash, leak, hang or undefined behaviour fails the run.
  timed "fuzzers" bash tests/fuzz/ci.sh "${build}-fuzz"
fi

echo "== the normal build's tests, in $build"
ctest --test-dir "$build" --output-on-failure --no-label-summary -j "$(nproc)"
