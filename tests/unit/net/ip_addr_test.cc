#include "net/ip_addr.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "config/config.h"

namespace tcpscope {
namespace {

TEST(IpAddrTest, ParsesIpv4IntoFirstFourBytes) {
  auto a = IpAddr::parse("198.18.0.1");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->family, 4);
  EXPECT_EQ(a->bit_length(), 32);
  EXPECT_EQ(a->bytes, (std::array<uint8_t, 16>{198, 18, 0, 1}));  // the other twelve zero
  EXPECT_EQ(a->to_string(), "198.18.0.1");
}

TEST(IpAddrTest, Ipv4FactoryMatchesParse) {
  const uint8_t b[4] = {10, 20, 30, 40};
  EXPECT_EQ(IpAddr::v4(b), *IpAddr::parse("10.20.30.40"));
  EXPECT_EQ(IpAddr::v4(b).to_string(), "10.20.30.40");
}

TEST(IpAddrTest, ParsesIpv6AndPrintsRfc5952Form) {
  auto a = IpAddr::parse("2001:0DB8:0000:0000:0000:0000:0000:0001");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->family, 6);
  EXPECT_EQ(a->bit_length(), 128);
  EXPECT_EQ(a->bytes, (std::array<uint8_t, 16>{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01}));
  // Lower case, leading zeros dropped, longest zero run compressed.
  EXPECT_EQ(a->to_string(), "2001:db8::1");
  EXPECT_EQ(IpAddr::parse("fd00:0:0:1:0:0:0:0")->to_string(), "fd00:0:0:1::");
  EXPECT_EQ(IpAddr::parse("::")->to_string(), "::");
}

TEST(IpAddrTest, Ipv6FactoryMatchesParse) {
  uint8_t b[16] = {0xfe, 0x80};
  b[15] = 0x42;
  EXPECT_EQ(IpAddr::v6(b), *IpAddr::parse("fe80::42"));
}

TEST(IpAddrTest, V4MappedStaysIpv6UntilUnmapped) {
  auto a = IpAddr::parse("::ffff:192.0.2.7");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->family, 6);
  EXPECT_TRUE(a->is_v4_mapped());
  EXPECT_EQ(a->to_string(), "::ffff:192.0.2.7");
  IpAddr u = a->unmapped();
  EXPECT_EQ(u.family, 4);
  EXPECT_EQ(u, *IpAddr::parse("192.0.2.7"));
  EXPECT_EQ(u.to_string(), "192.0.2.7");
}

TEST(IpAddrTest, UnmappedLeavesOtherAddressesAlone) {
  for (const char* text : {"192.0.2.7", "2001:db8::1", "::192.0.2.7", "::fffe:192.0.2.7",
                           "0:0:0:0:1:ffff:c000:207"}) {
    auto a = IpAddr::parse(text);
    ASSERT_TRUE(a) << text;
    EXPECT_FALSE(a->is_v4_mapped()) << text;
    EXPECT_EQ(a->unmapped(), *a) << text;
  }
}

TEST(IpAddrTest, RejectsMalformedText) {
  for (const char* text :
       {"", " 1.2.3.4", "1.2.3.4 ", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.-4", "01.2.3.4",
        "1.2.3.4/32", "::1::", "2001:db8:::1", "gggg::1", "1:2:3:4:5:6:7:8:9", "fe80::1%eth0",
        "localhost", "[::1]", "0x7f.0.0.1"}) {
    EXPECT_FALSE(IpAddr::parse(text)) << "accepted \"" << text << "\"";
  }
  // Longer than any address; must not overflow the internal buffer.
  EXPECT_FALSE(IpAddr::parse(std::string(1000, '1')));
  // An embedded NUL must not let a valid prefix through.
  EXPECT_FALSE(IpAddr::parse(std::string("1.2.3.4\0junk", 12)));
}

TEST(IpAddrTest, BitCountsFromTheTop) {
  auto a = IpAddr::parse("128.0.0.1");
  EXPECT_EQ(a->bit(0), 1);
  EXPECT_EQ(a->bit(1), 0);
  EXPECT_EQ(a->bit(30), 0);
  EXPECT_EQ(a->bit(31), 1);
}

TEST(IpAddrTest, UnsetAddressPrintsEmpty) {
  EXPECT_EQ(IpAddr{}.to_string(), "");
  EXPECT_NE(IpAddr{}, *IpAddr::parse("0.0.0.0"));
  // Same bytes, different family: different addresses.
  EXPECT_NE(*IpAddr::parse("0.0.0.0"), *IpAddr::parse("::"));
}

