// Who is at the other end of a Unix socket, and who owns a file, in words for diagnostics: both
// sides of the arbiter name the user they refuse (the client a server of another user, the
// server a peer not allowed, a socket file of another user).
#pragma once

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // Linux 4.13; older C libraries do not name it
#endif

namespace hcr::arbiter::detail {

/// "uid 1000 (alice)", or "uid 1000" where the name is unknown.
inline std::string user_text(uid_t uid) {
  std::string s = "uid " + std::to_string(uid);
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    s += std::string(" (") + found->pw_name + ")";
  return s;
}

/// "gid 100 (users)", or "gid 100".
inline std::string group_text(gid_t gid) {
  std::string s = "gid " + std::to_string(gid);
  group gr{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    s += std::string(" (") + found->gr_name + ")";
  return s;
}

/// The credentials the peer of a connected socket had when it connected (or listened).
inline bool peer_credentials(int fd, ucred& out) {
  socklen_t len = sizeof out;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &out, &len) == 0 && len == sizeof out;
}

/// The peer's supplementary groups when it connected; empty where the kernel does not say.
inline std::vector<gid_t> peer_groups(int fd) {
  std::vector<gid_t> g(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t len = static_cast<socklen_t>(g.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g.data(), &len) == 0) {
      g.resize(len / sizeof(gid_t));
      return g;
    }
    if (errno != ERANGE) break;
    g.resize(len / sizeof(gid_t) + 1);  // the kernel said how much it needs
  }
  return {};
}

/// A uid hcr trusts to run the arbiter for this process: its own, or root.
inline bool trusted_uid(uid_t uid) { return uid == ::geteuid() || uid == 0; }

}  // namespace hcr::arbiter::detail
