// The daemon's distributions (--server mode): bounded, windowed, and giving
// the same answers as the flow log on the same traffic, within the sketch's
// stated error.
#include "aggregate/flow_distributions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "pipeline/asn_ranking.h"
#include "pipeline/service_ranking.h"
#include "compare/compare.h"
#include "compare/daemon_source.h"
#include "compare/flow_log_source.h"
#include "record/flow_json.h"
#include "record/flow_record.h"

#include "compare_options.h"

namespace tcpscope {
namespace {

using Clock = FlowDistributions::Clock;

// Synthetic traffic with known effects: in AS 64501 BBR finishes 12 % faster
// and moves 12 % more; in 64502 nothing differs; 64503 has a handful of
// flows; some flows fail, some are partial.
std::vector<FlowRecord> traffic(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> size(11, 1.6), fct(std::log(30000), 0.8), rtt(std::log(25000), 0.4);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<FlowRecord> out;
  for (const auto& [asn, n] : std::vector<std::pair<uint32_t, int>>{{64501, 3000}, {64502, 2000}, {64503, 8}}) {
    for (const char* cc : {"cubic", "bbr"}) {
      const bool faster = asn == 64501 && std::string(cc) == "bbr";
      for (int i = 0; i < n; ++i) {
        FlowRecord f;
        f.cc = cc;
        f.enrichment.asn = asn;
        f.enrichment.peer_class = i % 3 ? "client" : "pop-to-pop";
        f.enrichment.arm = i % 2 ? std::optional<std::string>(cc) : std::nullopt;
        f.bytes_acked = static_cast<uint64_t>(size(rng)) + 1;
        f.bytes_received = 300;
        if (i % 10 == 0) f.bytes_acked += 3000000;  // large objects for throughput
        const double scale = faster ? 0.88 : 1.0;
        f.fct_us = static_cast<int64_t>(fct(rng) * scale * (f.bytes_acked > 3000000 ? 20 : 1)) + 1;
        f.srtt_us = static_cast<uint32_t>(rtt(rng) * scale);
        f.segs_out = 100 + i % 50;
        f.retrans_segs = u(rng) < (faster ? 0.2 : 0.3) ? 1 + i % 4 : 0;
        if (i % 97 == 0) f.outcome = Outcome::kReset;
        if (i % 101 == 0) f.partial = true;
        f.laddr = *IpAddr::parse("198.18.0.1");
        f.raddr = *IpAddr::parse("198.18.0.2");
        out.push_back(std::move(f));
      }
    }
  }
  return out;
}

// compare_options.h's opts() with the tails too: a sketch holds every rank
// within its accuracy.
CompareOptions tail_opts(Measure m, const std::string& by, const std::string& a, const std::string& b) {
  CompareOptions o = opts(m, by, a, b);
  o.quantiles = *parse_quantiles("50,90,99,99.9,99.99", nullptr);
  return o;
}

CompareResult via_flow_log(const std::vector<FlowRecord>& flows, const CompareOptions& o) {
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector c(o, a, b);
  for (const auto& f : flows) {
    std::string line;
    append_flow_json(f, &line);
    c.add_line(line);
  }
  return compare_groups(c.finish().groups, o);
}

CompareResult via_server(FlowDistributions* d, const CompareOptions& o) {
  // Through the HTTP handler's JSON, as `compare --server` sees it.
  std::string target = distributions_target(o);
  const std::string body = d->handle_query(target.substr(target.find('?') + 1));
  ServerScan scan;
  std::string error;
  EXPECT_TRUE(parse_distributions_response(body, &scan, &error)) << error;
  return compare_groups(std::move(scan.groups), o);
}

void expect_close(double exact, double sketched, double rel, const std::string& what) {
  if (exact == 0) {
    EXPECT_EQ(sketched, 0) << what;
    return;
  }
  EXPECT_LE(std::abs(sketched - exact) / std::abs(exact), rel + 1e-12) << what << ": exact " << exact << " sketched "
                                                                       << sketched;
}

// Every reported quantile: none in both (too few values) or within rel.
void expect_close(const ArmSummary& exact, const ArmSummary& sketched, double rel, const std::string& what) {
  ASSERT_EQ(exact.quantiles.size(), sketched.quantiles.size()) << what;
  for (size_t i = 0; i < exact.quantiles.size(); ++i) {
    const auto& x = exact.quantiles[i].value;
    const auto& y = sketched.quantiles[i].value;
    ASSERT_EQ(x.has_value(), y.has_value()) << what << " quantile " << i;
    if (x) expect_close(*x, *y, rel, what + " quantile " + std::to_string(i));
  }
}

// The same group from --flows and --server: counts exact, quantiles within the sketch's 1 %.
void expect_same_group(const GroupResult& exact, const GroupResult& sketched, const std::string& what) {
  ASSERT_EQ(exact.group, sketched.group) << what;
  ASSERT_EQ(exact.size_class, sketched.size_class) << what;
  EXPECT_EQ(exact.a.n, sketched.a.n) << what;
  EXPECT_EQ(exact.b.n, sketched.b.n) << what;
  expect_close(exact.a, sketched.a, 0.01, what + " A");
  expect_close(exact.b, sketched.b, 0.01, what + " B");
}

TEST(FlowDistributions, ServerModeAgreesWithFlowLogOnTheSameTraffic) {
  const auto flows = traffic(17);
  FlowDistributions d{FlowDistributionsOptions{}};
  for (const auto& f : flows) d.add(f, AsnLabel::kOwn);

  struct Case {
    Measure metric;
    std::string by, a, b;
  };
  const std::vector<Case> cases = {
      {Measure::kFct, "asn", "cc=cubic", "cc=bbr"},
      {Measure::kThroughput, "asn", "cc=cubic", "cc=bbr"},
      {Measure::kRtt, "peer_class", "cc=cubic,asn=64501", "cc=bbr,asn=64501"},
      {Measure::kRetrans, "asn", "arm=cubic", "arm=bbr"},
      {Measure::kFct, "size_class", "asn=64501", "asn=64502"},
  };
  uint64_t tails = 0;  // arms holding p99.9 (n >= 1000)
  for (const Case& c : cases) {
    const std::string what = std::string(to_string(c.metric)) + " by " + c.by + " " + c.a + " vs " + c.b;
    const CompareOptions o = tail_opts(c.metric, c.by, c.a, c.b);
    const CompareResult exact = via_flow_log(flows, o);
    const CompareResult sketched = via_server(&d, o);
    ASSERT_EQ(exact.groups.size(), sketched.groups.size()) << what;
    ASSERT_GT(exact.groups.size(), 0u) << what;
    EXPECT_EQ(sketched.relative_accuracy, 0.01);
    for (size_t i = 0; i < exact.groups.size(); ++i) {
      const GroupResult& e = exact.groups[i];
      const GroupResult& s = sketched.groups[i];
      const std::string g = what + " group " + e.group + " " + e.size_class.value_or("");
      expect_same_group(e, s, g);
      tails += e.a.quantiles[3].value.has_value() + e.b.quantiles[3].value.has_value();
      // 1 + diff is a ratio of two medians, each within 1 %: within a
      // factor 1.01 / 0.99 (2.02 %). The bootstrap draws the same ranks in
      // both modes (same seed, same n), so its bounds obey the same limit.
      ASSERT_EQ(e.change.diff.has_value(), s.change.diff.has_value()) << g;
      auto ratio_close = [&](const std::optional<double>& x, const std::optional<double>& y, const char* which) {
        ASSERT_EQ(x.has_value(), y.has_value()) << g << " " << which;
        if (!x || !std::isfinite(*x)) return;
        EXPECT_NEAR(*x, *y, 0.0203 * (1 + std::abs(*x))) << g << " " << which;
      };
      ratio_close(e.change.diff, s.change.diff, "diff");
      ratio_close(e.change.lo, s.change.lo, "ci lo");
      ratio_close(e.change.hi, s.change.hi, "ci hi");
      ASSERT_EQ(e.p_value.has_value(), s.p_value.has_value()) << g;
      if (e.p_value) {
        // Binning into 1 % buckets only adds ties; the p-values stay close.
        EXPECT_NEAR(*e.p_value, *s.p_value, 0.02 + 0.1 * *e.p_value) << g;
        EXPECT_NEAR(e.prob_b_better, s.prob_b_better, 0.005) << g;
      }
      // Clear-cut verdicts must agree.
      if (!e.q_value || *e.q_value < 0.001 || *e.q_value > 0.2) {
        EXPECT_EQ(e.verdict, s.verdict) << g;
      }
    }
  }
  EXPECT_GT(tails, 0u);
  // The known effects come out in both modes.
  const auto fct = via_server(&d, tail_opts(Measure::kFct, "asn", "cc=cubic", "cc=bbr"));
  for (const auto& g : fct.groups) {
    if (g.group == "64501" && g.size_class == std::string("lt_100k")) {
      EXPECT_EQ(g.verdict, Verdict::kBBetter);
    }
    if (g.group == "64503") {
      EXPECT_EQ(g.verdict, Verdict::kInsufficientData);
    }
  }
}

// The daemon labels services in its sketches as the series do (the top
// services.top_n by name, the unknown service "", the rest "other").
// `top_n` services of `names` keep their name; returns the flows, owned in turn.
std::vector<FlowRecord> add_owned_flows(FlowDistributions* d, const std::vector<std::string>& names, uint32_t top_n) {
  auto flows = traffic(23);
  std::vector<std::shared_ptr<const ServiceIdentity>> owners;
  for (const auto& name : names) owners.push_back(std::make_shared<ServiceIdentity>(name));
  ByteRankingOptions ro;
  ro.top_n = top_n;
  ro.warmup_recompute_flows = 0;
  ServiceRanking ranking(ro);
  for (size_t i = 0; i < flows.size(); ++i) {
    flows[i].enrichment.service = owners[i % owners.size()];
    d->add(flows[i], AsnLabel::kOwn, ranking.count(flows[i].enrichment, flows[i].bytes_acked).service);
  }
  return flows;
}

// Every service in the top-N: --by service and service= selections agree
// with the flow log, the unknown service included ("").
TEST(FlowDistributions, ServiceGroupsAgreeWithTheFlowLog) {
  const std::vector<std::string> names{"nginx.service", "prod/api-7", ""};
  FlowDistributions d{FlowDistributionsOptions{}};
  const auto flows = add_owned_flows(&d, names, 2);
  for (const auto& [by, a, b] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"service", "cc=cubic", "cc=bbr"}, {"asn", "service=prod/api-7,cc=cubic", "service=prod/api-7,cc=bbr"}}) {
    const CompareOptions o = opts(Measure::kFct, by, a, b);
    const CompareResult exact = via_flow_log(flows, o);
    const CompareResult sketched = via_server(&d, o);
    ASSERT_EQ(exact.groups.size(), sketched.groups.size()) << by << " " << a;
    std::set<std::string> groups;
    for (size_t i = 0; i < exact.groups.size(); ++i) {
      const GroupResult& e = exact.groups[i];
      expect_same_group(e, sketched.groups[i], by + " " + a + " group " + e.group + " " + e.size_class.value_or(""));
      groups.insert(e.group);
    }
    if (by == "service") {
      EXPECT_EQ(groups, (std::set<std::string>(names.begin(), names.end())));
    }
  }
}

