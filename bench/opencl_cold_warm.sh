#!/usr/bin/env bash
# Cold against warm start of the OpenCL backend, each in a fresh process: the first gemm with every
# cache empty, then again with what the first run left behind.
#
#   bash bench/opencl_cold_warm.sh [build/bin/opencl_bench] [n]
#
# XDG_CACHE_HOME points at a new temporary directory, which empties at once hcr's program cache
# ($XDG_CACHE_HOME/hcr/opencl) and PoCL's kernel cache ($XDG_CACHE_HOME/pocl/kcache, unless
# POCL_CACHE_DIR is set, which this script clears). CLBlast keeps nothing between processes.
set -euo pipefail
bench="${1:-build/bin/opencl_bench}"
n="${2:-512}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME="$tmp"
unset POCL_CACHE_DIR

cold="$("$bench" --first-gemm --n "$n")"
warm="$("$bench" --first-gemm --n "$n")"
echo "cold: $cold"
echo "warm: $warm"
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }
c="$(field first_gemm_s "$cold")"
w="$(field first_gemm_s "$warm")"
awk -v c="$c" -v w="$w" 'BEGIN { printf "first gemm: cold %.3f s, warm %.3f s, cold/warm %.1fx\n", c, w, c / w }'
echo "caches left behind:"
( cd "$tmp" && du -sh -- * 2> /dev/null | sed 's/^/  /' )
