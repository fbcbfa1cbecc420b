#include "policy/cc_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include <sstream>

#include "cli/check_config_command.h"
#include "enrich/asn_db.h"
#include "enrich/peer_classifier.h"

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
    EXPECT_EQ(p->class_names[e->class_id], cls) << a.to_string();

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

std::string describe(const CcMatch& m) {
  std::string s;
  if (m.peer_class) s += "class=" + *m.peer_class + " ";
  for (uint32_t a : m.asns) s += "asn=" + std::to_string(a) + " ";
  for (const auto& p : m.prefixes) s += "prefix=" + p.to_string() + " ";
  for (uint16_t l : m.lports) s += "lport=" + std::to_string(l) + " ";
  for (const auto& v : m.services) s += "service=" + v + " ";
  return s;
}

// The kernel's matcher (each trie entry's mask of the rules whose class, ASN
// and prefix conditions hold, less the service rules the socket's cgroups do
// not have; set bits lowest first; local ports) against the
// reference (every rule in order, every condition) and against a decision
// from first principles (classifier, ASN database, prefix containment), for
// random policies of up to 64 rules and random addresses in and around their
// prefixes.
TEST(CcPolicy, RulesMaskAgreesWithTheReferenceMatcher) {
  auto db = asn_db_from(
      "198.51.0.0\t16\t64501\n198.51.100.0\t24\t64502\n203.0.113.0\t24\t64500\n"
      "10.30.0.0\t16\t64501\n10.30.7.0\t24\t64504\n2001:db8::\t32\t64501\n2001:db8:1::\t48\t64503\n"
      "fd00:7c5::\t32\t64505\n");
  const std::vector<uint32_t> asns = {64500, 64501, 64502, 64503, 64504, 64505, 64999};
  const std::vector<const char*> pool = {"198.51.0.0/16", "198.51.100.0/24", "198.51.100.0/26", "198.51.100.128/25",
                                         "203.0.113.0/24", "203.0.113.64/27", "10.0.0.0/8",     "10.20.0.0/16",
                                         "10.30.7.0/24",   "10.30.7.9/32",    "0.0.0.0/0",      "2001:db8::/32",
                                         "2001:db8:1::/48", "2001:db8:1::/64", "fd00::/8",      "fd00:7c5::/32",
                                         "::/0",           "fd00:7c5:1::2/128"};
  const char* bases[] = {"198.51.0.0", "198.51.100.0", "203.0.113.0", "10.20.0.0", "10.30.7.0",
                         "2001:db8::", "2001:db8:1::", "fd00:7c5::",  "192.0.2.0", "fd00:7c5:1::"};
  const std::vector<std::string> ccs = {"bbr", "cubic", "reno"};
  const std::vector<std::string> services = {"a.service", "b.service", "media/streamer-0", "db"};
  std::mt19937 rng(20261121);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  auto contains = [](const Prefix& pf, const IpAddr& a) {
    IpAddr u = a.unmapped();
    bool inside = pf.addr.family == u.family;
    for (int k = 0; inside && k < pf.len; ++k) inside = u.bit(k) == pf.addr.bit(k);
    return inside;
  };
  long compared = 0, matched = 0, matched_by_service = 0;
  std::vector<int> hit_rule(64, 0);
  for (int policy_no = 0; policy_no < 60; ++policy_no) {
    Config c = base_config();
    c.peer_classes.push_back({"wireless", {P("198.51.100.128/25")}, {64501}, 0});
    const std::vector<std::string> classes = {"intra-pop", "pop-to-pop", "origin", "wireless", "client"};
    const size_t n_rules = 1 + pick(64);
    for (size_t i = 0; i < n_rules; ++i) {
      CcMatch m;
      // Few conditions each, so that rules often overlap and order matters.
      if (pick(3) == 0) m.peer_class = classes[pick(classes.size())];
      if (pick(4) == 0)
        for (size_t k = 0, n = 1 + pick(2); k < n; ++k) m.asns.push_back(asns[pick(asns.size())]);
      if (pick(3) == 0)
        for (size_t k = 0, n = 1 + pick(3); k < n; ++k) m.prefixes.push_back(P(pool[pick(pool.size())]));
      if (pick(3) == 0)
        for (size_t k = 0, n = 1 + pick(4); k < n; ++k) m.lports.push_back(static_cast<uint16_t>(80 + pick(6)));
      if (pick(4) == 0)
        for (size_t k = 0, n = 1 + pick(2); k < n; ++k) m.services.push_back(services[pick(services.size())]);
      c.cc_policy.rules.push_back(rule("r" + std::to_string(i), m, ccs[pick(ccs.size())]));
    }
    std::string err;
    auto p = compile_policy(c, db.get(), &err);
    ASSERT_TRUE(p) << err;
    PeerClassifier classifier(c.peer_classes, c.default_peer_class);
    for (int n = 0; n < 400; ++n) {
      IpAddr a = A(bases[pick(10)]);
      const int host_bits = a.family == 4 ? 12 : 20;
      for (int b = 0; b < host_bits; ++b)
        if (rng() & 1) {
          int bit = a.bit_length() - 1 - b;
          a.bytes[bit / 8] ^= static_cast<uint8_t>(0x80 >> (bit % 8));
        }
      const uint16_t lport = static_cast<uint16_t>(80 + pick(7));
      // The services of the socket's cgroup and its ancestors: none, one
      // (some no rule names), or a service nested in another's cgroup.
      std::vector<std::string> owners;
      for (size_t k = 0, n = pick(3); k < n; ++k) owners.push_back(pick(5) ? services[pick(services.size())] : "x.service");
      const int kernel = match_rule_masked(*p, a, lport, owners);
      ASSERT_EQ(kernel, match_rule(*p, a, lport, owners)) << a.to_string() << " port " << lport << " policy " << policy_no;

      const uint32_t asn = db->lookup_asn(a);
      const std::string& cls = classifier.classify(a, asn);
      int want = -1;
      for (size_t i = 0; i < n_rules && want < 0; ++i) {
        const CcMatch& m = c.cc_policy.rules[i].match;
        if (m.peer_class && *m.peer_class != cls) continue;
        if (!m.asns.empty() && std::find(m.asns.begin(), m.asns.end(), asn) == m.asns.end()) continue;
        if (!m.prefixes.empty() &&
            std::none_of(m.prefixes.begin(), m.prefixes.end(), [&](const Prefix& pf) { return contains(pf, a); }))
          continue;
        if (!m.lports.empty() && std::find(m.lports.begin(), m.lports.end(), lport) == m.lports.end()) continue;
        if (!m.services.empty() && std::none_of(owners.begin(), owners.end(), [&](const std::string& o) {
              return std::find(m.services.begin(), m.services.end(), o) != m.services.end();
            }))
          continue;
        want = static_cast<int>(i);
      }
      ASSERT_EQ(kernel, want) << a.to_string() << " asn " << asn << " class " << cls << " port " << lport
                              << " entry " << lookup_remote(*p, a)->key.prefixlen << " class "
                              << p->class_names[lookup_remote(*p, a)->class_id] << " rule "
                              << (kernel >= 0 ? describe(c.cc_policy.rules[kernel].match) : "")
                              << " / " << (want >= 0 ? describe(c.cc_policy.rules[want].match) : "");
      ++compared;
      if (kernel >= 0) ++matched, ++hit_rule[kernel];
      if (kernel >= 0 && !c.cc_policy.rules[kernel].match.services.empty()) ++matched_by_service;
    }
  }
  EXPECT_EQ(compared, 60 * 400);
  // Not a vacuous agreement: most lookups match some rule, and not always the first.
  EXPECT_GT(matched, compared / 2);
  EXPECT_GT(std::count_if(hit_rule.begin() + 1, hit_rule.end(), [](int h) { return h > 0; }), 10);
  EXPECT_GT(matched_by_service, compared / 50);
}