// A service out of the top-N is "other" in the sketches, as in the series:
// its group is the flow log's for that service under the name "other", and
// it cannot be selected by name.
TEST(FlowDistributions, ServicesOutOfTheTopNAreOther) {
  FlowDistributions d{FlowDistributionsOptions{}};
  const auto flows = add_owned_flows(&d, {"nginx.service", "prod/api-7", ""}, 1);  // nginx.service came first
  const CompareOptions o = opts(Measure::kFct, "service", "cc=cubic", "cc=bbr");
  const CompareResult exact = via_flow_log(flows, o);
  const CompareResult sketched = via_server(&d, o);
  ASSERT_EQ(exact.groups.size(), sketched.groups.size());
  std::set<std::string> groups;
  for (size_t i = 0; i < exact.groups.size(); ++i) {
    GroupResult e = exact.groups[i];
    if (e.group == "prod/api-7") e.group = "other";
    expect_same_group(e, sketched.groups[i], "group " + e.group + " " + e.size_class.value_or(""));
    groups.insert(sketched.groups[i].group);
  }
  EXPECT_EQ(groups, (std::set<std::string>{"nginx.service", "other", ""}));
  const CompareOptions by_name = opts(Measure::kFct, "asn", "service=prod/api-7,cc=cubic", "service=prod/api-7,cc=bbr");
  EXPECT_FALSE(via_flow_log(flows, by_name).groups.empty());
  EXPECT_TRUE(via_server(&d, by_name).groups.empty());
}

