// What a task costs a rank that has no part in it (hcr::mpi), and what it costs the rank that runs
// it, under mpirun with 2 ranks or more:
//
//   mpirun -np 2 build/bin/mpi_skip_bench [--tasks N] [--runs R]
//
// Two 1x1 buffers live on rank 1; N tasks (an empty CPU kernel reading one and writing the other)
// are submitted on every rank. Rank 1 runs them; every other rank only updates its version record.
// Each run times the submission loop between barriers on each rank, and then the wait for the
// tasks (wait_all); rank 0 prints, per run and as medians over R runs, ns per task skipped (rank
// 0's submit loop) and ns per task run (rank 1's submit loop plus its wait), in one program.
#include <hcr/hcr.hpp>
#include <hcr/mpi.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t tasks = 100000;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tasks") tasks = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
  }
  if (size < 2) {
    std::printf("mpi_skip_bench: needs 2 ranks or more (mpirun -np 2), nothing measured\n");
    MPI_Finalize();
    return 0;
  }
  std::vector<double> skip_ns, run_ns;
  {
    hcr::Config c;
    c.use_environment = false;
    c.backends.push_back({"cpu", true, {{"threads", "1"}}, "mpi_skip_bench"});
    hcr::Runtime rt(c);
    hcr::mpi::Cluster cl(rt);
    hcr::Kernel nop = rt.kernel("nop").cpu([](hcr::TaskContext&) {});
    auto x = cl.buffer<double>(1, 1, 1), y = cl.buffer<double>(1, 1, 1);
    for (int r = -1; r < runs; ++r) {  // run -1: warm-up
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (size_t i = 0; i < tasks; ++i) cl.submit(hcr::mpi::Task(nop).read(x).read_write(y));
      const double submitted = MPI_Wtime() - t0;
      cl.wait_all();
      const double done = MPI_Wtime() - t0;
      double mine[2] = {submitted, done}, all[2] = {0, 0};
      // Rank 0's submit loop (skipped tasks) and rank 1's whole run (tasks run).
      if (rank == 1) MPI_Send(mine, 2, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        MPI_Recv(all, 2, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (r >= 0) {
          skip_ns.push_back(submitted / static_cast<double>(tasks) * 1e9);
          run_ns.push_back(all[1] / static_cast<double>(tasks) * 1e9);
          std::printf("run %d: %.1f ns per task skipped (rank 0), %.1f ns per task run (rank 1)\n",
                      r, skip_ns.back(), run_ns.back());
        }
      }
    }
  }
  if (rank == 0) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("median of %d runs of %zu tasks over %d ranks: %.1f ns per task skipped, %.1f ns "
                "per task run; skipped/run = %.3f\n",
                runs, tasks, size, median(skip_ns), median(run_ns),
                median(skip_ns) / median(run_ns));
  }
  MPI_Finalize();
  return 0;
}
