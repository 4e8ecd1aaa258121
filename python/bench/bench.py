#!/usr/bin/env python3
"""Figures of the hcr Python module, printed (never asserted):

  1. per-task cost from Python, submit to completion, of an empty task on a native kernel
     (Kernel.cpu("noop"): no Python runs in the task) and on an empty Python kernel, against the
     C++ figure of build/bin/task_overhead_bench --benchmark_filter=HcrEmptyTasks (run here too);
  2. hcr.linalg.gemm on NumPy float32 arrays against numpy.matmul (the same OpenBLAS build:
     Debian's openblas-pthread, which the CPU plugin links statically);
  3. hcr.linalg.potrf + potrs against numpy.linalg.cholesky and numpy.linalg.solve (SciPy's
     cho_factor/cho_solve when SciPy is installed).

Medians of --repeat runs. Run it on an idle machine: it prints the load average before each part
and, with --wait-load L, waits until the 1-minute load is below L first.

  PYTHONPATH=build/python python3 python/bench/bench.py [--build build] [--n 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import hcr


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def wait_for_load(limit: float | None) -> None:
    if limit is None:
        return
    while os.getloadavg()[0] >= limit:
        print(f"  waiting: {load()} (>= {limit})", flush=True)
        time.sleep(30)


def blas_libraries() -> str:
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line}
    return ", ".join(sorted(os.path.basename(x) for x in libs)) or "none mapped"


def cpu_runtime(threads: int) -> hcr.Runtime:
    return hcr.Runtime({"scheduler": {"model_dir": "off"},
                        "backend": [{"name": "cpu", "threads": threads}]}, use_environment=False)


def per_task_once(rt: hcr.Runtime, kernel: hcr.Kernel, batch: int) -> float:
    submit = rt.submit
    start = time.perf_counter()
    for _ in range(batch):
        submit(kernel)
    rt.wait_all()
    return (time.perf_counter() - start) / batch


def cpp_per_task_once(build: str, threads_arg: int) -> float | None:
    """One run of the C++ figure, HcrEmptyTasks/<threads_arg> (0: every core) alone in its process:
    the bench keeps its runtimes alive, and a one-worker runtime made first would hold the other to
    one worker (oneTBB's parallelism limit)."""
    exe = os.path.join(build, "bin", "task_overhead_bench")
    if not os.access(exe, os.X_OK):
        return None
    out = subprocess.run(
        [exe, f"--benchmark_filter=HcrEmptyTasks/{threads_arg}/", "--benchmark_format=json"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "HCR_PLUGIN_PATH": "", "HCR_SCHED": ""}).stdout
    return json.loads(out)["benchmarks"][0]["per_task"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", help="the build directory (for the C++ bench)")
    parser.add_argument("--n", type=int, default=4096, help="gemm size (f32)")
    parser.add_argument("--chol-n", type=int, default=4096, help="potrf/potrs size (f64)")
    parser.add_argument("--nrhs", type=int, default=64, help="right-hand sides of potrs")
    parser.add_argument("--tiles", default="512,1024", help="tile sizes to try for gemm")
    parser.add_argument("--chol-tiles", default="256,512", help="tile sizes for potrf/potrs")
    parser.add_argument("--batch", type=int, default=20000, help="tasks per timed batch")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--wait-load", type=float, default=None,
                        help="wait until the 1-minute load average is below this first")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: tasks,gemm,chol")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    cores = os.cpu_count() or 1

    print(f"hcr {hcr.__version__}, Python {sys.version.split()[0]}, NumPy {np.__version__}")

    if "tasks" not in skip:
        wait_for_load(args.wait_load)
        print(f"\n== per-task cost, empty tasks, batches of {args.batch}; Python and C++ runs "
              f"interleaved ({load()})")
        # One runtime at a time: two in one process share oneTBB's parallelism limit (the smaller
        # one wins), so the many-worker figure would be a one-worker figure.
        for t in sorted({1, cores}):
            native, python, cpp = [], [], []
            with cpu_runtime(t) as rt:
                kernels = (rt.kernel("noop").cpu("noop"), rt.kernel("py-noop").cpu(lambda: None))
                for k in kernels:  # warm-up: the task pool grows, the workers start
                    for _ in range(3):
                        per_task_once(rt, k, args.batch)
                for _ in range(args.repeat):
                    native.append(per_task_once(rt, kernels[0], args.batch))
                    python.append(per_task_once(rt, kernels[1], args.batch))
                    figure = cpp_per_task_once(args.build, 1 if t == 1 else 0)
                    if figure is not None:
                        cpp.append(figure)
            cpp_text = f"{statistics.median(cpp) * 1e6:6.3f} us/task" if cpp else "-"
            print(f"  {t} worker(s): Python, native kernel ('noop') "
                  f"{statistics.median(native) * 1e6:6.3f} us/task; Python kernel (lambda) "
                  f"{statistics.median(python) * 1e6:6.3f} us/task; C++ HcrEmptyTasks/"
                  f"{0 if t > 1 else 1} {cpp_text}")
            if not cpp:
                print(f"  (no {args.build}/bin/task_overhead_bench: the C++ figure is missing)")
        print(f"  ({load()} after)")

    if "gemm" not in skip:
        wait_for_load(args.wait_load)
        n = args.n
        print(f"\n== gemm, f32, n = {n} ({load()}); BLAS in this process: {blas_libraries()}")
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        flops = 2.0 * n ** 3
        reference = np.matmul(a, b)
        tiles = [int(x) for x in args.tiles.split(",")]
        runs: dict[str, list[float]] = {"numpy": [], **{str(t): [] for t in tiles}}
        errors = {}
        with cpu_runtime(cores) as rt:
            for tile in tiles:  # warm-up
                hcr.linalg.gemm(rt, a, b, c, tile=tile).result()
            for _ in range(args.repeat):  # interleaved, so that both see the same load
                start = time.perf_counter()
                np.matmul(a, b, out=c)
                runs["numpy"].append(time.perf_counter() - start)
                for tile in tiles:
                    start = time.perf_counter()
                    hcr.linalg.gemm(rt, a, b, c, tile=tile).result()
                    runs[str(tile)].append(time.perf_counter() - start)
                    errors[tile] = float(np.max(np.abs(c - reference)) / np.max(np.abs(reference)))
        t_np = statistics.median(runs["numpy"])
        print(f"  numpy.matmul:            {t_np:8.3f} s  {flops / t_np / 1e9:7.1f} GFLOP/s")
        for tile in tiles:
            t = statistics.median(runs[str(tile)])
            print(f"  hcr.linalg.gemm tile {tile:4}: {t:8.3f} s  {flops / t / 1e9:7.1f} GFLOP/s"
                  f"  ({t_np / t:4.2f}x numpy; max rel. diff {errors[tile]:.1e})")
        print(f"  ({load()} after)")

    if "chol" not in skip:
        wait_for_load(args.wait_load)
        n, r = args.chol_n, args.nrhs
        print(f"\n== Cholesky, f64, n = {n}, {r} right-hand sides ({load()})")
        rng = np.random.default_rng(1)
        m = rng.standard_normal((n, n))
        spd = m @ m.T + n * np.eye(n)
        rhs = rng.standard_normal((n, r))
        try:
            import scipy.linalg as sla
        except ImportError:
            sla = None
        tiles = [int(x) for x in args.chol_tiles.split(",")]
        work, x = spd.copy(), rhs.copy()
        runs: dict[str, list[float]] = {}

        def clock(name, fn):
            start = time.perf_counter()
            fn()
            runs.setdefault(name, []).append(time.perf_counter() - start)

        with cpu_runtime(cores) as rt:
            for rep in range(args.repeat + 1):  # the first round warms up and is dropped
                if sla is not None:
                    clock("scipy factor", lambda: sla.cho_factor(spd, lower=True))
                    factor = sla.cho_factor(spd, lower=True)
                    clock("scipy solve", lambda: sla.cho_solve(factor, rhs))
                clock("numpy cholesky", lambda: np.linalg.cholesky(spd))
                clock("numpy solve", lambda: np.linalg.solve(spd, rhs))
                for tile in tiles:
                    np.copyto(work, spd)
                    np.copyto(x, rhs)
                    clock(f"potrf {tile}", lambda: hcr.linalg.potrf(rt, work, tile=tile).result())
                    clock(f"potrs {tile}",
                          lambda: hcr.linalg.potrs(rt, work, x, tile=tile).result())
                if rep == 0:
                    runs.clear()
        med = {k: statistics.median(v) for k, v in runs.items()}
        if sla is not None:
            print(f"  scipy cho_factor + cho_solve: {med['scipy factor']:7.3f} s + "
                  f"{med['scipy solve']:7.3f} s")
        t_f = med["numpy cholesky"]
        print(f"  numpy.linalg.cholesky:  {t_f:7.3f} s   numpy.linalg.solve (LU, not Cholesky): "
              f"{med['numpy solve']:7.3f} s")
        resid = float(np.linalg.norm(spd @ x - rhs) / np.linalg.norm(rhs))
        for tile in tiles:
            tf, ts = med[f"potrf {tile}"], med[f"potrs {tile}"]
            print(f"  hcr potrf + potrs tile {tile:4}: {tf:7.3f} s + {ts:7.3f} s"
                  f"  (potrf {t_f / tf:4.2f}x numpy.linalg.cholesky)")
        print(f"  residual of the last solve {resid:.1e}; ({load()} after)")

if __name__ == "__main__":
    main()