TEST(FlowDistributions, QueriesOnlyTheFieldsItKeeps) {
  FlowDistributions d{FlowDistributionsOptions{}};
  const Measure fct = Measure::kFct;
  const SampleUnit flow = SampleUnit::kFlow;
  EXPECT_THROW(d.query(fct, flow, "comm", sel("cc=bbr"), sel("cc=cubic")), std::invalid_argument);
  EXPECT_THROW(d.query(fct, flow, "asn", sel("dir=active"), sel("cc=cubic")), std::invalid_argument);
  EXPECT_NO_THROW(d.query(fct, flow, "all", sel("arm=bbr"), sel("size_class=lt_100k")));
  EXPECT_THROW(d.handle_query("metric=fct&a=cc%3Dbbr"), std::invalid_argument);              // no b
  EXPECT_THROW(d.handle_query("metric=speed&a=cc%3Dbbr&b=cc%3Dcubic"), std::invalid_argument);  // bad metric
  EXPECT_THROW(d.handle_query("a=cc&b=cc%3Dcubic"), std::invalid_argument);                     // bad selection
  EXPECT_THROW(d.handle_query("a=cc%3Dbbr&b=cc%3Dcubic&window=1h"), std::invalid_argument);       // unknown parameter
  std::string many = "a=cc%3Dbbr&b=asn%3D1";
  for (size_t i = 2; i <= FlowDistributions::kMaxSelectionTerms; ++i) many += "%2Casn%3D" + std::to_string(i);
  EXPECT_NO_THROW(d.handle_query(many));
  EXPECT_THROW(d.handle_query(many + "%2Casn%3D99"), std::invalid_argument);  // one term too many
  try {
    d.handle_query("by=dir&a=cc%3Dbbr&b=cc%3Dcubic");
    FAIL() << "by=dir accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("peer_class, asn, service, cc, arm, size_class"), std::string::npos)
        << e.what();
  }
  const auto j = nlohmann::json::parse(d.handle_query("a=cc%3Dbbr&b=cc%3Dcubic"));
  EXPECT_EQ(j["format_version"], kDistributionsFormatVersion);
  EXPECT_EQ(j["metric"], "fct");
  EXPECT_EQ(j["value_unit"], "us");
  EXPECT_EQ(j["by"], "peer_class");
  EXPECT_TRUE(j["groups"].empty());
}

