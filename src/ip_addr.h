// An IPv4 or IPv6 address in network byte order, cheap to copy and compare.
#pragma once

#include <array>
#include <cstdint>
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

}  // namespace tcpscope
