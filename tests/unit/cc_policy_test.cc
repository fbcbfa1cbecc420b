#include "cc_policy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "asn_db.h"
#include "peer_classifier.h"

namespace tcpscope {
namespace {

Prefix P(const char* s) { return *Prefix::parse(s); }
IpAddr A(const char* s) { return *IpAddr::parse(s); }

Config base_config() {
  Config c;
  c.peer_classes = {
      {"intra-pop", {P("10.20.0.0/16")}, {}, 0},
      {"pop-to-pop", {P("10.0.0.0/8"), P("fd00::/8")}, {}, 0},
      {"origin", {}, {64500}, 0},
  };
  c.default_peer_class = "client";
  return c;
}

CcRule rule(const std::string& name, CcMatch m, const std::string& cc) {
  CcRule r;
  r.name = name;
  r.match = std::move(m);
  r.cc = cc;
  return r;
}

std::shared_ptr<const AsnDatabase> asn_db_from(const std::string& text) {
  char path[] = "/tmp/tcpscope-ccpolicy-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  std::ofstream(path) << text;
  AsnConfig cfg;
  cfg.prefix_file = path;
  std::string err;
  auto db = AsnDatabase::load(cfg, &err);
  EXPECT_TRUE(db) << err;
  std::remove(path);
  return db;
}

TEST(CcPolicy, NoRulesCompilesToNothingForTheKernel) {
  std::string err;
  auto p = compile_policy(base_config(), nullptr, &err);
  ASSERT_TRUE(p) << err;
  EXPECT_TRUE(p->rules.empty());
  EXPECT_TRUE(p->remote.empty());
}

TEST(CcPolicy, FirstMatchWinsOnClassPrefixAndPort) {
  Config c = base_config();
  CcMatch by_class;
  by_class.peer_class = "pop-to-pop";
  CcMatch by_prefix;
  by_prefix.prefixes = {P("203.0.113.0/24")};
  CcMatch by_port;
  by_port.peer_class = "client";
  by_port.lports = {443};
  c.cc_policy.rules = {rule("p2p-cubic", by_class, "cubic"), rule("doc-net", by_prefix, "reno"),
                       rule("https-bbr", by_port, "bbr")};
  std::string err;
  auto p = compile_policy(c, nullptr, &err);
  ASSERT_TRUE(p) << err;
  EXPECT_EQ(match_rule(*p, A("10.1.2.3"), 80), 0);     // pop-to-pop
  EXPECT_EQ(match_rule(*p, A("10.20.2.3"), 443), -1);  // intra-pop: longer prefix than 10/8
  EXPECT_EQ(match_rule(*p, A("fd00::5"), 443), 0);
  EXPECT_EQ(match_rule(*p, A("203.0.113.7"), 443), 1);  // before https-bbr
  EXPECT_EQ(match_rule(*p, A("198.51.100.1"), 443), 2);
  EXPECT_EQ(match_rule(*p, A("198.51.100.1"), 80), -1);
  EXPECT_EQ(match_rule(*p, A("::ffff:203.0.113.7"), 443), 1);  // mapped peers count as IPv4
  EXPECT_EQ(p->congestion_controls(), (std::vector<std::string>{"bbr", "cubic", "reno"}));
}

TEST(CcPolicy, ExperimentArmsAreCumulativeWeights) {
  Config c = base_config();
  CcRule r;
  r.name = "ab";
  r.experiment = ExperimentSpec{"bbr-vs-cubic", {{"bbr", 30}, {"cubic", 70}}};
  c.cc_policy.rules = {r};
  std::string err;
  auto p = compile_policy(c, nullptr, &err);
  ASSERT_TRUE(p) << err;
  const auto& b = p->rules[0].bpf;
  EXPECT_EQ(b.n_arms, 2u);
  EXPECT_EQ(b.cum_weight[0], 30u);
  EXPECT_EQ(b.cum_weight[1], 100u);
  EXPECT_STREQ(b.cc[1], "cubic");
  EXPECT_EQ(p->rules[0].experiment, "bbr-vs-cubic");
}

TEST(CcPolicy, AsnRulesNeedAsnData) {
  Config c = base_config();
  CcMatch m;
  m.asns = {64501};
  c.cc_policy.rules = {rule("wireless", m, "bbr")};
  std::string err;
  EXPECT_FALSE(compile_policy(c, nullptr, &err));
  EXPECT_NE(err.find("no ASN data"), std::string::npos) << err;
}

TEST(CcPolicy, KernelViewAgreesWithTheClassifierAndAsnDatabase) {
  // Nested and overlapping prefixes of classes, ASNs and rules: for random
  // addresses, the compiled trie must give the class the daemon's classifier
  // gives and the rule an evaluation from first principles gives.
  auto db = asn_db_from(
      "198.51.0.0\t16\t64501\n198.51.100.0\t24\t64502\n203.0.113.0\t24\t64500\n"
      "10.30.0.0\t16\t64501\n2001:db8::\t32\t64501\n2001:db8:1::\t48\t64503\n");
  Config c = base_config();
  c.peer_classes.push_back({"wireless", {P("198.51.100.128/25")}, {64501}, 0});
  CcMatch wireless;
  wireless.asns = {64501, 64502};
  wireless.peer_class = "client";
  CcMatch origin;
  origin.peer_class = "origin";
  CcMatch doc;
  doc.prefixes = {P("198.51.100.0/26"), P("2001:db8:1::/64")};
  c.cc_policy.rules = {rule("wireless-bbr", wireless, "bbr"), rule("origin-cubic", origin, "cubic"),
                       rule("doc", doc, "reno")};
  std::string err;
  auto p = compile_policy(c, db.get(), &err);
  ASSERT_TRUE(p) << err;
  PeerClassifier classifier(c.peer_classes, c.default_peer_class);

  std::mt19937 rng(7);
  const char* bases[] = {"198.51.0.0", "198.51.100.0", "203.0.113.0", "10.20.0.0", "10.30.0.0", "2001:db8::",
                         "2001:db8:1::", "fd00::"};
  int checked = 0;
  for (int i = 0; i < 5000; ++i) {
    IpAddr a = A(bases[rng() % 8]);
    int host_bits = a.family == 4 ? 16 : 80;
    for (int b = 0; b < host_bits; ++b)
      if (rng() & 1) {
        int bit = a.bit_length() - 1 - b;
        a.bytes[bit / 8] ^= static_cast<uint8_t>(0x80 >> (bit % 8));
      }
    uint32_t asn = db->lookup_asn(a);
    const std::string& cls = classifier.classify(a, asn);
    const RemoteEntry* e = lookup_remote(*p, a);
    ASSERT_TRUE(e);
    EXPECT_EQ(p->class_names[e->info.class_id], cls) << a.to_string();

    int want = -1;
    bool in_doc = false;
    for (const auto& pf : doc.prefixes) {
      bool inside = pf.addr.family == a.family;
      for (int k = 0; inside && k < pf.len; ++k) inside = a.bit(k) == pf.addr.bit(k);
      in_doc |= inside;
    }
    if (cls == "client" && (asn == 64501 || asn == 64502))
      want = 0;
    else if (cls == "origin")
      want = 1;
    else if (in_doc)
      want = 2;
    EXPECT_EQ(match_rule(*p, a, 80), want) << a.to_string() << " asn " << asn << " class " << cls;
    ++checked;
  }
  EXPECT_EQ(checked, 5000);
}

TEST(CcPolicy, RemoteKeyMapsIpv4IntoIpv6) {
  auto k = remote_key(A("192.0.2.1"), 24);
  EXPECT_EQ(k.prefixlen, 120u);
  EXPECT_EQ(k.addr[10], 0xff);
  EXPECT_EQ(k.addr[11], 0xff);
  EXPECT_EQ(k.addr[12], 192);
  EXPECT_EQ(k.addr[15], 0);  // host bits cleared
}

}  // namespace
}  // namespace tcpscope
