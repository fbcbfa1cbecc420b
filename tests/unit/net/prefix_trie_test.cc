#include "net/prefix_trie.h"

#include "../ip_text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace tcpscope {
namespace {

// Value found for `text`, or -1 when nothing matches.
int find_value(const PrefixTrie<int>& t, const char* text, int* len = nullptr) {
  const int* v = t.lookup_with_len(ip(text), len);
  return v ? *v : -1;
}

// A prefix of a trie and its value.
struct PrefixValue {
  const char* addr;
  int len;
  int value;
};

PrefixTrie<int> trie_of(std::initializer_list<PrefixValue> entries) {
  PrefixTrie<int> t;
  for (const PrefixValue& e : entries) EXPECT_TRUE(t.insert(ip(e.addr), e.len, e.value)) << e.addr << "/" << e.len;
  return t;
}

bool bits_match(const IpAddr& a, const IpAddr& prefix, int len) {
  if (std::memcmp(a.bytes.data(), prefix.bytes.data(), size_t(len / 8)) != 0) return false;
  if (len % 8 == 0) return true;
  const uint8_t mask = uint8_t(0xff << (8 - len % 8));
  return (a.bytes[len / 8] & mask) == (prefix.bytes[len / 8] & mask);
}

IpAddr clear_host_bits(IpAddr a, int len) {
  for (int i = len; i < a.bit_length(); ++i) a.bytes[i >> 3] &= uint8_t(~(0x80 >> (i & 7)));
  return a;
}

TEST(PrefixTrie, EmptyMatchesNothing) {
  PrefixTrie<int> t;
  EXPECT_EQ(t.lookup(ip("10.0.0.1")), nullptr);
  EXPECT_EQ(t.lookup(ip("::1")), nullptr);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.empty());
}

TEST(PrefixTrie, LongestOfNestedPrefixesWins) {
  PrefixTrie<int> t;
  // Inserted shortest-last so the trie has to restructure above existing nodes.
  ASSERT_TRUE(t.insert(ip("10.1.2.0"), 24, 3));
  ASSERT_TRUE(t.insert(ip("10.1.0.0"), 16, 2));
  ASSERT_TRUE(t.insert(ip("10.0.0.0"), 8, 1));
  int len = -1;
  EXPECT_EQ(find_value(t, "10.1.2.200", &len), 3);
  EXPECT_EQ(len, 24);
  EXPECT_EQ(find_value(t, "10.1.3.1", &len), 2);
  EXPECT_EQ(len, 16);
  EXPECT_EQ(find_value(t, "10.200.0.1", &len), 1);
  EXPECT_EQ(len, 8);
  EXPECT_EQ(find_value(t, "11.0.0.1"), -1);
  EXPECT_EQ(t.size(), 3u);
}

TEST(PrefixTrie, DivergingSiblingsNeedABranchNode) {
  PrefixTrie<int> t;
  t.insert(ip("192.168.1.0"), 24, 1);
  t.insert(ip("192.168.2.0"), 24, 2);  // shares 22 bits with the first
  t.insert(ip("192.168.3.0"), 24, 3);
  EXPECT_EQ(find_value(t, "192.168.1.9"), 1);
  EXPECT_EQ(find_value(t, "192.168.2.9"), 2);
  EXPECT_EQ(find_value(t, "192.168.3.9"), 3);
  EXPECT_EQ(find_value(t, "192.168.0.9"), -1);  // the branch point is not a prefix
  EXPECT_EQ(t.size(), 3u);
}

TEST(PrefixTrie, DefaultRoutePerFamily) {
  PrefixTrie<int> t;
  t.insert(ip("0.0.0.0"), 0, 4);
  EXPECT_EQ(find_value(t, "255.255.255.255"), 4);
  EXPECT_EQ(find_value(t, "0.0.0.0"), 4);
  EXPECT_EQ(find_value(t, "2001:db8::1"), -1);  // an IPv4 default does not cover IPv6
  t.insert(ip("::"), 0, 6);
  EXPECT_EQ(find_value(t, "2001:db8::1"), 6);
  t.insert(ip("10.0.0.0"), 8, 8);
  int len = -1;
  EXPECT_EQ(find_value(t, "10.0.0.1", &len), 8);
  EXPECT_EQ(find_value(t, "11.0.0.1", &len), 4);
  EXPECT_EQ(len, 0);
}

