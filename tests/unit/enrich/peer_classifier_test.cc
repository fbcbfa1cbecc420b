#include "enrich/peer_classifier.h"

#include "../ip_text.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <random>

namespace tcpscope {
namespace {

Prefix pfx(const char* text) {
  std::optional<Prefix> p = Prefix::parse(text);
  EXPECT_TRUE(p.has_value()) << text;
  return p.value_or(Prefix{});
}

PeerClassSpec spec(const char* name, std::vector<const char*> prefixes, std::vector<uint32_t> asns = {}) {
  PeerClassSpec s;
  s.name = name;
  for (const char* p : prefixes) s.prefixes.push_back(pfx(p));
  s.asns = std::move(asns);
  return s;
}

// An address (with its ASN) and the class it should get.
struct Want {
  const char* addr;
  uint32_t asn;
  const char* peer_class;
};

void expect_classes(const PeerClassifier& c, std::initializer_list<Want> wants) {
  for (const Want& w : wants) EXPECT_EQ(c.classify(ip(w.addr), w.asn), w.peer_class) << w.addr << " AS" << w.asn;
}

// The example from SPEC.md "Config file".
PeerClassifier spec_example() {
  return PeerClassifier({spec("intra-pop", {"10.20.0.0/16"}),
                         spec("pop-to-pop", {"10.0.0.0/8", "fd00::/8"}),
                         spec("origin", {}, {64500})},
                        "client");
}

TEST(PeerClassifier, SpecExample) {
  const PeerClassifier c = spec_example();
  expect_classes(c, {{"10.20.1.1", 0, "intra-pop"},
                     {"10.21.1.1", 0, "pop-to-pop"},
                     {"fd00::1", 0, "pop-to-pop"},
                     {"fe80::1", 0, "client"},
                     {"198.51.100.1", 64500, "origin"},
                     {"198.51.100.1", 64501, "client"},
                     {"198.51.100.1", 0, "client"}});
}

TEST(PeerClassifier, PrefixMatchBeatsAsnMatch) {
  const PeerClassifier c = spec_example();
  expect_classes(c, {{"10.20.1.1", 64500, "intra-pop"},
                     {"10.99.1.1", 64500, "pop-to-pop"}});
}

TEST(PeerClassifier, LongestPrefixWinsWhateverTheClassOrder) {
  // The broad class listed first this time.
  const PeerClassifier c({spec("wide", {"10.0.0.0/8"}), spec("narrow", {"10.20.0.0/16"}),
                          spec("host", {"10.20.0.7/32"})},
                         "client");
  expect_classes(c, {{"10.20.0.7", 0, "host"},
                     {"10.20.0.8", 0, "narrow"},
                     {"10.30.0.8", 0, "wide"}});
}

TEST(PeerClassifier, MappedAddressesMatchIPv4Prefixes) {
  const PeerClassifier c = spec_example();
  expect_classes(c, {{"::ffff:10.20.1.1", 0, "intra-pop"},
                     {"::ffff:10.21.1.1", 0, "pop-to-pop"},
                     {"::ffff:198.51.100.1", 0, "client"}});
}

TEST(PeerClassifier, MappedPrefixesAreFoldedToIPv4) {
  PeerClassSpec s;
  s.name = "mapped";
  IpAddr mapped = ip("::ffff:192.0.2.0");
  s.prefixes.push_back(Prefix{mapped, 120});  // as if built by hand, not by Prefix::parse
  const PeerClassifier c({s}, "client");
  expect_classes(c, {{"192.0.2.9", 0, "mapped"},
                     {"::ffff:192.0.2.9", 0, "mapped"},
                     {"192.0.3.9", 0, "client"}});
}

TEST(PeerClassifier, FirstClassKeepsADuplicatePrefixOrAsn) {
  const PeerClassifier c({spec("a", {"192.0.2.0/24"}, {64496}), spec("b", {"192.0.2.0/24"}, {64496})},
                         "client");
  expect_classes(c, {{"192.0.2.1", 0, "a"},
                     {"203.0.113.1", 64496, "a"}});
}

TEST(PeerClassifier, DefaultOnly) {
  const PeerClassifier c({}, "everyone");
  expect_classes(c, {{"192.0.2.1", 0, "everyone"},
                     {"2001:db8::1", 13335, "everyone"}});
  EXPECT_EQ(c.class_names(), std::vector<std::string>{"everyone"});
}

TEST(PeerClassifier, AsnZeroNeverMatches) {
  const PeerClassifier c({spec("zero", {}, {0})}, "client");
  EXPECT_EQ(c.classify(ip("192.0.2.1"), 0), "client");
}

TEST(PeerClassifier, ClassNamesListEveryPossibleResultOnce) {
  EXPECT_EQ(spec_example().class_names(),
            (std::vector<std::string>{"intra-pop", "pop-to-pop", "origin", "client"}));
  const PeerClassifier c({spec("client", {"10.0.0.0/8"}), spec("other", {"11.0.0.0/8"})}, "client");
  EXPECT_EQ(c.class_names(), (std::vector<std::string>{"client", "other"}));
  EXPECT_EQ(c.default_class(), "client");
  EXPECT_EQ(c.classify(ip("12.0.0.1"), 0), "client");
}

TEST(PeerClassifier, ManyRandomPrefixesMatchLinearScan) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), len(8, 28), cls(0, 4);
  std::vector<PeerClassSpec> classes(5);
  struct Entry {
    IpAddr addr;
    int len;
    int cls;
  };
  std::vector<Entry> entries;
  for (int i = 0; i < 5; ++i) classes[i].name = "class" + std::to_string(i);
  for (int i = 0; i < 2000; ++i) {
    uint8_t b[4] = {uint8_t(10 + (byte(rng) & 3)), uint8_t(byte(rng)), uint8_t(byte(rng)), 0};
    IpAddr a = IpAddr::v4(b);
    const int l = len(rng);
    for (int bit = l; bit < 32; ++bit) a.bytes[bit >> 3] &= uint8_t(~(0x80 >> (bit & 7)));
    const int c = cls(rng);
    classes[c].prefixes.push_back(Prefix{a, l});
    entries.push_back(Entry{a, l, c});
  }
  const PeerClassifier classifier(classes, "client");
  // A prefix listed by several classes belongs to the first class (config order).
  auto expected = [&](const IpAddr& a) -> std::string {
    int best_len = -1, best_cls = -1;
    for (const Entry& e : entries) {
      bool in = true;
      for (int bit = 0; bit < e.len && in; ++bit) in = a.bit(bit) == e.addr.bit(bit);
      if (!in) continue;
      if (e.len > best_len || (e.len == best_len && e.cls < best_cls)) {
        best_len = e.len;
        best_cls = e.cls;
      }
    }
    return best_cls < 0 ? "client" : classes[best_cls].name;
  };
  int classified = 0;
  for (int i = 0; i < 3000; ++i) {
    uint8_t b[4] = {uint8_t(10 + (byte(rng) & 7)), uint8_t(byte(rng)), uint8_t(byte(rng)), uint8_t(byte(rng))};
    const IpAddr a = IpAddr::v4(b);
    const std::string want = expected(a);
    if (want != "client") ++classified;
    ASSERT_EQ(classifier.classify(a, 0), want) << a.to_string();
  }
  EXPECT_GT(classified, 500);
}

}  // namespace
}  // namespace tcpscope
