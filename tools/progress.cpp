// The progress display of hcr run.
#include "progress.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace hcr::cli {

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Progress::Progress(const Runtime& rt, uint64_t total, bool enabled)
    : rt_(rt),
      total_(total),
      base_(rt.stats().completed),
      tty_(isatty(STDOUT_FILENO) != 0),
      start_(now()) {
  if (enabled && total > 0) thread_ = std::thread([this] { run(); });
}

Progress::~Progress() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  draw(true);
}

void Progress::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(tty_ ? 100 : 500), [&] { return stop_; }))
    draw(false);
}

void Progress::draw(bool final) {
  const uint64_t done = std::min(total_, rt_.stats().completed - base_);
  const double elapsed = now() - start_;
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const double left = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1;
  if (tty_) {
    const int width = 30, filled = static_cast<int>(frac * width);
    std::printf("\r[%.*s%*s] %llu/%llu tasks  %.0f tasks/s  %.1f s left   ", filled,
                "##############################", width - filled, "",
                static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                rate, left);
    if (final) std::printf("\n");
    std::fflush(stdout);
  } else if (final || elapsed - last_line_ >= 2.0) {  // plain lines: one every two seconds
    last_line_ = elapsed;
    std::printf("progress: %llu/%llu tasks (%.0f%%), %.0f tasks/s, %.1f s left\n",
                static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                frac * 100, rate, left);
    std::fflush(stdout);
  }
}

}  // namespace hcr::cli
