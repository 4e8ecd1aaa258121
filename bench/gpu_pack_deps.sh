#!/usr/bin/env bash
# Packs the third-party dependencies hcr builds against — this Debian 12 machine's oneTBB, TOML++,
# OpenBLAS, Boost (the headers Boost.DLL and Boost.Container use), GoogleTest and Google
# Benchmark: headers, libraries and CMake package files — into .gpu-deps/ at the repository root,
# for a GPU machine that has a CUDA toolkit, a compiler and CMake but none of these packages.
#
#   bash bench/gpu_pack_deps.sh        # here, after tools/setup.sh has installed the packages
#   # copy the repository, .gpu-deps included, to the GPU machine, then there:
#   bash bench/gpu_run.sh OUTDIR
#
# The layout mirrors /usr (include/, lib/x86_64-linux-gnu/...), so the packages' own CMake files,
# which locate everything relative to themselves, work unchanged; OpenBLAS's, which holds absolute
# paths, is rewritten. The libraries need glibc >= 2.34 and libstdc++ >= GCC 12's on the GPU
# machine (Ubuntu 22.04, Debian 12, RHEL 9 and newer); gpu_run.sh checks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

arch=x86_64-linux-gnu
src_lib=/usr/lib/$arch
out=.gpu-deps
lib=$out/lib/$arch

need=(/usr/include/tbb /usr/include/toml++ /usr/include/gtest /usr/include/benchmark
      /usr/include/boost/dll $src_lib/cmake/openblas $src_lib/openblas-pthread/libopenblas.so.0)
for p in "${need[@]}"; do
  if [ ! -e "$p" ]; then
    echo "missing $p: install the packages first (bash tools/setup.sh test, as root)" >&2
    exit 1
  fi
done

rm -rf "$out"
mkdir -p "$out/include" "$lib/cmake" "$lib/openblas-pthread"

# --- headers ---------------------------------------------------------------------------------------
for d in tbb oneapi toml++ gtest benchmark; do cp -a "/usr/include/$d" "$out/include/"; done
mkdir -p "$out/include/$arch"
cp -a "/usr/include/$arch/openblas-pthread" "$out/include/$arch/"
# Boost: exactly the headers hcr's Boost includes pull in (as the compiler reports them, in C++17
# and C++20), plus the whole config/ and predef/ trees, which pick files by compiler and platform.
boost_probe='#include <boost/container/small_vector.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>'
mkdir -p "$out/include-tmp"
for std in c++17 c++20; do
  printf '%s\n' "$boost_probe" | g++ -std=$std -DBOOST_DLL_USE_STD_FS -M -x c++ -
done | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u |
  xargs cp --parents -t "$out/include-tmp"
mv "$out/include-tmp/usr/include/boost" "$out/include/boost"
rm -rf "$out/include-tmp"
cp -a /usr/include/boost/config /usr/include/boost/predef "$out/include/boost/"

# --- libraries (symbolic links kept) --------------------------------------------------------------
cp -a "$src_lib"/libtbb.so* "$src_lib"/libtbbmalloc.so* "$src_lib"/libtbbmalloc_proxy.so* \
      "$src_lib"/libtbbbind_2_5.so* "$lib/"
cp -a "$src_lib"/libtomlplusplus.so* "$lib/"
cp -a "$src_lib"/libbenchmark.so* "$src_lib"/libbenchmark_main.a "$lib/"
cp -a "$src_lib"/libgtest.a "$src_lib"/libgtest_main.a "$lib/"
# OpenBLAS (the pthread flavour) and the Fortran runtime it needs.
cp -L "$src_lib/openblas-pthread/libopenblas.so.0" "$lib/openblas-pthread/libopenblas.so.0"
ln -sf libopenblas.so.0 "$lib/openblas-pthread/libopenblas.so"
cp -L "$src_lib/libgfortran.so.5" "$src_lib/libquadmath.so.0" "$lib/"

# --- CMake package files ---------------------------------------------------------------------------
for d in TBB GTest benchmark tomlplusplus Boost-1.74.0 boost_headers-1.74.0; do
  cp -a "$src_lib/cmake/$d" "$lib/cmake/"
done
cp -a "$src_lib/cmake/BoostDetectToolset-1.74.0.cmake" "$lib/cmake/"
# GoogleMock is not used: without its target files GTestConfig skips it (an OPTIONAL include).
rm -f "$lib"/cmake/GTest/GMockTargets*.cmake
mkdir -p "$lib/cmake/openblas"
cp "$src_lib/cmake/openblas/OpenBLASConfigVersion.cmake" "$lib/cmake/openblas/"
version=$(sed -n 's/.*OpenBLAS_VERSION "\([^"]*\)".*/\1/p' "$src_lib/cmake/openblas/OpenBLASConfig.cmake")
cat > "$lib/cmake/openblas/OpenBLASConfig.cmake" << EOF
# OpenBLAS ${version} from Debian 12, packed by bench/gpu_pack_deps.sh: paths relative to this file.
set(OpenBLAS_VERSION "${version}")
get_filename_component(_hcr_deps "\${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)
set(OpenBLAS_INCLUDE_DIRS "\${_hcr_deps}/include/$arch/openblas-pthread")
set(OpenBLAS_LIBRARIES "\${_hcr_deps}/lib/$arch/openblas-pthread/libopenblas.so")
unset(_hcr_deps)
EOF

# --- the C++ runtime, for a GPU machine whose libstdc++ is older than GCC 12's --------------------
mkdir -p "$out/compat"
cp -L "$src_lib/libstdc++.so.6" "$src_lib/libgcc_s.so.1" "$out/compat/" 2>/dev/null ||
  cp -L "/lib/$arch/libstdc++.so.6" "/lib/$arch/libgcc_s.so.1" "$out/compat/"

cat > "$out/README" << EOF
Third-party dependencies of hcr from $(. /etc/os-release && echo "$PRETTY_NAME"), packed by
bench/gpu_pack_deps.sh on $(date -u +%Y-%m-%d) for bench/gpu_run.sh. Layout mirrors /usr.
compat/ holds this machine's libstdc++/libgcc_s, used only where the GPU machine's are older.
EOF

size=$(du -sm "$out" | cut -f1)
echo "packed $out: ${size} MiB"
if [ "$size" -ge 50 ]; then
  echo "warning: more than 50 MiB" >&2
fi
