// split_node: the ranks that share a node divide its cores (and GPUs) between them, so that four
// ranks on one host do not each start a worker per core.
#include <hcr/mpi.hpp>

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace hcr::mpi {

namespace {
void set_option(BackendConfig& b, const std::string& key, const std::string& value, bool keep) {
  for (auto& [k, v] : b.options)
    if (k == key) {
      if (!keep) v = value;
      return;
    }
  b.options.emplace_back(key, value);
  if (!b.option_origins.empty()) b.option_origins.emplace_back("hcr::mpi::split_node");
}

bool has_option(const BackendConfig& b, const std::string& key, const char* unset) {
  for (auto& [k, v] : b.options)
    if (k == key) return v != unset;
  return false;
}
}  // namespace

Config split_node(Config config, MPI_Comm comm, NodeShare* share) {
  if (config.backends.empty())
    throw Error(ErrorCode::invalid_argument,
                "hcr::mpi::split_node: the configuration lists no backends (every plugin, default "
                "options: each rank would take every core and GPU); list the backends to share, "
                "e.g. [[backend]] name = \"cpu\"");
  MPI_Comm local = MPI_COMM_NULL;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS)
    throw Error(ErrorCode::communication, "hcr::mpi::split_node: MPI_Comm_split_type failed");
  NodeShare s;
  MPI_Comm_rank(local, &s.local_rank);
  MPI_Comm_size(local, &s.local_size);

  // The cores each local rank may run on. Disjoint masks: the launcher split the node already
  // (mpirun --bind-to core), each rank keeps its own. Overlapping ones: their union is shared.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) {
    CPU_ZERO(&mine);
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()) && c < CPU_SETSIZE;
         ++c)
      CPU_SET(c, &mine);
  }
  std::vector<cpu_set_t> all(static_cast<size_t>(s.local_size));
  MPI_Allgather(&mine, sizeof(cpu_set_t), MPI_BYTE, all.data(), sizeof(cpu_set_t), MPI_BYTE, local);
  MPI_Comm_free(&local);
  s.cores = static_cast<unsigned>(CPU_COUNT(&mine));
  bool overlap = false;
  cpu_set_t both, all_union;
  CPU_ZERO(&all_union);
  for (int r = 0; r < s.local_size; ++r) {
    CPU_AND(&both, &all_union, &all[static_cast<size_t>(r)]);
    if (CPU_COUNT(&both) != 0) overlap = true;
    CPU_OR(&all_union, &all_union, &all[static_cast<size_t>(r)]);
  }
  if (overlap) {
    const auto total = static_cast<unsigned>(CPU_COUNT(&all_union));
    const auto n = static_cast<unsigned>(s.local_size), k = static_cast<unsigned>(s.local_rank);
    s.threads = std::max(1u, total / n + (k < total % n ? 1u : 0u));
  } else {
    s.threads = std::max(1u, s.cores);
  }

  for (BackendConfig& b : config.backends) {
    if (b.name == "cpu" && !has_option(b, "threads", "0"))
      set_option(b, "threads", std::to_string(s.threads), false);
    if (b.name == "cuda" && !has_option(b, "devices", ""))
      set_option(b, "devices",
                 "share:" + std::to_string(s.local_rank) + "/" + std::to_string(s.local_size),
                 false);
  }
  if (share) *share = s;
  return config;
}

}  // namespace hcr::mpi