TEST(PrefixTrie, HostRoutes) {
  PrefixTrie<int> t = trie_of({{"203.0.113.7", 32, 1}, {"203.0.113.6", 32, 2},  // IPv4 hosts
                               {"2001:db8::7", 128, 3}, {"2001:db8::6", 128, 4},  // IPv6 hosts
                               {"2001:db8::", 64, 5}});
  int len = -1;
  EXPECT_EQ(find_value(t, "203.0.113.7", &len), 1);
  EXPECT_EQ(len, 32);
  EXPECT_EQ(find_value(t, "203.0.113.6"), 2);
  EXPECT_EQ(find_value(t, "203.0.113.5"), -1);
  EXPECT_EQ(find_value(t, "2001:db8::7", &len), 3);
  EXPECT_EQ(len, 128);
  EXPECT_EQ(find_value(t, "2001:db8::6"), 4);
  EXPECT_EQ(find_value(t, "2001:db8::8", &len), 5);
  EXPECT_EQ(len, 64);
}

TEST(PrefixTrie, ReinsertReplacesValue) {
  PrefixTrie<std::string> t;
  t.insert(ip("10.0.0.0"), 8, "first");
  t.insert(ip("10.0.0.0"), 8, "second");
  ASSERT_NE(t.lookup(ip("10.1.1.1")), nullptr);
  EXPECT_EQ(*t.lookup(ip("10.1.1.1")), "second");
  EXPECT_EQ(t.size(), 1u);
}

TEST(PrefixTrie, HostBitsOfTheInsertedPrefixAreIgnored) {
  PrefixTrie<int> t;
  t.insert(ip("10.9.9.9"), 8, 1);
  EXPECT_EQ(find_value(t, "10.0.0.1"), 1);
  ASSERT_NE(t.find(ip("10.0.0.0"), 8), nullptr);
  EXPECT_EQ(*t.find(ip("10.0.0.0"), 8), 1);
}

TEST(PrefixTrie, RejectsInvalidPrefixes) {
  PrefixTrie<int> t;
  EXPECT_FALSE(t.insert(IpAddr{}, 0, 1));  // family unset
  EXPECT_FALSE(t.insert(ip("10.0.0.0"), 33, 1));
  EXPECT_FALSE(t.insert(ip("10.0.0.0"), -1, 1));
  EXPECT_FALSE(t.insert(ip("::"), 129, 1));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.lookup(IpAddr{}), nullptr);
}

TEST(PrefixTrie, FindIsExactMatchOnly) {
  PrefixTrie<int> t;
  t.insert(ip("10.1.0.0"), 16, 1);
  t.insert(ip("10.2.0.0"), 16, 2);  // creates a glue node at 10.0.0.0/14
  EXPECT_NE(t.find(ip("10.1.0.0"), 16), nullptr);
  EXPECT_EQ(t.find(ip("10.1.0.0"), 15), nullptr);
  EXPECT_EQ(t.find(ip("10.1.0.0"), 17), nullptr);
  EXPECT_EQ(t.find(ip("10.0.0.0"), 14), nullptr);  // glue, no value
  t.insert(ip("10.0.0.0"), 14, 3);                 // now it gets one
  ASSERT_NE(t.find(ip("10.0.0.0"), 14), nullptr);
  EXPECT_EQ(*t.find(ip("10.0.0.0"), 14), 3);
  EXPECT_EQ(find_value(t, "10.3.0.1"), 3);
}