// What a daemon from before format versions (format 1) answered for one
// group of throughput: `j` without "format_version" and "value_unit", its
// sketches made of the values in bit/s.
nlohmann::json as_format_1(nlohmann::json j, const std::vector<double>& a_bytes_per_s,
                           const std::vector<double>& b_bytes_per_s) {
  j.erase("format_version");
  j.erase("value_unit");
  for (auto [arm, values] : {std::pair{"a", &a_bytes_per_s}, {"b", &b_bytes_per_s}}) {
    FlowSketch bits(FlowSketch::kDefaultRelativeAccuracy, 0, 1e3, 1e13);  // format 1's span, in bit/s
    for (double v : *values) bits.add(8 * v);
    j["groups"].at(0)[arm] = bits.to_json();
  }
  return j;
}

// Throughput is served in bytes/s (format 2); an older daemon's bit/s
// sketches are read in bytes/s, and a newer format is refused naming both.
TEST(FlowDistributions, ThroughputIsServedInBytesPerSecondAndOlderDaemonsAreConverted) {
  const auto flows = traffic(23);
  FlowDistributions d{FlowDistributionsOptions{}};
  for (const auto& f : flows) d.add(f, AsnLabel::kOwn);
  const auto current = nlohmann::json::parse(d.handle_query("metric=throughput&by=all&a=cc%3Dcubic&b=cc%3Dbbr"));
  EXPECT_EQ(current["format_version"], 2);
  EXPECT_EQ(current["value_unit"], "bytes/s");
  // The exact values, in bytes/s, from the records.
  std::vector<double> a, b;
  for (const auto& f : flows)
    if (const auto v = metric_value(Measure::kThroughput, metric_inputs(f), MetricOptions{}))
      (f.cc == "cubic" ? a : b).push_back(*v);
  ServerScan now, old;
  std::string error;
  ASSERT_TRUE(parse_distributions_response(current.dump(), &now, &error)) << error;
  EXPECT_EQ(now.format_version, 2);
  ASSERT_TRUE(parse_distributions_response(as_format_1(current, a, b).dump(), &old, &error)) << error;
  EXPECT_EQ(old.format_version, 1);
  ASSERT_EQ(now.groups.size(), 1u);
  ASSERT_EQ(old.groups.size(), 1u);
  for (auto [values, now_arm, old_arm, name] :
       {std::tuple{&a, &now.groups[0].a, &old.groups[0].a, "A"}, {&b, &now.groups[0].b, &old.groups[0].b, "B"}}) {
    ASSERT_EQ(now_arm->count(), values->size()) << name;
    ASSERT_EQ(old_arm->count(), values->size()) << name;
    std::sort(values->begin(), values->end());
    const double exact = (*values)[(values->size() - 1) / 2];
    expect_close(exact, now_arm->quantile(0.5), 0.01, std::string(name) + " median, format 2");
    expect_close(exact, old_arm->quantile(0.5), 0.01, std::string(name) + " median, format 1 (bit/s)");
  }

  nlohmann::json newer = current;
  newer["format_version"] = 3;
  ServerScan refused;
  EXPECT_FALSE(parse_distributions_response(newer.dump(), &refused, &error));
  EXPECT_NE(error.find("distributions format 3"), std::string::npos) << error;
  EXPECT_NE(error.find("formats 1 to 2"), std::string::npos) << error;
}

