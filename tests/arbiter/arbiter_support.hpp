// Helpers of the arbiter tests: simulated devices (the same keys in every runtime made from the
// same options), a task that checks no two runtimes use one device at once, polling.
#pragma once

#include "../test_support.hpp"

#include <hcr/arbiter/client.hpp>
#include <hcr/arbiter/server.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace hcr::test {

/// `n` simulated devices in host memory; kernel "work" is modelled at 1 ms and its CPU
/// implementation runs (compute = true).
inline Config arbiter_sim(int n, const std::string& socket, double weight = 1) {
  Config c;
  c.use_environment = false;
  c.policy = "eager";
  c.model_dir = "off";
  std::vector<std::pair<std::string, std::string>> o;
  for (int i = 0; i < n; ++i) {
    std::string p = "device.";
    p += std::to_string(i);
    p += '.';
    std::string name = "d";
    name += std::to_string(i);
    o.push_back({p + "name", name});
    o.push_back({p + "gflops", "1000"});
    o.push_back({p + "host_memory", "true"});
  }
  o.push_back({"kernel.work.flops", "1e9"});
  o.push_back({"flops_per_byte", "0"});
  c.backends.push_back({"sim", true, std::move(o), "test"});
  c.arbiter_socket = socket;
  c.arbiter_weight = weight;
  return c;
}

/// Which runtime runs on which node device now (the devices of every runtime made by arbiter_sim
/// share their keys by index): catches two runtimes on one device at once. (One runtime may run
/// two of its own tasks' host code at once on a device: its queued launch.)
struct NodeUse {
  static constexpr int kDevices = 8;
  std::atomic<int> in_use[2][kDevices] = {};
  std::atomic<int> overlaps{0};
};

/// Counts what ran, per task.
struct Ledger {
  static constexpr int kDevices = NodeUse::kDevices;
  std::vector<std::atomic<int>> hits;
  explicit Ledger(size_t tasks) : hits(tasks) {}
  bool all_once() const { return first_once(hits.size()); }
  /// Tasks [0, n) ran once each, the others never.
  bool first_once(size_t n) const {
    for (size_t i = 0; i < hits.size(); ++i)
      if (hits[i].load() != (i < n ? 1 : 0)) return false;
    return true;
  }
};

/// The "work" kernel of `rt`: each run marks its device busy for a moment (so an overlap with
/// another runtime on the same node device is seen) and counts its task (parameter 0).
inline Kernel ledger_kernel(Runtime& rt, Ledger& l, NodeUse* node = nullptr, int side = 0) {
  return rt.kernel("work").cpu([&l, node, side](TaskContext& c) {
    if (node != nullptr) {
      const size_t d = c.device_index() % NodeUse::kDevices;
      node->in_use[side][d].fetch_add(1);
      if (node->in_use[1 - side][d].load() != 0) node->overlaps.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      node->in_use[side][d].fetch_sub(1);
    }
    l.hits[static_cast<size_t>(c.param<int>(0))].fetch_add(1);
  });
}

/// Submits tasks [first, last) of the ledger, at most `depth` unfinished at a time.
inline void feed(Runtime& rt, Kernel& k, int first, int last, size_t depth = 32) {
  std::deque<Event> inflight;
  for (int i = first; i < last; ++i) {
    inflight.push_back(rt.submit(Task(k).param(i)));
    if (inflight.size() >= depth) {
      inflight.front().get();
      inflight.pop_front();
    }
  }
  for (auto& e : inflight) e.get();
}

/// Submits tasks 0, 1, ... of the ledger until `stop` (at most its size), `depth` unfinished at a
/// time: a runtime that stays busy however slow the machine. Returns how many it submitted.
inline int feed_until(Runtime& rt, Kernel& k, const std::atomic<bool>& stop, int limit,
                      size_t depth = 64) {
  std::deque<Event> inflight;
  int i = 0;
  for (; i < limit && !stop.load(); ++i) {
    inflight.push_back(rt.submit(Task(k).param(i)));
    if (inflight.size() >= depth) {
      inflight.front().get();
      inflight.pop_front();
    }
  }
  for (auto& e : inflight) e.get();
  return i;
}

/// Polls `done` every 2 ms, at most 30 s (a loaded machine is slow, never this slow).
template <class F>
bool eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

/// A tenant's runtime side without a runtime: `n` devices with arbiter_sim's keys, a settable
/// count of unfinished tasks, and what the client logged.
class FakeHost : public arbiter::TenantHost {
 public:
  explicit FakeHost(int n) : n_(n) {}
  std::vector<arbiter::DeviceReport> devices() override {
    std::vector<arbiter::DeviceReport> v;
    for (int i = 0; i < n_; ++i) {
      const std::string d = std::to_string(i);
      v.push_back({"sim/" + d + "/d" + d + "/sim:d" + d, arbiter::Kind::sim, 0, 1});
    }
    return v;
  }
  uint64_t unfinished() override { return unfinished_.load(); }
  void allow(uint32_t, bool) override {}
  uint32_t running(uint32_t) override { return 0; }
  void log(bool, const std::string& text) override {
    std::lock_guard<std::mutex> g(mutex_);
    lines_.push_back(text);
  }
  bool logged(const std::string& needle) const {
    std::lock_guard<std::mutex> g(mutex_);
    for (auto& l : lines_)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
  std::string text() const {
    std::lock_guard<std::mutex> g(mutex_);
    std::string all;
    for (auto& l : lines_) all += l + "\n";
    return all;
  }
  std::atomic<uint64_t> unfinished_{0};

 private:
  int n_;
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

/// An arbiter on a thread of this process.
class ServerThread {
 public:
  explicit ServerThread(arbiter::ServerOptions o) {
    if (!o.log)
      o.log = [this](const std::string& s) {
        std::lock_guard<std::mutex> g(mutex_);
        lines_.push_back(s);
      };
    server_ = std::make_unique<arbiter::Server>(std::move(o));
    thread_ = std::thread([this] { server_->run(); });
  }
  ~ServerThread() { kill(); }
  arbiter::Server& server() { return *server_; }
  /// Stops it and closes every connection (the tenants see EOF, as when it dies).
  void kill() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }
  bool logged(const std::string& needle) const {
    std::lock_guard<std::mutex> g(mutex_);
    for (auto& l : lines_)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> g(mutex_);
    return lines_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
  std::unique_ptr<arbiter::Server> server_;
  std::thread thread_;
};

}  // namespace hcr::test