TEST(PrefixTrie, MappedAddressesAreNotFolded) {
  PrefixTrie<int> t;
  t.insert(ip("192.0.2.0"), 24, 1);
  EXPECT_EQ(find_value(t, "::ffff:192.0.2.1"), -1);
  EXPECT_EQ(*t.lookup(ip("::ffff:192.0.2.1").unmapped()), 1);
}

TEST(PrefixTrie, ForEachListsEverythingInAddressOrder) {
  PrefixTrie<int> t = trie_of(
      {{"2001:db8::", 32, 5}, {"10.1.0.0", 16, 2}, {"10.0.0.0", 8, 1}, {"192.168.0.0", 16, 3}, {"::", 0, 4}});
  std::vector<std::string> seen;
  t.for_each([&](const IpAddr& a, int len, const int& v) {
    seen.push_back(a.to_string() + "/" + std::to_string(len) + "=" + std::to_string(v));
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"10.0.0.0/8=1", "10.1.0.0/16=2", "192.168.0.0/16=3",
                                             "::/0=4", "2001:db8::/32=5"}));
}

TEST(PrefixTrie, ClearEmptiesBothFamilies) {
  PrefixTrie<int> t;
  t.insert(ip("10.0.0.0"), 8, 1);
  t.insert(ip("fd00::"), 8, 2);
  t.clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.lookup(ip("10.0.0.1")), nullptr);
  EXPECT_EQ(t.lookup(ip("fd00::1")), nullptr);
  t.insert(ip("10.0.0.0"), 8, 3);
  EXPECT_EQ(find_value(t, "10.0.0.1"), 3);
}

// --- randomized checks against a linear scan ---------------------------------

struct Entry {
  IpAddr addr;
  int len;
  int value;
};

// Prefixes clustered under a few top bytes so that they overlap a lot.
std::vector<Entry> random_entries(std::mt19937& rng, int family, size_t n) {
  const int bits = family == 4 ? 32 : 128;
  const uint8_t tops[] = {10, 11, 172, 192};
  std::vector<Entry> out;
  std::uniform_int_distribution<int> byte(0, 255), top(0, 3), len(0, bits);
  for (size_t i = 0; i < n; ++i) {
    IpAddr a;
    a.family = uint8_t(family);
    for (int b = 0; b < bits / 8; ++b) a.bytes[b] = uint8_t(byte(rng));
    a.bytes[0] = tops[top(rng)];
    if (byte(rng) < 128) a.bytes[1] &= 0x0f;  // more sharing in the second byte too
    const int l = len(rng);
    out.push_back(Entry{clear_host_bits(a, l), l, int(i)});
  }
  return out;
}

// The entry a correct trie must return: longest match, latest insert of a prefix wins.
const Entry* brute_force(const std::vector<Entry>& entries, const IpAddr& a) {
  const Entry* best = nullptr;
  for (const Entry& e : entries) {
    if (e.addr.family != a.family || !bits_match(a, e.addr, e.len)) continue;
    // Equal length and both matching means the same prefix: the later insert wins.
    if (best == nullptr || e.len >= best->len) best = &e;
  }
  return best;
}

// Addresses inside random entries (host bits randomized) plus fully random ones.
std::vector<IpAddr> probe_addresses(std::mt19937& rng, const std::vector<Entry>& entries, int family,
                                    size_t n) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<size_t> pick(0, entries.size() - 1);
  std::vector<IpAddr> out;
  for (size_t i = 0; i < n; ++i) {
    IpAddr a;
    a.family = uint8_t(family);
    for (int b = 0; b < a.bit_length() / 8; ++b) a.bytes[b] = uint8_t(byte(rng));
    if (i % 4 != 0) {
      const Entry& e = entries[pick(rng)];
      for (int bit = 0; bit < e.len; ++bit) {
        const uint8_t m = uint8_t(0x80 >> (bit & 7));
        a.bytes[bit >> 3] = uint8_t(e.addr.bit(bit) ? (a.bytes[bit >> 3] | m) : (a.bytes[bit >> 3] & ~m));
      }
    }
    out.push_back(a);
  }
  return out;
}

