/// \file protocol.hpp
/// The arbiter's wire protocol: text lines over an AF_UNIX stream socket, at most kMaxLine bytes
/// each (newline included). Version 1.
///
///   tenant -> arbiter                      arbiter -> tenant
///   HELLO 1 <weight>                       WELCOME 1 <tenant id>
///   DEVICE <kind> <memory> <cores> <key>   GRANT <seq> <held> <own>   (index lists: "0,2" or "-")
///   JOINED                                 ERROR <text>               (then it closes)
///   BUSY | IDLE
///   RELEASED <index> <seq>
///
/// A tenant sends HELLO, one DEVICE per device (its local index is the order), then JOINED; the
/// arbiter answers WELCOME and a GRANT, and a new GRANT whenever either list changes. A device
/// missing from a new GRANT's held list must stop taking work; once nothing runs on it any more
/// the tenant answers RELEASED with that GRANT's seq, and only then is the device given to
/// another tenant. Anything else (an unknown word, a bad number, a line too long, a message out
/// of order) ends the connection with an ERROR naming it.
#pragma once

#include <hcr/arbiter/arbitration.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hcr::arbiter {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxLine = 512;
inline constexpr size_t kMaxDevicesPerTenant = 128;
inline constexpr size_t kMaxKey = 256;

namespace msg {
struct Hello {
  int version = 0;
  double weight = 1;
};
struct Device {
  DeviceReport report;
};
struct Joined {};
struct Busy {};
struct Idle {};
struct Released {
  uint32_t index = 0;
  uint64_t seq = 0;
};
struct Welcome {
  int version = 0;
  uint64_t tenant = 0;
};
struct GrantMsg {
  uint64_t seq = 0;
  std::vector<uint32_t> held, own;
};
struct Error {
  std::string text;
};
}  // namespace msg

using Message = std::variant<msg::Hello, msg::Device, msg::Joined, msg::Busy, msg::Idle,
                             msg::Released, msg::Welcome, msg::GrantMsg, msg::Error>;

/// Parses one line (without its newline). On failure returns nullopt and says why in `why`.
std::optional<Message> parse(std::string_view line, std::string& why);
/// The line for a message, newline included.
std::string format(const Message& m);
/// A key as it travels: every byte outside printable ASCII, and space, becomes '_'.
std::string wire_key(std::string_view key);

}  // namespace hcr::arbiter