FlowRecord small_flow(uint32_t asn, const std::string& cc, int64_t fct_us) {
  FlowRecord f;
  f.enrichment.asn = asn;
  f.cc = cc;
  f.enrichment.peer_class = "client";
  f.bytes_acked = 1000;
  f.fct_us = fct_us;
  f.srtt_us = 1000;
  f.segs_out = 10;
  return f;
}

TEST(FlowDistributions, KeyTableIsBoundedAndOverflowFoldsIntoOther) {
  FlowDistributionsOptions o;
  o.max_keys = 16;  // reserve: 16 more, for top-N ASNs and "other" keys
  FlowDistributions d(o);
  // 16 ASNs fill the table. Non-top ASNs after that fold into their "other"
  // key (counted as folded); top-N ones use the reserve; once the reserve
  // is full too, a flow without a key is dropped and counted.
  for (uint32_t asn = 1; asn <= 16; ++asn) d.add(small_flow(asn, "cubic", 100), AsnLabel::kOther);
  for (uint32_t asn = 17; asn <= 40; ++asn) d.add(small_flow(asn, "cubic", 200), AsnLabel::kOther);
  EXPECT_EQ(d.stats().keys, 17u);  // 16 + the one "other" key
  EXPECT_EQ(d.stats().folded_flows, 24u);
  EXPECT_EQ(d.stats().dropped_flows, 0u);
  for (uint32_t asn = 41; asn <= 55; ++asn) d.add(small_flow(asn, "cubic", 300), AsnLabel::kOwn);
  EXPECT_EQ(d.stats().keys, 32u);
  EXPECT_EQ(d.stats().dropped_flows, 0u);
  d.add(small_flow(56, "cubic", 300), AsnLabel::kOwn);    // reserve full: folds into the existing "other" key
  d.add(small_flow(57, "bbr", 300), AsnLabel::kOther);  // no "other" key for bbr and no room: dropped
  EXPECT_EQ(d.stats().folded_flows, 25u);
  EXPECT_EQ(d.stats().dropped_flows, 1u);
  const auto r = d.query(Measure::kFct, SampleUnit::kFlow, "asn", sel("cc=cubic"), sel("cc=bbr"));
  EXPECT_EQ(r.folded, 25u);
  std::map<std::string, uint64_t> n;
  for (const auto& g : r.groups) n[g.group] += g.a.count();
  EXPECT_EQ(n["other"], 25u);
  EXPECT_EQ(n["5"], 1u);   // raw ASN keys, whatever the label was
  EXPECT_EQ(n["41"], 1u);
  EXPECT_EQ(n.count("20"), 0u);
  // The answer says so, and compare warns.
  const auto j = nlohmann::json::parse(d.handle_query("by=asn&a=cc%3Dcubic&b=cc%3Dbbr"));
  EXPECT_EQ(j["folded_flows"], 25);
}