TEST(CcPolicy, ServiceRulesAreLeftToTheKernelWithTheirServicesMasks) {
  Config c = base_config();
  CcMatch video;
  video.services = {"video.service", "media/streamer-0"};
  CcMatch video_p2p = video;
  video_p2p.peer_class = "pop-to-pop";
  CcMatch media;
  media.services = {"media/streamer-0"};
  c.cc_policy.rules = {rule("video-p2p", video_p2p, "reno"), rule("video", video, "cubic"),
                       rule("all", CcMatch{}, "bbr"), rule("media", media, "htcp")};
  std::string err;
  auto p = compile_policy(c, nullptr, &err);
  ASSERT_TRUE(p) << err;
  EXPECT_EQ(p->service_rules, 0b1011u);
  EXPECT_EQ(p->rules_naming("video.service"), 0b0011u);
  EXPECT_EQ(p->rules_naming("media/streamer-0"), 0b1011u);
  EXPECT_EQ(p->rules_naming("other.service"), 0u);
  // The trie's masks hold the service rules whose address conditions hold.
  EXPECT_EQ(lookup_remote(*p, A("10.1.2.3"))->info.rules, 0b1111u);
  EXPECT_EQ(p->default_rules, 0b1110u);
  EXPECT_EQ(match_rule_masked(*p, A("10.1.2.3"), 80, {"video.service"}), 0);
  EXPECT_EQ(match_rule_masked(*p, A("192.0.2.1"), 80, {"video.service"}), 1);
  EXPECT_EQ(match_rule_masked(*p, A("192.0.2.1"), 80, {"other.service"}), 2);
  EXPECT_EQ(match_rule_masked(*p, A("192.0.2.1"), 80, {}), 2);
  // A cgroup of one service inside another's: either's rules hold.
  EXPECT_EQ(match_rule_masked(*p, A("10.1.2.3"), 80, {"other.service", "media/streamer-0"}), 0);
}