std::vector<const Entry*> brute_force_all(const std::vector<Entry>& entries, const std::vector<IpAddr>& probes) {
  std::vector<const Entry*> out;
  for (const IpAddr& a : probes) out.push_back(brute_force(entries, a));
  return out;
}

void expect_same_as_brute_force(const PrefixTrie<int>& t, const std::vector<const Entry*>& expected,
                                const std::vector<IpAddr>& probes, const char* stage) {
  size_t matched = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    const IpAddr& a = probes[i];
    const Entry* want = expected[i];
    int len = -1;
    const int* got = t.lookup_with_len(a, &len);
    if (want == nullptr) {
      ASSERT_EQ(got, nullptr) << stage << " " << a.to_string();
      continue;
    }
    ++matched;
    ASSERT_NE(got, nullptr) << stage << " " << a.to_string();
    ASSERT_EQ(*got, want->value) << stage << " " << a.to_string();
    ASSERT_EQ(len, want->len) << stage << " " << a.to_string();
  }
  EXPECT_GT(matched, probes.size() / 2) << stage;  // the probes really exercised matches
}

void check_against_brute_force(int family, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Entry> entries = random_entries(rng, family, 10000);
  PrefixTrie<int> t;
  for (const Entry& e : entries) ASSERT_TRUE(t.insert(e.addr, e.len, e.value));

  std::map<std::pair<std::array<uint8_t, 16>, int>, int> distinct;
  for (const Entry& e : entries) distinct[{e.addr.bytes, e.len}] = e.value;
  EXPECT_EQ(t.size(), distinct.size());

  const std::vector<IpAddr> probes = probe_addresses(rng, entries, family, 4000);
  std::vector<const Entry*> expected = brute_force_all(entries, probes);
  expect_same_as_brute_force(t, expected, probes, "as inserted");
  const size_t plain_bytes = t.memory_bytes();
  t.optimize();  // builds the jump tables
  EXPECT_NE(t.memory_bytes(), plain_bytes);
  expect_same_as_brute_force(t, expected, probes, "optimized");

  // Inserting after optimize() must not use stale jump tables.
  std::vector<Entry> more = random_entries(rng, family, 1000);
  entries.reserve(entries.size() + more.size());
  for (Entry& e : more) {
    e.value += 100000;
    t.insert(e.addr, e.len, e.value);
    entries.push_back(e);
    distinct[{e.addr.bytes, e.len}] = e.value;
  }
  expected = brute_force_all(entries, probes);
  expect_same_as_brute_force(t, expected, probes, "inserted after optimize");
  t.optimize();
  expect_same_as_brute_force(t, expected, probes, "optimized again");

  // Every stored prefix is enumerated once, with its final value.
  size_t enumerated = 0;
  t.for_each([&](const IpAddr& a, int len, const int& v) {
    ++enumerated;
    auto it = distinct.find({a.bytes, len});
    ASSERT_NE(it, distinct.end()) << a.to_string() << "/" << len;
    EXPECT_EQ(it->second, v);
  });
  EXPECT_EQ(enumerated, distinct.size());
}

TEST(PrefixTrie, RandomIPv4MatchesLinearScan) { check_against_brute_force(4, 1); }
TEST(PrefixTrie, RandomIPv6MatchesLinearScan) { check_against_brute_force(6, 2); }

TEST(PrefixTrie, InsertOrderDoesNotMatter) {
  std::mt19937 rng(3);
  std::vector<Entry> entries = random_entries(rng, 4, 3000);
  // Unique prefixes only, so the "last insert wins" rule does not depend on order.
  std::map<std::pair<std::array<uint8_t, 16>, int>, Entry> unique;
  for (const Entry& e : entries) unique.emplace(std::make_pair(e.addr.bytes, e.len), e);
  std::vector<Entry> forward;
  for (auto& kv : unique) forward.push_back(kv.second);
  std::vector<Entry> shuffled = forward;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  PrefixTrie<int> a, b;
  for (const Entry& e : forward) a.insert(e.addr, e.len, e.value);
  for (const Entry& e : shuffled) b.insert(e.addr, e.len, e.value);
  for (const IpAddr& addr : probe_addresses(rng, forward, 4, 3000)) {
    const int* va = a.lookup(addr);
    const int* vb = b.lookup(addr);
    ASSERT_EQ(va == nullptr, vb == nullptr) << addr.to_string();
    if (va) {
      EXPECT_EQ(*va, *vb) << addr.to_string();
    }
  }
}

