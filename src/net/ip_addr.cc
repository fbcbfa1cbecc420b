// IpAddr (ip_addr.h) and Prefix (config.h): text <-> binary addresses.
//
// Parsing and printing go through inet_pton/inet_ntop so the accepted syntax
// and the canonical output (RFC 5952 for IPv6) are exactly the C library's.
#include "net/ip_addr.h"

#include <arpa/inet.h>

#include <cstring>

#include "text/utf8_text.h"

namespace tcpscope {

namespace {

// inet_pton needs a NUL-terminated string; anything longer than this cannot be
// an address (the longest IPv6 text form is INET6_ADDRSTRLEN - 1 = 45 chars).
constexpr size_t kMaxAddressText = INET6_ADDRSTRLEN;

constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

}  // namespace

IpAddr IpAddr::v4(const uint8_t b[4]) {
  IpAddr a;
  a.family = 4;
  std::memcpy(a.bytes.data(), b, 4);
  return a;
}

IpAddr IpAddr::v6(const uint8_t b[16]) {
  IpAddr a;
  a.family = 6;
  std::memcpy(a.bytes.data(), b, 16);
  return a;
}

std::optional<IpAddr> IpAddr::parse(std::string_view text) {
  if (text.empty() || text.size() >= kMaxAddressText) return std::nullopt;
  char buf[kMaxAddressText];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  // An embedded NUL would make inet_pton see only a prefix of the text.
  if (std::strlen(buf) != text.size()) return std::nullopt;

  uint8_t b[16];
  if (inet_pton(AF_INET, buf, b) == 1) return v4(b);
  if (inet_pton(AF_INET6, buf, b) == 1) return v6(b);
  return std::nullopt;
}

bool IpAddr::is_v4_mapped() const {
  return family == 6 && std::memcmp(bytes.data(), kV4MappedPrefix, sizeof kV4MappedPrefix) == 0;
}

IpAddr IpAddr::unmapped() const {
  if (!is_v4_mapped()) return *this;
  return v4(bytes.data() + 12);
}

std::string IpAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  if (family == 4) return inet_ntop(AF_INET, bytes.data(), buf, sizeof buf);
  if (family == 6) return inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
  return "";  // unset address
}

// ---------------------------------------------------------------------------
// Prefix

namespace {

// True when any bit at position >= len (from the top) is set.
bool has_host_bits(const IpAddr& a, int len) {
  for (int i = len; i < a.bit_length(); ++i) {
    if (a.bit(i)) return true;
  }
  return false;
}

IpAddr with_host_bits_cleared(IpAddr a, int len) {
  for (int i = len; i < a.bit_length(); ++i) a.bytes[i >> 3] &= ~(0x80 >> (i & 7));
  return a;
}

void set_reason(std::string* why, std::string text) {
  if (why) *why = std::move(text);
}

}  // namespace

std::string Prefix::to_string() const { return addr.to_string() + "/" + std::to_string(len); }

Prefix Prefix::unmapped() const {
  if (addr.is_v4_mapped() && len >= 96) return Prefix{addr.unmapped(), len - 96};
  return *this;
}

std::optional<Prefix> parse_prefix(const std::string& text, std::string* why) {
  const size_t slash = text.find('/');
  const std::string addr_text = text.substr(0, slash);
  std::optional<IpAddr> addr = IpAddr::parse(addr_text);
  if (!addr) {
    set_reason(why, "\"" + clipped(addr_text) + "\" is not an IPv4 or IPv6 address");
    return std::nullopt;
  }

  int len = addr->bit_length();  // a bare address is a host prefix
  if (slash != std::string::npos) {
    const std::string len_text = text.substr(slash + 1);
    // Digits only: no sign, no spaces, no netmask notation; 3 digits is enough for 128.
    bool digits = !len_text.empty() && len_text.size() <= 3;
    for (char c : len_text) digits = digits && c >= '0' && c <= '9';
    if (!digits) {
      set_reason(why, "prefix length \"" + clipped(len_text) + "\" is not a number");
      return std::nullopt;
    }
    len = std::stoi(len_text);
    if (len > addr->bit_length()) {
      set_reason(why, "prefix length " + len_text + " is out of range 0.." +
                          std::to_string(addr->bit_length()));
      return std::nullopt;
    }
  }

  // "10.1.2.3/8" is almost always a typo (meant /32, or 10.1.0.0/16), so it is
  // rejected rather than silently widened; the message shows the network.
  if (has_host_bits(*addr, len)) {
    Prefix meant{with_host_bits_cleared(*addr, len), len};
    set_reason(why, "host bits set (did you mean " + meant.to_string() + "?)");
    return std::nullopt;
  }

  // Flow addresses are reported unmapped (::ffff:a.b.c.d -> a.b.c.d), so a
  // prefix inside ::ffff:0:0/96 is folded to IPv4 to be able to match them.
  return Prefix{*addr, len}.unmapped();
}

std::optional<Prefix> Prefix::parse(const std::string& text) { return parse_prefix(text, nullptr); }

}  // namespace tcpscope
