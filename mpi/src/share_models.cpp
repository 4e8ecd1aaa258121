// share_models: the ranks' learned cost models, one file per architecture in each host's model
// directory, exchanged so that a rank starts warm from what an identical architecture measured on
// another host. Files travel as they are (name and bytes); a rank adopts a file its own directory
// lacks, once the model loader accepts it whole (sched::check_model_file), and keeps its own
// otherwise, so nothing measured locally is ever replaced and nothing corrupt is written.
#include <hcr/log.hpp>
#include <hcr/mpi.hpp>
#include <hcr/sched.hpp>

#include "safe_file.hpp"

#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hcr::mpi {
namespace {

// A file larger is not sent (a model file within hcr's caps is well under 1 MiB, and the loader
// parses no more than a few MiB of one).
constexpr size_t kMaxModelFile = size_t{16} << 20;

bool is_model_file(const std::string& name) {
  const std::string suffix = ".model.toml";
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// name '\0' size (8 bytes) content, for every file.
void append(std::string& blob, const std::string& name, const std::string& content) {
  blob += name;
  blob.push_back('\0');
  const uint64_t n = content.size();
  blob.append(reinterpret_cast<const char*>(&n), sizeof n);
  blob += content;
}

}  // namespace

size_t share_models(const Config& config, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string dir = sched::model_directory(config);
  std::optional<files::TrustedDir> d;
  std::set<std::string> have;
  std::string blob;
  if (!dir.empty()) {
    try {
      d = files::TrustedDir::make(dir);
      for (const std::string& name : d->list()) {
        if (!is_model_file(name)) continue;
        have.insert(name);
        try {
          if (auto content = d->read(name, kMaxModelFile)) append(blob, name, *content);
        } catch (const files::FileError& e) {  // this file only: the others still go
          log::write(LogLevel::warn, "hcr::mpi::share_models: rank " + std::to_string(rank) +
                                         " does not share " + name + ": " + e.what());
        }
      }
    } catch (const files::FileError& e) {
      log::write(LogLevel::warn, std::string("hcr::mpi::share_models: rank ") +
                                     std::to_string(rank) + ": the model directory " + dir +
                                     " is not used: " + e.what());
      d.reset();
      blob.clear();
    }
  }
  // Every rank's files to every rank: sizes first, then the bytes.
  const int mine = static_cast<int>(blob.size());
  if (blob.size() > static_cast<size_t>(INT32_MAX))
    throw Error(ErrorCode::invalid_argument,
                "hcr::mpi::share_models: the model files of " + dir + " exceed 2 GiB");
  std::vector<int> sizes(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm);
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = static_cast<int>(total);
    total += static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    if (total > static_cast<size_t>(INT32_MAX))
      throw Error(ErrorCode::invalid_argument,
                  "hcr::mpi::share_models: the ranks' model files exceed 2 GiB together");
  }
  std::string all(total, '\0');
  MPI_Allgatherv(blob.data(), mine, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR,
                 comm);
  if (!d) return 0;
  size_t adopted = 0;
  for (int r = 0; r < size; ++r) {  // the lowest rank's copy of a file wins
    if (r == rank) continue;
    size_t at = static_cast<size_t>(offsets[static_cast<size_t>(r)]);
    const size_t end = at + static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    while (at < end) {
      const size_t zero = all.find('\0', at);
      uint64_t n = 0;
      if (zero == std::string::npos || zero + 1 + sizeof n > end) break;
      const std::string name = all.substr(at, zero - at);
      std::memcpy(&n, all.data() + zero + 1, sizeof n);
      const size_t content = zero + 1 + sizeof n;
      if (n > end - content) break;
      at = content + n;
      // A name from another rank must be a plain model file name: no directory parts.
      if (!is_model_file(name) || name.find('/') != std::string::npos || have.count(name)) continue;
      // And its bytes a model the loader takes whole, of the architecture the name says: a file
      // corrupt on its host (or in between) is refused, and this rank keeps what it has.
      const std::string_view text(all.data() + content, n);
      if (const std::string why = sched::check_model_file(name, text); !why.empty()) {
        log::write(LogLevel::warn, "hcr::mpi::share_models: rank " + std::to_string(rank) +
                                       " refuses rank " + std::to_string(r) + "'s " + name + " (" +
                                       std::to_string(n) + " bytes): " + why);
        continue;
      }
      try {
        d->write(name, text, 0644);
        have.insert(name);
        ++adopted;
        log::write(LogLevel::info, "hcr::mpi::share_models: rank " + std::to_string(rank) +
                                       " starts from rank " + std::to_string(r) + "'s " + name);
      } catch (const files::FileError& e) {
        log::write(LogLevel::warn, "hcr::mpi::share_models: rank " + std::to_string(rank) + ": " +
                                       name + " not adopted: " + e.what());
      }
    }
  }
  return adopted;
}

}  // namespace hcr::mpi
