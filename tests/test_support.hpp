// Helpers shared by the tests: configurations, temporary directories, log capture.
#pragma once

#include <hcr/hcr.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace hcr::test {

/// Only the CPU backend, with `threads` workers, no environment overrides.
inline Config cpu_config(int threads = 2, std::string policy = "eager") {
  Config c;
  c.use_environment = false;
  c.policy = std::move(policy);
  c.backends.push_back({"cpu", true, {{"threads", std::to_string(threads)}}, "test"});
  return c;
}

/// Only the stub backend from tests/plugins/good.
inline Config stub_config(std::vector<std::pair<std::string, std::string>> options = {}) {
  Config c;
  c.use_environment = false;
  c.plugin_paths = {HCR_TEST_GOOD_DIR};
  c.backends.push_back({"stub", true, std::move(options), "test"});
  return c;
}

/// A fresh directory under the system temp dir, removed at scope exit. Not world-writable.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("hcr-test-" + std::to_string(rd()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Collects log lines while alive.
class LogCapture {
 public:
  explicit LogCapture(LogLevel level = LogLevel::info) : old_level_(log::level()) {
    log::set_level(level);
    old_ = log::set_sink([this](LogLevel, std::string_view m) {
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.emplace_back(m);
    });
  }
  ~LogCapture() {
    log::set_sink(old_);
    log::set_level(old_level_);
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }
  bool contains(const std::string& needle) const {
    for (auto& l : lines())
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }

 private:
  LogLevel old_level_;
  log::Sink old_;
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

/// Runs `f` and returns the hcr::Error it throws (fails the test if it throws nothing else).
template <class F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-hcr exception: " << e.what();
    return Error(ErrorCode::unknown, e.what());
  }
  ADD_FAILURE() << "did not throw";
  return Error(ErrorCode::unknown, "");
}

}  // namespace hcr::test
