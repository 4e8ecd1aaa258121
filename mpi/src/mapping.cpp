// Mapping tiles to ranks by measured throughput: measure_throughput (a timed burst of tile gemms
// on every rank, all-gathered) and Cluster::distribute_weighted's smooth weighted round robin.
#include <hcr/builtin_params.h>
#include <hcr/mpi.hpp>

#include "cluster_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>

namespace hcr::mpi {

std::vector<double> Cluster::check_weights(const std::vector<double>& weights) const {
  const auto n = static_cast<size_t>(impl_->size_);
  if (weights.size() != n)
    throw Error(ErrorCode::invalid_argument,
                "Cluster::distribute_weighted: " + std::to_string(weights.size()) +
                    " weights for " + std::to_string(n) + " ranks");
  double sum = 0;
  for (size_t r = 0; r < n; ++r) {
    if (!std::isfinite(weights[r]) || weights[r] < 0)
      throw Error(ErrorCode::invalid_argument,
                  "Cluster::distribute_weighted: the weight of rank " + std::to_string(r) + " is " +
                      std::to_string(weights[r]) + " (a finite number >= 0 is needed)");
    sum += weights[r];
  }
  if (sum <= 0)
    throw Error(ErrorCode::invalid_argument,
                "Cluster::distribute_weighted: every weight is 0: no rank could own a tile");
  return std::vector<double>(n, 0.0);
}

int Cluster::next_weighted(const std::vector<double>& weights, std::vector<double>& credit) {
  // Every rank earns its weight; the richest takes the tile and pays the total. Ties go to the
  // lowest rank: deterministic, the same on every rank.
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  size_t best = 0;
  for (size_t r = 0; r < credit.size(); ++r) {
    credit[r] += weights[r];
    if (credit[r] > credit[best]) best = r;
  }
  credit[best] -= total;
  return static_cast<int>(best);
}

std::vector<double> measure_throughput(Runtime& rt, MPI_Comm comm, size_t tile, int probes,
                                       bool double_precision) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  double mine = 0;
  const std::vector<Device> devices = rt.devices();
  if (!devices.empty() && tile > 0) {
    uint32_t slots = 0;
    for (const Device& d : devices) slots += std::max<uint32_t>(1, d.concurrency);
    const size_t n = probes > 0 ? static_cast<size_t>(probes) : std::max<size_t>(8, 4 * slots);
    auto run = [&](auto zero) {
      using T = decltype(zero);
      Kernel gemm = rt.kernel(double_precision ? "gemm_f64" : "gemm_f32");
      auto a = rt.buffer<T>(tile, tile), b = rt.buffer<T>(tile, tile);
      std::vector<Buffer<T>> c;
      for (size_t i = 0; i < std::max<size_t>(n, devices.size()); ++i)
        c.push_back(rt.buffer<T>(tile, tile));
      const hcr_gemm_params_t p{HCR_GEMM_PARAMS_STRUCT_SIZE, 1.0, 0.0, HCR_NO_TRANS, HCR_NO_TRANS};
      for (size_t d = 0; d < devices.size(); ++d)  // one untimed task per device: first calls
        rt.submit(hcr::Task(gemm).read(a).read(b).write(c[d]).param(p).on(devices[d].id));
      rt.wait_all();
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < n; ++i)
        rt.submit(hcr::Task(gemm).read(a).read(b).write(c[i]).param(p));
      rt.wait_all();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return s > 0 ? static_cast<double>(n) / s : 0.0;
    };
    mine = double_precision ? run(0.0) : run(0.0f);
  }
  std::vector<double> all(static_cast<size_t>(size));
  MPI_Allgather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm);
  return all;
}

}  // namespace hcr::mpi
