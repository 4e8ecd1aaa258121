// Logging inside the core: formats only when the level is on.
#pragma once

#include <hcr/log.hpp>

#include <sstream>

#define HCR_LOG(level, expr)                                        \
  do {                                                              \
    if (::hcr::log::enabled(::hcr::LogLevel::level)) {              \
      std::ostringstream hcr_log_os_;                               \
      hcr_log_os_ << expr;                                          \
      ::hcr::log::write(::hcr::LogLevel::level, hcr_log_os_.str()); \
    }                                                               \
  } while (0)