// --- for_each_region ---------------------------------------------------------

uint64_t v4_value(const IpAddr& a) {
  return (uint64_t(a.bytes[0]) << 24) | (a.bytes[1] << 16) | (a.bytes[2] << 8) | a.bytes[3];
}

IpAddr v4_from(uint64_t v) {
  const uint8_t b[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
  return IpAddr::v4(b);
}

TEST(PrefixTrie, RegionsPartitionTheAddressSpace) {
  std::mt19937 rng(4);
  std::vector<Entry> entries = random_entries(rng, 4, 300);
  PrefixTrie<int> t;
  for (const Entry& e : entries) t.insert(e.addr, e.len, e.value);

  uint64_t next = 0;  // regions must tile 0..2^32-1 in order
  size_t regions = 0;
  t.for_each_region(4, [](const int*) { return true; },
                    [&](const IpAddr& a, int len, const int* v) {
                      ++regions;
                      const uint64_t start = v4_value(a);
                      const uint64_t size = uint64_t(1) << (32 - len);
                      ASSERT_EQ(start, next) << a.to_string() << "/" << len;
                      ASSERT_EQ(start % size, 0u) << "unaligned " << a.to_string() << "/" << len;
                      // Uniform: first, last and a middle address all look up to v.
                      for (uint64_t probe : {start, start + size / 2, start + size - 1}) {
                        const int* got = t.lookup(v4_from(probe));
                        ASSERT_EQ(got == nullptr, v == nullptr) << v4_from(probe).to_string();
                        if (got) {
                          EXPECT_EQ(*got, *v) << v4_from(probe).to_string();
                        }
                      }
                      next = start + size;
                    });
  EXPECT_EQ(next, uint64_t(1) << 32);
  EXPECT_GT(regions, entries.size() / 2);
}

TEST(PrefixTrie, RegionsOfOneValueCutOutMoreSpecifics) {
  PrefixTrie<int> t;
  t.insert(ip("10.0.0.0"), 8, 1);
  t.insert(ip("10.0.0.0"), 10, 2);   // a hole at the start of the /8
  t.insert(ip("10.128.0.0"), 9, 1);  // same value nested: no hole
  t.insert(ip("172.16.0.0"), 12, 1);
  t.insert(ip("fd00::"), 8, 1);
  uint64_t covered = 0;
  std::vector<std::string> got;
  t.for_each_region(4, [](const int* v) { return v && *v == 1; },
                    [&](const IpAddr& a, int len, const int* v) {
                      got.push_back(a.to_string() + "/" + std::to_string(len));
                      covered += uint64_t(1) << (32 - len);
                    });
  // 10.0.0.0/8 minus 10.0.0.0/10 is 10.64.0.0/10 + 10.128.0.0/9.
  EXPECT_EQ(got, (std::vector<std::string>{"10.64.0.0/10", "10.128.0.0/9", "172.16.0.0/12"}));
  EXPECT_EQ(covered, (uint64_t(1) << 24) - (uint64_t(1) << 22) + (uint64_t(1) << 20));
  size_t v6 = 0;
  t.for_each_region(6, [](const int* v) { return v && *v == 1; },
                    [&](const IpAddr& a, int len, const int*) {
                      ++v6;
                      EXPECT_EQ(a.to_string() + "/" + std::to_string(len), "fd00::/8");
                    });
  EXPECT_EQ(v6, 1u);
}

}  // namespace
}  // namespace tcpscope
