// Progress of a run: a bar on a terminal (tasks done of total, rate, time left), plain lines every
// few seconds otherwise (logs, CI).
#pragma once

#include <hcr/runtime.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace hcr::cli {

class Progress {
 public:
  /// Watches `rt` until destroyed; `total` tasks are expected beyond those already completed.
  Progress(const Runtime& rt, uint64_t total, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

 private:
  void run();
  void draw(bool final);
  const Runtime& rt_;
  const uint64_t total_, base_;
  const bool tty_;
  const double start_;
  double last_line_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hcr::cli
