// An IPv4 or IPv6 address in network byte order, cheap to copy and compare,
// and a prefix of one.
#pragma once

#include <arpa/inet.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace tcpscope {

struct IpAddr {
  uint8_t family = 0;                 // 4 or 6; 0 = unset
  std::array<uint8_t, 16> bytes{};    // IPv4 uses bytes[0..3]

  static IpAddr v4(const uint8_t b[4]);
  static IpAddr v6(const uint8_t b[16]);
  // Parses "198.18.0.1" or "fd00::1". IPv4-mapped IPv6 ("::ffff:1.2.3.4") stays IPv6;
  // call unmapped() to fold it.
  static std::optional<IpAddr> parse(std::string_view text);

  bool is_v4_mapped() const;
  // ::ffff:a.b.c.d -> a.b.c.d; any other address unchanged.
  IpAddr unmapped() const;
  int bit_length() const { return family == 4 ? 32 : 128; }
  // Bit i from the most significant end (0 = top bit of the first byte).
  int bit(int i) const { return (bytes[i >> 3] >> (7 - (i & 7))) & 1; }
  std::string to_string() const;

  bool operator==(const IpAddr& o) const { return family == o.family && bytes == o.bytes; }
  bool operator!=(const IpAddr& o) const { return !(*this == o); }
};

// Writes a.to_string()'s text at p (at most INET6_ADDRSTRLEN bytes) and
// returns its end. Inline, with IPv4 formatted here rather than by
// inet_ntop's printf: the flow log's and Kafka's writers call it for every
// record.
inline char* put_addr_text(char* p, const IpAddr& a) {
  if (a.family == 4) {
    for (int i = 0; i < 4; ++i) {
      if (i) *p++ = '.';
      p = std::to_chars(p, p + 3, static_cast<unsigned>(a.bytes[i])).ptr;
    }
  } else if (a.family == 6) {
    char buf[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, a.bytes.data(), buf, sizeof buf)) {
      const size_t n = std::strlen(buf);
      std::memcpy(p, buf, n);
      p += n;
    }
  }
  return p;
}

struct Prefix {
  IpAddr addr;  // host bits cleared
  int len = 0;  // 0..32 for IPv4, 0..128 for IPv6
  std::string to_string() const;
  // "10.0.0.0/8", "fd00::/8"; a bare address is a host prefix. nullopt if malformed.
  static std::optional<Prefix> parse(const std::string& text);
  // ::ffff:a.b.c.d/len (len >= 96) -> a.b.c.d/(len - 96); any other prefix
  // unchanged. Flow addresses are reported unmapped and looked up as IPv4,
  // so a prefix inside ::ffff:0:0/96 is kept in this form.
  Prefix unmapped() const;
};

// Prefix::parse that also says why the text is not a prefix (bad address,
// length out of range, host bits set), for error messages. Prefix::parse and
// this function reject host bits ("10.1.2.3/8") instead of clearing them, and
// fold IPv4-mapped prefixes (::ffff:10.0.0.0/104 -> 10.0.0.0/8) because flow
// addresses are reported unmapped.
std::optional<Prefix> parse_prefix(const std::string& text, std::string* why);

}  // namespace tcpscope
