#!/usr/bin/env bash
# Distributed tiled Cholesky, hcr::mpi against StarPU-MPI, side by side on this machine:
# `hcr-mpi run --op potrf` and StarPU-MPI 1.3's mpi_cholesky example (Debian's starpu-examples,
# libstarpumpi-1.3-3), same order, same tiles, single precision, same rank count, 2-D block-cyclic
# both, one CPU worker and one BLAS thread per rank (the ranks share this machine's cores), runs
# interleaved (hcr, StarPU, hcr, ...). Each program times its own factorisation (hcr-mpi between
# barriers around submission and wait_all; StarPU its "Computation time"); the script prints each
# run, the medians and StarPU/hcr (above 1: hcr faster).
#
#   bash bench/starpu_mpi_cholesky.sh [--size 2048] [--nblocks 8] [--np 2] [--runs 5] [--warmup 1]
#                                     [--hcr-mpi build/bin/hcr-mpi] [--starpu PATH]
set -euo pipefail
size=2048 nblocks=8 np=2 runs=5 warmup=1
hcr=build/bin/hcr-mpi
starpu=/usr/lib/x86_64-linux-gnu/starpu/mpi/mpi_cholesky
while [[ $# -gt 0 ]]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --nblocks) nblocks=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --hcr-mpi) hcr=$2; shift 2 ;;
    --starpu) starpu=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "starpu_mpi_cholesky.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
[[ -x "$starpu" ]] || { echo "starpu_mpi_cholesky.sh: no StarPU-MPI example at $starpu (apt-get install starpu-examples libstarpumpi-1.3-3)" >&2; exit 2; }
[[ -x "$hcr" ]] || { echo "starpu_mpi_cholesky.sh: no hcr-mpi at $hcr (build it with Open MPI installed)" >&2; exit 2; }
for v in "$size" "$nblocks" "$np" "$runs"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "starpu_mpi_cholesky.sh: '$v' is not a positive number" >&2; exit 2; }
done
tile=$(( (size + nblocks - 1) / nblocks ))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# Shared memory with Open MPI's default single-copy mechanism (CMA): StarPU-MPI took 3-4x longer
# without it here. (ctest turns it off, as many containers refuse CMA.)
mpirun=(mpirun --oversubscribe --bind-to none -np "$np" --mca btl self,vader)
cfg=$(mktemp)
trap 'rm -f "$cfg"' EXIT
printf '[[backend]]\nname = "cpu"\nthreads = 1\n' > "$cfg"

hcr_once() {  # seconds
  "${mpirun[@]}" "$hcr" run --op potrf --dtype f32 --size "$size" --tile "$tile" --no-check \
    --config "$cfg" | awk '/^time: best/ {print $3}'
}
starpu_once() {  # seconds
  STARPU_NCPU=1 STARPU_NCUDA=0 STARPU_NOPENCL=0 STARPU_SCHED=dmda STARPU_SILENT=1 \
    "${mpirun[@]}" "$starpu" -size "$size" -nblocks "$nblocks" 2>&1 |
    awk '/Computation time/ {printf "%.6f\n", $5 / 1000}'
}
echo "Cholesky f32 n=$size, $nblocks x $nblocks tiles of $tile, $np ranks, one worker each"
for ((i = 0; i < warmup; ++i)); do hcr_once > /dev/null; starpu_once > /dev/null; done
h=() s=()
for ((i = 1; i <= runs; ++i)); do
  a=$(hcr_once); b=$(starpu_once)
  [[ -n "$a" && -n "$b" ]] || { echo "run $i: a program printed no time" >&2; exit 1; }
  printf 'run %d: hcr %.4f s   StarPU-MPI %.4f s\n' "$i" "$a" "$b"
  h+=("$a") s+=("$b")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
mh=$(median "${h[@]}") ms=$(median "${s[@]}")
awk -v h="$mh" -v s="$ms" 'BEGIN {printf "median: hcr %.4f s, StarPU-MPI %.4f s: StarPU/hcr = %.2f\n", h, s, s / h}'