// The same traffic in both modes with more ASNs than the Prometheus top-N:
// --server groups by the raw ASN like --flows, so the groups agree, and a
// selection of an ASN outside the top-N finds its flows.
TEST(FlowDistributions, AsnGroupsAgreeWithTheFlowLogBeyondTheTopN) {
  AsnRankingOptions ro;
  ro.top_n = 50;
  AsnRanking ranking(ro);
  std::mt19937_64 rng(60);
  std::lognormal_distribution<double> fct(std::log(30000), 0.6);
  std::vector<FlowRecord> flows;
  for (uint32_t k = 0; k < 60; ++k) {
    const uint32_t asn = 65000 + k;
    const int n = 200 - 2 * static_cast<int>(k);  // fewer bytes for the higher ASNs: 65050.. are "other"
    for (int i = 0; i < n; ++i) {
      FlowRecord f = small_flow(asn, i % 2 ? "bbr" : "cubic", static_cast<int64_t>(fct(rng)));
      f.bytes_acked = 50000;
      flows.push_back(f);
      ranking.add(f.enrichment.asn, f.bytes_acked + f.bytes_received);
    }
  }
  ranking.recompute();
  FlowDistributions d{FlowDistributionsOptions{}};
  size_t other_labels = 0;
  for (const auto& f : flows) {
    const AsnLabel label = ranking.label(f.enrichment.asn);
    other_labels += label == AsnLabel::kOther;
    d.add(f, label);
  }
  ASSERT_GT(other_labels, 0u) << "the test needs ASNs outside the top-N";
  EXPECT_EQ(ranking.label_text(65059), "other");

  const CompareOptions o = tail_opts(Measure::kFct, "asn", "cc=cubic", "cc=bbr");
  const CompareResult exact = via_flow_log(flows, o);
  const CompareResult sketched = via_server(&d, o);
  ASSERT_EQ(exact.groups.size(), 60u);
  ASSERT_EQ(sketched.groups.size(), exact.groups.size());
  for (size_t i = 0; i < exact.groups.size(); ++i) {
    EXPECT_EQ(exact.groups[i].group, sketched.groups[i].group);
    EXPECT_EQ(exact.groups[i].a.n, sketched.groups[i].a.n) << exact.groups[i].group;
    EXPECT_EQ(exact.groups[i].b.n, sketched.groups[i].b.n) << exact.groups[i].group;
    expect_close(exact.groups[i].a, sketched.groups[i].a, 0.01, exact.groups[i].group);
  }
  // A non-top ASN selected by number.
  const CompareOptions one = tail_opts(Measure::kFct, "all", "asn=65059", "asn=65058");
  const CompareResult e1 = via_flow_log(flows, one), s1 = via_server(&d, one);
  ASSERT_EQ(e1.groups.size(), 1u);
  ASSERT_EQ(s1.groups.size(), 1u);
  EXPECT_EQ(s1.groups[0].a.n, e1.groups[0].a.n);
  EXPECT_EQ(s1.groups[0].a.n, 82u);
  EXPECT_EQ(s1.groups[0].b.n, e1.groups[0].b.n);
  EXPECT_EQ(d.stats().folded_flows, 0u);
}

// One 2-hour keep-alive flow among 10,000 of ~30 ms must not move the
// median (the old 512-bucket sketch read 260 ms instead of 30 ms and turned
// "b better -9.9 %" into "a better +767 %").
TEST(FlowDistributions, OneLongFlowDoesNotMoveTheServerQuantilesOrVerdict) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> fct(std::log(30000), 0.8);
  std::vector<FlowRecord> flows;
  for (int i = 0; i < 10000; ++i) {
    const bool bbr = i % 2;
    FlowRecord f = small_flow(64501, bbr ? "bbr" : "cubic", static_cast<int64_t>(fct(rng) * (bbr ? 0.9 : 1.0)));
    f.bytes_acked = 20000;
    f.srtt_us = 20000;
    f.segs_out = 30;
    flows.push_back(f);
  }
  FlowRecord longest = flows[1];  // bbr
  longest.fct_us = 7200LL * 1000000;
  flows.push_back(longest);
  // The same in another key (another peer class): merged at query time.
  FlowRecord other_key = flows[3];
  other_key.enrichment.peer_class = "pop-to-pop";
  other_key.fct_us = 7100LL * 1000000;
  flows.push_back(other_key);

  FlowDistributions d{FlowDistributionsOptions{}};
  for (const auto& f : flows) d.add(f, AsnLabel::kOwn);
  const CompareOptions o = tail_opts(Measure::kFct, "asn", "cc=cubic", "cc=bbr");
  const CompareResult exact = via_flow_log(flows, o);
  const CompareResult sketched = via_server(&d, o);
  ASSERT_EQ(exact.groups.size(), 1u);
  ASSERT_EQ(sketched.groups.size(), 1u);
  const GroupResult& e = exact.groups[0];
  const GroupResult& s = sketched.groups[0];
  EXPECT_FALSE(s.sketch_collapsed);
  EXPECT_EQ(s.sketch_clamped, 0u);
  expect_close(e.a, s.a, 0.01, "outlier A");
  expect_close(e.b, s.b, 0.01, "outlier B");
  ASSERT_TRUE(e.change.diff && s.change.diff);
  EXPECT_NEAR(*s.change.diff, *e.change.diff, 0.0203 * (1 + std::abs(*e.change.diff)));
  EXPECT_EQ(e.verdict, Verdict::kBBetter);
  EXPECT_EQ(s.verdict, e.verdict);
  std::printf("one 2-hour flow: p50 B exact %.0f us, sketch %.0f us; diff exact %+.4f, sketch %+.4f; %s / %s\n",
              *e.b.quantiles[0].value, *s.b.quantiles[0].value, *e.change.diff, *s.change.diff, to_string(e.verdict), to_string(s.verdict));

  // A sketch that did collapse (a max_buckets below the span) is flagged in
  // the results and the output warns.
  FlowDistributionsOptions small;
  small.max_buckets = 256;
  FlowDistributions c(small);
  for (const auto& f : flows) c.add(f, AsnLabel::kOwn);
  const CompareResult collapsed = via_server(&c, o);
  ASSERT_EQ(collapsed.groups.size(), 1u);
  EXPECT_TRUE(collapsed.groups[0].sketch_collapsed);
  EXPECT_TRUE(compare_result_json(collapsed)["groups"][0]["sketch_collapsed"].get<bool>());
  EXPECT_NE(format_compare_table(collapsed).find("collapsed"), std::string::npos);
  EXPECT_EQ(format_compare_table(sketched).find("collapsed"), std::string::npos);
}

