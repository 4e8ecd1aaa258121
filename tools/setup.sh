#!/usr/bin/env bash
# hcr set-up for a Debian 12 machine (run as root): installs the Debian packages that are missing,
# configures and builds, then
#   bash tools/setup.sh run    runs the main job: a tiled matmul on every device found
#   bash tools/setup.sh test   runs every test (ends with ctest's summary)
# The build goes to ./build (HCR_BUILD_DIR overrides). The CUDA backend is built when the toolkit
# is found (/usr/local/cuda or nvcc on PATH); without a GPU its tests skip.
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
  build-essential cmake ninja-build                     # toolchain
  libtbb-dev libboost-dev libtomlplusplus-dev            # oneTBB, Boost.DLL, TOML++
  nlohmann-json3-dev libexpat1-dev                       # trace files (JSON), SVG check (XML)
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev
  ocl-icd-opencl-dev opencl-headers libclblast-dev pocl-opencl-icd clinfo   # OpenCL, on PoCL
)
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

cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
echo "== configuring and building in $build"
cmake -S . -B "$build" "${cmake_args[@]}"
cmake --build "$build"

if [ "$mode" = run ]; then
  "$build/bin/hcr" devices
  echo
  "$build/bin/hcr" run --size 2048 --tile 512 --repeat 3
else
  cd "$build"
  ctest --output-on-failure -j "$(nproc)"
fi
