#!/usr/bin/env bash
# Tiled Cholesky, hcr against StarPU, side by side: `hcr run --op potrf` and StarPU's own
# cholesky_implicit example (Debian's starpu-examples), same order, same tiles, single precision,
# the dmda policy on both, every core, runs interleaved (hcr, StarPU, hcr, ...) so that a shared
# machine's drift hits both alike. Each program times its own factorisation (submission to the last
# task; matrix generation and start-up left out); the script prints each run, the medians and
# their ratio.
#
#   bash bench/starpu_cholesky.sh [--size 8192] [--nblocks "16 32"] [--runs 5] [--warmup 2]
#                                 [--hcr build/bin/hcr] [--starpu PATH]
#
# Installs nothing: StarPU comes from `apt-get install starpu-examples libstarpu-dev`. The warm-up
# runs (not counted) let both calibrate their cost models (StarPU's in ~/.starpu, hcr's under its
# model_dir), which dmda needs.
set -euo pipefail

size=8192
nblocks="16 32"
runs=5
warmup=2
hcr=build/bin/hcr
starpu=/usr/lib/x86_64-linux-gnu/starpu/examples/cholesky_implicit

while [[ $# -gt 0 ]]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --nblocks) nblocks=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --hcr) hcr=$2; shift 2 ;;
    --starpu) starpu=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "starpu_cholesky.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done

if [[ ! -x "$starpu" ]]; then
  echo "starpu_cholesky.sh: no StarPU example at $starpu" >&2
  echo "  install it with: apt-get install starpu-examples libstarpu-dev (or give --starpu PATH)" >&2
  exit 2
fi
if [[ ! -x "$hcr" ]]; then
  echo "starpu_cholesky.sh: no hcr command at $hcr (build it, or give --hcr PATH)" >&2
  exit 2
fi
for v in "$size" "$runs" $nblocks; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "starpu_cholesky.sh: '$v' is not a positive number" >&2; exit 2; }
done
[[ "$warmup" =~ ^[0-9]+$ ]] || { echo "starpu_cholesky.sh: --warmup '$warmup' is not a number" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# hcr on the CPU backend alone (every core), under dmda: what StarPU runs with below.
cat > "$work/cpu.toml" <<'EOF'
[scheduler]
policy = "dmda"
[[backend]]
name = "cpu"
threads = 0
EOF

# Each program's own timing of one factorisation, in milliseconds.
hcr_ms() {  # tile
  "$hcr" run --op potrf --dtype f32 --size "$size" --tile "$1" --config "$work/cpu.toml" \
    --no-check --no-progress > "$work/out" 2>&1 || { cat "$work/out" >&2; return 1; }
  sed -n 's/^time: best \([0-9.]*\) s.*/\1/p' "$work/out" | awk '{ printf "%.1f\n", $1 * 1000 }'
}
starpu_ms() {  # nblocks
  # One BLAS thread per StarPU worker (a worker per core): OpenBLAS's own threads on top of them
  # would oversubscribe the cores and slow StarPU 2-2.5x here.
  OPENBLAS_NUM_THREADS=1 STARPU_SCHED=dmda STARPU_NCUDA=0 STARPU_NOPENCL=0 STARPU_SILENT=1 \
    "$starpu" -size "$size" -nblocks "$1" > "$work/out" 2>&1 || { cat "$work/out" >&2; return 1; }
  # "# size  ms  GFlops" then "<size>  <ms>  <GFlops>"
  awk -v n="$size" '$1 == n { print $2; exit }' "$work/out"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "tiled Cholesky, f32, n = $size, dmda, $(nproc) cores; $runs runs each, interleaved, after $warmup warm-up"
for nb in $nblocks; do
  if (( size % nb != 0 )); then
    echo "starpu_cholesky.sh: $size is not a multiple of nblocks $nb (StarPU's tiles must be equal)" >&2
    exit 2
  fi
  tile=$((size / nb))
  for ((r = 0; r < warmup; r++)); do hcr_ms "$tile" > /dev/null; starpu_ms "$nb" > /dev/null; done
  : > "$work/hcr"; : > "$work/starpu"; : > "$work/ratio"
  for ((r = 1; r <= runs; r++)); do
    h=$(hcr_ms "$tile"); s=$(starpu_ms "$nb")
    if [[ -z "$h" || -z "$s" ]]; then
      echo "starpu_cholesky.sh: a run printed no time (hcr '$h', StarPU '$s')" >&2; exit 1
    fi
    echo "$h" >> "$work/hcr"; echo "$s" >> "$work/starpu"
    awk -v h="$h" -v s="$s" 'BEGIN { print s / h }' >> "$work/ratio"
    printf '  tile %5d  run %2d: hcr %9.1f ms   StarPU %9.1f ms\n' "$tile" "$r" "$h" "$s"
  done
  mh=$(median < "$work/hcr"); ms=$(median < "$work/starpu"); mr=$(median < "$work/ratio")
  gf() { awk -v n="$size" -v ms="$1" 'BEGIN { printf "%.1f", n * n * n / 3 / (ms / 1000) / 1e9 }'; }
  printf 'tile %d (nblocks %d): median hcr %.1f ms (%s GFLOP/s), StarPU %.1f ms (%s GFLOP/s); StarPU/hcr %.3f (median of pairs %.3f)\n' \
    "$tile" "$nb" "$mh" "$(gf "$mh")" "$ms" "$(gf "$ms")" "$(awk -v a="$ms" -v b="$mh" 'BEGIN { print a / b }')" "$mr"
done