// ---------------------------------------------------------------------------
// Prefix

TEST(PrefixTest, ParsesIpv4AndIpv6) {
  auto p = Prefix::parse("10.20.0.0/16");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->addr, *IpAddr::parse("10.20.0.0"));
  EXPECT_EQ(p->len, 16);
  EXPECT_EQ(p->to_string(), "10.20.0.0/16");

  auto q = Prefix::parse("FD00::/8");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->addr.family, 6);
  EXPECT_EQ(q->len, 8);
  EXPECT_EQ(q->to_string(), "fd00::/8");
}

TEST(PrefixTest, LengthZeroAndFullLength) {
  EXPECT_EQ(Prefix::parse("0.0.0.0/0")->len, 0);
  EXPECT_EQ(Prefix::parse("::/0")->len, 0);
  EXPECT_EQ(Prefix::parse("::/0")->addr.family, 6);
  EXPECT_EQ(Prefix::parse("192.0.2.255/32")->to_string(), "192.0.2.255/32");
  EXPECT_EQ(Prefix::parse("2001:db8::ffff/128")->to_string(), "2001:db8::ffff/128");
  // Anything but the zero address has host bits under /0.
  EXPECT_FALSE(Prefix::parse("1.0.0.0/0"));
  EXPECT_FALSE(Prefix::parse("8000::/0"));
}

// parse_prefix refuses `text` with a reason that says each of `reasons`.
void expect_refused(const char* text, std::initializer_list<const char*> reasons) {
  std::string why;
  EXPECT_FALSE(parse_prefix(text, &why)) << text;
  for (const char* reason : reasons) EXPECT_NE(why.find(reason), std::string::npos) << text << ": " << why;
}

TEST(PrefixTest, BareAddressIsHostPrefix) {
  EXPECT_EQ(Prefix::parse("192.0.2.1")->to_string(), "192.0.2.1/32");
  EXPECT_EQ(Prefix::parse("2001:db8::1")->to_string(), "2001:db8::1/128");
}

TEST(PrefixTest, RejectsLengthOutOfRange) {
  expect_refused("10.0.0.0/33", {"out of range 0..32"});
  expect_refused("::/129", {"out of range 0..128"});
  EXPECT_FALSE(Prefix::parse("10.0.0.0/1000"));
}

TEST(PrefixTest, RejectsMalformedLength) {
  for (const char* text : {"10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/8 ",
                           "10.0.0.0/ 8", "10.0.0.0/8/8", "10.0.0.0/255.0.0.0", "10.0.0.0/0x8"})
    expect_refused(text, {"not a number"});
}

TEST(PrefixTest, RejectsBadAddress) {
  expect_refused("10.0.0/8", {"\"10.0.0\" is not an IPv4 or IPv6 address"});
  EXPECT_FALSE(Prefix::parse(""));
  EXPECT_FALSE(Prefix::parse("/8"));
  EXPECT_FALSE(Prefix::parse("example.com/8"));
}

// Host bits set is rejected, not silently cleared: "10.1.2.3/8" is a typo for
// either a host or a different network, and the message shows the network.
TEST(PrefixTest, RejectsHostBitsAndSuggestsNetwork) {
  expect_refused("10.1.2.3/8", {"host bits set", "did you mean 10.0.0.0/8?"});
  expect_refused("fd00::1/8", {"did you mean fd00::/8?"});
  EXPECT_FALSE(Prefix::parse("192.0.2.128/24"));
  // The last network bit may be set; only bits after the length count.
  EXPECT_TRUE(Prefix::parse("192.0.2.128/25"));
  EXPECT_TRUE(Prefix::parse("10.1.0.0/16"));
}

TEST(PrefixTest, FoldsV4MappedPrefixToIpv4) {
  auto p = Prefix::parse("::ffff:10.0.0.0/104");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->addr.family, 4);
  EXPECT_EQ(p->to_string(), "10.0.0.0/8");
  EXPECT_EQ(Prefix::parse("::ffff:192.0.2.1")->to_string(), "192.0.2.1/32");
  // Shorter than /96 covers more than the mapped range: stays IPv6.
  EXPECT_EQ(Prefix::parse("::/80")->addr.family, 6);
}

}  // namespace
}  // namespace tcpscope