TEST(FlowDistributions, MemoryStaysWithinTheStatedBound) {
  FlowDistributionsOptions o;
  o.max_keys = 1024;  // + 256 reserve, x 3 sketches x (1153 buckets x 4 B + object): 17.6 MiB at most
  FlowDistributions d(o);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> exp10(1, 9);
  for (int i = 0; i < 200000; ++i) {
    FlowRecord f = small_flow(1 + static_cast<uint32_t>(i % 3000), i % 2 ? "bbr" : "cubic",
                              static_cast<int64_t>(std::pow(10.0, exp10(rng))));
    f.srtt_us = static_cast<uint32_t>(std::pow(10.0, exp10(rng) * 0.8));
    f.retrans_segs = i % 7;
    d.add(f, AsnLabel::kOwn);
  }
  const auto st = d.stats();
  EXPECT_LE(st.keys, 1024u + 256u);
  EXPECT_GT(st.dropped_flows, 0u);
  const size_t per_sketch = sizeof(FlowSketch) + FlowSketch(0.01, 0, 1, 1e10).max_buckets() * sizeof(uint32_t);
  EXPECT_LE(st.memory_bytes, (1024u + 256u) * (3 * per_sketch + 128));
  std::printf("distributions: %zu keys, %zu sketches, %.1f MiB, %llu flows dropped\n", st.keys, st.sketches,
              st.memory_bytes / 1048576.0, static_cast<unsigned long long>(st.dropped_flows));
}

TEST(FlowDistributions, WindowKeepsBetweenOneAndTwoWindowsOfFlows) {
  FlowDistributionsOptions o;
  o.window_s = 60;
  FlowDistributions d(o);
  const auto t0 = Clock::now();
  d.add_at(small_flow(1, "cubic", 100), AsnLabel::kOwn, t0);
  d.add_at(small_flow(1, "cubic", 200), AsnLabel::kOwn, t0 + std::chrono::seconds(61));  // rotates
  auto count = [&](Clock::time_point t) {
    const auto r = d.query_at(Measure::kFct, SampleUnit::kFlow, "all", sel("cc=cubic"), sel("cc=bbr"), t);
    return r.groups.empty() ? uint64_t{0} : r.groups[0].a.count();
  };
  EXPECT_EQ(count(t0 + std::chrono::seconds(62)), 2u);
  const auto r = d.query_at(Measure::kFct, SampleUnit::kFlow, "all", sel("cc=cubic"), sel("cc=bbr"),
                            t0 + std::chrono::seconds(62));
  EXPECT_NEAR(r.covers_s, 62, 1);
  // One more window: the first flow's generation is gone.
  EXPECT_EQ(count(t0 + std::chrono::seconds(122)), 1u);
  EXPECT_EQ(count(t0 + std::chrono::seconds(183)), 0u);
}

// A service's name lasts as long as a generation holds one of its keys.
TEST(FlowDistributions, ServiceNamesGoWithTheirGenerations) {
  FlowDistributionsOptions o;
  o.window_s = 60;
  FlowDistributions d(o);
  const auto t0 = Clock::now();
  auto owned = [](const std::string& name) {
    FlowRecord f = small_flow(1, "cubic", 100);
    f.enrichment.service = std::make_shared<ServiceIdentity>(name);
    return f;
  };
  const RankedService web{service_key("web.service"), RankedLabel::kOwn};
  const RankedService db{service_key("db.service"), RankedLabel::kOwn};
  d.add_at(owned("web.service"), AsnLabel::kOwn, t0, web);
  d.add_at(owned("web.service"), AsnLabel::kOwn, t0 + std::chrono::seconds(1), web);  // its key exists: no lookup
  d.add_at(owned("db.service"), AsnLabel::kOwn, t0 + std::chrono::seconds(61), db);  // rotates
  auto groups = [&](Clock::time_point t) {
    std::map<std::string, uint64_t> out;
    for (const auto& g : d.query_at(Measure::kFct, SampleUnit::kFlow, "service", sel("cc=cubic"), sel("cc=bbr"), t).groups)
      out[g.group] += g.a.count();
    return out;
  };
  EXPECT_EQ(groups(t0 + std::chrono::seconds(62)), (std::map<std::string, uint64_t>{{"db.service", 1}, {"web.service", 2}}));
  // web's generation is gone, db's is the older one now: web's name with it, db's kept.
  EXPECT_EQ(groups(t0 + std::chrono::seconds(122)), (std::map<std::string, uint64_t>{{"db.service", 1}}));
  d.add_at(owned("web.service"), AsnLabel::kOwn, t0 + std::chrono::seconds(123), web);  // a new key: named again
  EXPECT_EQ(groups(t0 + std::chrono::seconds(124)), (std::map<std::string, uint64_t>{{"db.service", 1}, {"web.service", 1}}));
}

