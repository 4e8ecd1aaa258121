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


def per_task(rt: hcr.Runtime, kernel: hcr.Kernel, batch: int, repeat: int) -> float:
    submit = rt.submit
    for _ in range(3):  # warm-up: the task pool grows, the workers start
        for _ in range(batch):
            submit(kernel)
        rt.wait_all()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(batch):
            submit(kernel)
        rt.wait_all()
        times.append((time.perf_counter() - start) / batch)
    return statistics.median(times)


def cpp_per_task(build: str, repeat: int) -> dict[str, float]:
    exe = os.path.join(build, "bin", "task_overhead_bench")
    if not os.access(exe, os.X_OK):
        return {}
    out = subprocess.run(
        [exe, "--benchmark_filter=HcrEmptyTasks/", f"--benchmark_repetitions={repeat}",
         "--benchmark_report_aggregates_only=true", "--benchmark_format=json"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "HCR_PLUGIN_PATH": "", "HCR_SCHED": ""}).stdout
    figures = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            threads = "1" if "/1/" in b["name"] else "all"
            figures[threads] = b["per_task"]
    return figures


def timed(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
        print(f"\n== per-task cost, empty tasks, batches of {args.batch} ({load()})")
        for threads in (1, cores):
            with cpu_runtime(threads) as rt:
                native = per_task(rt, rt.kernel("noop").cpu("noop"), args.batch, args.repeat)
                python = per_task(rt, rt.kernel("py-noop").cpu(lambda: None), args.batch,
                                  args.repeat)
            label = f"{threads} worker(s)"
            print(f"  Python, native kernel ('noop'):   {native * 1e6:7.3f} us/task  {label}")
            print(f"  Python, Python kernel (lambda):   {python * 1e6:7.3f} us/task  {label}")
        cpp = cpp_per_task(args.build, args.repeat)
        for key, seconds in sorted(cpp.items()):
            label = "1 worker(s)" if key == "1" else f"{cores} worker(s)"
            print(f"  C++ task_overhead_bench HcrEmptyTasks: {seconds * 1e6:7.3f} us/task  {label}")
        if not cpp:
            print(f"  (no {args.build}/bin/task_overhead_bench: the C++ figure is missing)")

    if "gemm" not in skip:
        wait_for_load(args.wait_load)
        n = args.n
        print(f"\n== gemm, f32, n = {n} ({load()}); BLAS in this process: {blas_libraries()}")
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        flops = 2.0 * n ** 3
        t_np = timed(lambda: np.matmul(a, b, out=c), args.repeat)
        print(f"  numpy.matmul:            {t_np:8.3f} s  {flops / t_np / 1e9:7.1f} GFLOP/s")
        reference = c.copy()
        with cpu_runtime(cores) as rt:
            for tile in map(int, args.tiles.split(",")):
                t = timed(lambda: hcr.linalg.gemm(rt, a, b, c, tile=tile).result(), args.repeat)
                err = float(np.max(np.abs(c - reference)) / np.max(np.abs(reference)))
                print(f"  hcr.linalg.gemm tile {tile:4}: {t:8.3f} s  {flops / t / 1e9:7.1f} GFLOP/s"
                      f"  ({t_np / t:4.2f}x numpy; max rel. diff {err:.1e})")

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
        if sla is not None:
            t_f = timed(lambda: sla.cho_factor(spd, lower=True), args.repeat)
            factor = sla.cho_factor(spd, lower=True)
            t_s = timed(lambda: sla.cho_solve(factor, rhs), args.repeat)
            print(f"  scipy cho_factor + cho_solve: {t_f:7.3f} s + {t_s:7.3f} s")
        t_f = timed(lambda: np.linalg.cholesky(spd), args.repeat)
        t_s = timed(lambda: np.linalg.solve(spd, rhs), args.repeat)
        print(f"  numpy.linalg.cholesky:  {t_f:7.3f} s   numpy.linalg.solve (LU): {t_s:7.3f} s")
        with cpu_runtime(cores) as rt:
            for tile in map(int, args.chol_tiles.split(",")):
                work = spd.copy()
                x = rhs.copy()

                def factor_and_solve():
                    np.copyto(work, spd)
                    np.copyto(x, rhs)
                    f0 = time.perf_counter()
                    hcr.linalg.potrf(rt, work, tile=tile).result()
                    f1 = time.perf_counter()
                    hcr.linalg.potrs(rt, work, x, tile=tile).result()
                    return f1 - f0, time.perf_counter() - f1

                factor_and_solve()
                runs = [factor_and_solve() for _ in range(args.repeat)]
                tf = statistics.median(t[0] for t in runs)
                ts = statistics.median(t[1] for t in runs)
                resid = float(np.linalg.norm(spd @ x - rhs) / np.linalg.norm(rhs))
                print(f"  hcr potrf + potrs tile {tile:4}: {tf:7.3f} s + {ts:7.3f} s"
                      f"  (cholesky {t_f / tf:4.2f}x numpy; residual {resid:.1e})")


if __name__ == "__main__":
    main()
