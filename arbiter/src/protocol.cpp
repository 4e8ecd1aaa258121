// Parsing and formatting the arbiter's text lines; every field is checked.
#include <hcr/arbiter/protocol.hpp>

#include <charconv>
#include <cmath>

namespace hcr::arbiter {

namespace {

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

template <class T>
bool number(std::string_view s, T& out) {
  if (s.empty() || s.size() > 20) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool index_list(std::string_view s, std::vector<uint32_t>& out) {
  out.clear();
  if (s == "-") return true;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string_view::npos) j = s.size();
    uint32_t v = 0;
    if (!number(s.substr(i, j - i), v) || v >= kMaxDevicesPerTenant) return false;
    if (!out.empty() && v <= out.back()) return false;  // ascending, no repeats
    out.push_back(v);
    if (out.size() > kMaxDevicesPerTenant) return false;
    i = j + 1;
  }
  return true;
}

std::string list_text(const std::vector<uint32_t>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (uint32_t x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

}  // namespace

std::string wire_key(std::string_view key) {
  std::string k(key.substr(0, kMaxKey));
  for (char& c : k)
    if (c <= ' ' || c > '~') c = '_';
  return k;
}

std::optional<Message> parse(std::string_view line, std::string& why) {
  if (line.size() >= kMaxLine) {
    why = "a line of " + std::to_string(line.size()) + " bytes (at most " +
          std::to_string(kMaxLine - 1) + ")";
    return std::nullopt;
  }
  for (char c : line)
    if (c < ' ' || c > '~') {
      why = "a byte outside printable ASCII";
      return std::nullopt;
    }
  const std::vector<std::string_view> w = words(line);
  if (w.empty()) {
    why = "an empty line";
    return std::nullopt;
  }
  const std::string_view cmd = w[0];
  auto bad = [&](const std::string& what) {
    why = std::string(cmd) + ": " + what + " in '" + std::string(line.substr(0, 80)) + "'";
    return std::nullopt;
  };
  auto count = [&](size_t n) { return w.size() == n; };
  if (cmd == "HELLO") {
    msg::Hello h;
    if (!count(3)) return bad("expected HELLO <version> <weight>");
    if (!number(w[1], h.version)) return bad("version '" + std::string(w[1]) + "' is not a number");
    if (!number(w[2], h.weight) || !(h.weight > 0) || !(h.weight <= 1e6))
      return bad("weight '" + std::string(w[2]) + "' is not a number above 0, at most 1e6");
    return h;
  }
  if (cmd == "DEVICE") {
    msg::Device d;
    if (!count(5)) return bad("expected DEVICE <kind> <memory> <cores> <key>");
    auto k = parse_kind(w[1]);
    if (!k) return bad("kind '" + std::string(w[1]) + "' is not cpu, gpu, accelerator or sim");
    d.report.kind = *k;
    if (!number(w[2], d.report.memory))
      return bad("memory '" + std::string(w[2]) + "' is not a number");
    if (!number(w[3], d.report.cores))
      return bad("cores '" + std::string(w[3]) + "' is not a number");
    if (w[4].size() > kMaxKey) return bad("a key longer than " + std::to_string(kMaxKey));
    d.report.key = std::string(w[4]);
    return d;
  }
  if (cmd == "JOINED")
    return count(1) ? std::optional<Message>(msg::Joined{}) : bad("takes nothing");
  if (cmd == "BUSY") return count(1) ? std::optional<Message>(msg::Busy{}) : bad("takes nothing");
  if (cmd == "IDLE") return count(1) ? std::optional<Message>(msg::Idle{}) : bad("takes nothing");
  if (cmd == "RELEASED") {
    msg::Released r;
    if (!count(3) || !number(w[1], r.index) || !number(w[2], r.seq))
      return bad("expected RELEASED <index> <seq>");
    return r;
  }
  if (cmd == "WELCOME") {
    msg::Welcome r;
    if (!count(3) || !number(w[1], r.version) || !number(w[2], r.tenant))
      return bad("expected WELCOME <version> <tenant>");
    return r;
  }
  if (cmd == "GRANT") {
    msg::GrantMsg g;
    if (!count(4) || !number(w[1], g.seq) || !index_list(w[2], g.held) || !index_list(w[3], g.own))
      return bad("expected GRANT <seq> <held> <own> (ascending index lists or -)");
    return g;
  }
  if (cmd == "ERROR") return msg::Error{std::string(line.substr(std::min<size_t>(6, line.size())))};
  why = "unknown message '" + std::string(cmd.substr(0, 32)) + "'";
  return std::nullopt;
}

std::string format(const Message& m) {
  struct V {
    std::string operator()(const msg::Hello& h) const {
      char b[64];
      std::snprintf(b, sizeof b, "HELLO %d %.17g\n", h.version, h.weight);
      return b;
    }
    std::string operator()(const msg::Device& d) const {
      return "DEVICE " + std::string(kind_name(d.report.kind)) + " " +
             std::to_string(d.report.memory) + " " + std::to_string(d.report.cores) + " " +
             wire_key(d.report.key) + "\n";
    }
    std::string operator()(const msg::Joined&) const { return "JOINED\n"; }
    std::string operator()(const msg::Busy&) const { return "BUSY\n"; }
    std::string operator()(const msg::Idle&) const { return "IDLE\n"; }
    std::string operator()(const msg::Released& r) const {
      return "RELEASED " + std::to_string(r.index) + " " + std::to_string(r.seq) + "\n";
    }
    std::string operator()(const msg::Welcome& w) const {
      return "WELCOME " + std::to_string(w.version) + " " + std::to_string(w.tenant) + "\n";
    }
    std::string operator()(const msg::GrantMsg& g) const {
      return "GRANT " + std::to_string(g.seq) + " " + list_text(g.held) + " " + list_text(g.own) +
             "\n";
    }
    std::string operator()(const msg::Error& e) const {
      std::string t = e.text.substr(0, kMaxLine - 8);
      for (char& c : t)
        if (c < ' ' || c > '~') c = '?';
      return "ERROR " + t + "\n";
    }
  };
  return std::visit(V{}, m);
}

}  // namespace hcr::arbiter
