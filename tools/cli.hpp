// Shared pieces of the hcr command line.
#pragma once

#include <hcr/hcr.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hcr::cli {

/// Arguments after the sub-command, as "--key value" pairs and flags.
class Args {
 public:
  Args(int argc, char** argv, int first);
  /// The value of --key, if given; marks it used.
  std::optional<std::string> value(const std::string& key);
  bool flag(const std::string& key);
  uint64_t number(const std::string& key, uint64_t fallback);
  /// Throws hcr::Error naming the first option nobody asked about.
  void check_all_used() const;

 private:
  struct Item {
    std::string key, value;
    bool has_value, used;
  };
  std::vector<Item> items_;
};

/// The runtime configuration from --config FILE, or the defaults.
Config config_from(Args& args);

std::string human_bytes(uint64_t bytes);

int cmd_devices(Args& args);
int cmd_run(Args& args);
int cmd_models(Args& args);
/// hcr serve --socket PATH [--allow-user U]... [--allow-group G]...: the node arbiter.
int cmd_serve(int argc, char** argv);
int cmd_trace_summary(const std::string& file);

}  // namespace hcr::cli
