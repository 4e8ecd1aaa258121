/// \file error.hpp
/// The one exception type of the API.
#pragma once

#include <hcr/export.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace hcr {

/// What went wrong. The first values match hcr_error_code_t of the plugin ABI.
enum class ErrorCode : int {
  unknown = 1,
  invalid_argument = 2,
  not_found = 3,
  unsupported = 4,
  out_of_memory = 5,
  device_lost = 6,
  backend = 7,
  internal = 8,
  timeout = 9,
  kernel = 10,
  config = 100,         ///< a configuration file or value is wrong
  plugin = 101,         ///< a plugin could not be used
  dependency = 102,     ///< a task this one depends on failed
  shutdown = 103,       ///< the runtime has ended
  no_device = 104,      ///< no device can run the task
  communication = 105,  ///< a message between processes (hcr::mpi ranks) failed or never came
};

HCR_API std::string_view error_code_name(ErrorCode c) noexcept;

/// Thrown by every misuse of the API and carried by a failed task's Event. The message names the
/// value at fault ("gemm: shapes do not match: A is 3x4, B is 5x6").
class HCR_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace hcr