TEST(CcPolicy, MaskHoldsOnlyRulesWhoseAddressConditionsHold) {
  Config c = base_config();
  CcMatch by_class;
  by_class.peer_class = "pop-to-pop";
  CcMatch by_port;
  by_port.lports = {443};
  CcMatch by_prefix;
  by_prefix.prefixes = {P("10.1.0.0/16")};
  c.cc_policy.rules = {rule("p2p", by_class, "cubic"), rule("https", by_port, "bbr"), rule("ten-one", by_prefix, "reno")};
  std::string err;
  auto p = compile_policy(c, nullptr, &err);
  ASSERT_TRUE(p) << err;
  EXPECT_EQ(lookup_remote(*p, A("10.1.2.3"))->info.rules, 0b111u);
  EXPECT_EQ(lookup_remote(*p, A("10.2.2.3"))->info.rules, 0b011u);
  EXPECT_EQ(lookup_remote(*p, A("192.0.2.1"))->info.rules, 0b010u);  // client: the port rule only
  EXPECT_EQ(p->default_rules, 0b010u);
  EXPECT_EQ(match_rule_masked(*p, A("192.0.2.1"), 443), 1);
  EXPECT_EQ(match_rule_masked(*p, A("192.0.2.1"), 80), -1);
  EXPECT_EQ(match_rule_masked(*p, A("10.1.2.3"), 80), 0);
}

TEST(CcPolicy, CheckConfigWarnsAboutAlgorithmsOnlyAvailableAsModules) {
  char path[] = "/tmp/tcpscope-ccpolicy-cfg-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  std::ofstream(path) << "cc_policy:\n  rules:\n"
                         "    - name: lossy\n      match: { peer_class: client }\n"
                         "      experiment: { name: e, arms: { htcp: 50, bbr: 50 } }\n"
                         "    - name: other\n      match: { lports: [80] }\n      cc: htcp\n";
  const std::vector<std::string> available = {"reno", "bbr", "cubic", "htcp"};
  std::ostringstream out, err;
  EXPECT_EQ(check_config_command(path, available, {"reno", "bbr", "cubic"}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find(": ok"), std::string::npos);
  const std::string w = err.str();
  EXPECT_NE(w.find("warning: congestion control \"htcp\" (rule 'lossy') is not loaded, only available as module "
                   "tcp_htcp"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("ProtectKernelModules=yes"), std::string::npos) << w;
  EXPECT_EQ(std::count(w.begin(), w.end(), '\n'), 1) << w;  // once per algorithm, bbr is loaded
  std::ostringstream out2, err2;
  EXPECT_EQ(check_config_command(path, available, available, out2, err2), 0);
  EXPECT_EQ(err2.str(), "");
  std::remove(path);
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