TEST(FlowDistributions, NewSizeClassesResetTheSketches) {
  FlowDistributions d{FlowDistributionsOptions{}};
  d.add(small_flow(1, "cubic", 100), AsnLabel::kOwn);
  FlowDistributionsOptions same;
  EXPECT_FALSE(d.update_options(same));
  EXPECT_EQ(d.stats().keys, 1u);
  FlowDistributionsOptions other;
  other.size_classes_bytes = {50000, 500000};
  EXPECT_TRUE(d.update_options(other));
  EXPECT_EQ(d.stats().keys, 0u);
  d.add(small_flow(1, "cubic", 100), AsnLabel::kOwn);
  const auto r = d.query(Measure::kFct, SampleUnit::kFlow, "asn", sel("cc=cubic"), sel("cc=bbr"));
  ASSERT_EQ(r.groups.size(), 1u);
  EXPECT_EQ(r.groups[0].size_class, std::string("lt_50k"));
}

TEST(FlowDistributions, SkipsFlowsNoMetricCounts) {
  FlowDistributions d{FlowDistributionsOptions{}};
  FlowRecord refused = small_flow(1, "cubic", 100);
  refused.outcome = Outcome::kRefused;
  FlowRecord partial = small_flow(1, "cubic", 100);
  partial.partial = true;
  FlowRecord empty = small_flow(1, "cubic", 100);
  empty.bytes_acked = 0;
  for (const auto& f : {refused, partial, empty}) d.add(f, AsnLabel::kOwn);
  EXPECT_EQ(d.stats().keys, 0u);
  EXPECT_EQ(d.stats().flows, 0u);
}

}  // namespace
}  // namespace tcpscope

namespace tcpscope {
namespace {

// The ring reader adds flows while maximal queries run: a query matches its
// 32-term selections against every key outside the lock, so add() waits at
// most for a few merges, never for a whole query.
TEST(FlowDistributions, MaximalQueriesDoNotHoldUpAdd) {
  FlowDistributionsOptions o;
  o.max_keys = 4096;
  FlowDistributions d(o);
  for (uint32_t asn = 1; asn <= 5000; ++asn) d.add(small_flow(asn, asn % 2 ? "bbr" : "cubic", 1000 + asn), AsnLabel::kOwn);
  // Every term holds for almost every key: each key is tested against all 32.
  std::string terms = "asn!%3D1";
  for (size_t i = 2; i <= FlowDistributions::kMaxSelectionTerms; ++i) terms += "%2Casn!%3D" + std::to_string(i);
  const std::string query = "metric=fct&by=asn&a=" + terms + "&b=" + terms;
  std::atomic<bool> done{false};
  std::atomic<int> queries{0};
  double query_ms = 0;
  std::thread reader([&] {
    const auto t0 = std::chrono::steady_clock::now();
    while (!done && queries < 50) {
      d.handle_query(query);
      ++queries;
    }
    query_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
               std::max(1, queries.load());
  });
  std::vector<double> add_ms;
  for (int i = 0; i < 2000000 && queries < 50; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    d.add(small_flow(1 + i % 5000, "bbr", 2000), AsnLabel::kOwn);
    add_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  done = true;
  reader.join();
  ASSERT_GT(queries.load(), 0);
  // Holding the lock for a whole query would make about one add() per query
  // wait half a query or more; preemption on a busy machine makes a few.
  const auto long_waits = std::count_if(add_ms.begin(), add_ms.end(), [&](double ms) { return ms >= query_ms / 2; });
  std::printf("%d queries, %.1f ms each; %zu add() calls, %ld waited >= %.1f ms, slowest %.2f ms\n",
              queries.load(), query_ms, add_ms.size(), static_cast<long>(long_waits), query_ms / 2,
              *std::max_element(add_ms.begin(), add_ms.end()));
  EXPECT_LE(long_waits, queries / 10);
}

}  // namespace
}  // namespace tcpscope
