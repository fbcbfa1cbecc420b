// Comparing transfers: the unit each metric defaults to, which flow-log lines
// each unit reads, which transfers count for fct and throughput, and the
// daemon's transfer sketches through its HTTP answer.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "aggregate/flow_distributions.h"
#include "compare/compare.h"
#include "compare/daemon_source.h"
#include "compare/flow_log_source.h"
#include "measure/measure.h"
#include "record/transfer_record.h"
#include "record/transfer_sampling.h"

#include "../record_fixtures.h"
#include "compare_options.h"

namespace tcpscope {
namespace {

TransferRecord transfer(const std::string& cc, uint32_t asn, TransferDirection direction, uint64_t bytes,
                        int64_t xfer_us) {
  TransferRecord t = client_transfer(cc, asn, direction, bytes, xfer_us);
  set_transfer_flow(&t, "198.18.0.2", 50000);
  t.start_ns = t.flow_start_ns + 1000000;
  t.end_ns = t.start_ns + xfer_us * 1000;
  t.srtt_us = 20000;
  t.min_rtt_us = 15000;
  t.kernel.busy_us = static_cast<uint32_t>(xfer_us);
  t.enrichment.arm = cc;
  t.enrichment.experiment = "bbr-vs-cubic";
  return t;
}

// A flow-log line as SPEC.md's transfer record has it.
std::string transfer_line(const TransferRecord& t) {
  nlohmann::ordered_json j;
  j["kind"] = "transfer";
  j["flow_start_ns"] = t.flow_start_ns;
  j["family"] = 4;
  j["laddr"] = "198.18.0.1";
  j["lport"] = t.lport;
  j["raddr"] = "198.18.0.2";
  j["rport"] = t.rport;
  j["dir"] = t.dir == Direction::kActive ? "active" : "passive";
  j["seq"] = t.seq;
  j["direction"] = t.direction == TransferDirection::kSend ? "send" : "recv";
  j["sampling_rate"] = t.sampling_rate;
  j["start_ns"] = t.start_ns;
  j["end_ns"] = t.end_ns;
  j["xfer_us"] = t.xfer_us;
  j["wait_us"] = t.wait_us ? nlohmann::ordered_json(*t.wait_us) : nlohmann::ordered_json(nullptr);
  j["bytes"] = t.bytes;
  j["retrans_segs"] = t.retrans_segs;
  j["srtt_us"] = t.srtt_us;
  j["min_rtt_us"] = t.min_rtt_us;
  j["busy_us"] = t.kernel.busy_us;
  j["rwnd_limited_us"] = t.rwnd_limited_us;
  j["sndbuf_limited_us"] = t.kernel.sndbuf_limited_us;
  j["cc"] = t.cc;
  j["peer_class"] = t.enrichment.peer_class;
  j["asn"] = t.enrichment.asn;
  j["as_org"] = t.enrichment.as_org;
  j["cc_rule"] = t.enrichment.cc_rule ? nlohmann::ordered_json(*t.enrichment.cc_rule) : nlohmann::ordered_json(nullptr);
  j["experiment"] = t.enrichment.experiment ? nlohmann::ordered_json(*t.enrichment.experiment) : nlohmann::ordered_json(nullptr);
  j["arm"] = t.enrichment.arm ? nlohmann::ordered_json(*t.enrichment.arm) : nlohmann::ordered_json(nullptr);
  j["netns"] = t.netns;
  return j.dump();
}

// A completed flow's line; `kind` "" leaves the key out (a log from before
// transfers).
std::string flow_line(const std::string& kind, const std::string& cc, uint64_t bytes, int64_t fct_us) {
  nlohmann::ordered_json j;
  if (!kind.empty()) j["kind"] = kind;
  j["start_ns"] = 1700000000000000000;
  j["fct_us"] = fct_us;
  j["dir"] = "passive";
  j["outcome"] = "ok";
  j["cc"] = cc;
  j["srtt_us"] = 20000;
  j["bytes_acked"] = bytes;
  j["bytes_received"] = 0;
  j["segs_out"] = 100;
  j["retrans_segs"] = 1;
  j["peer_class"] = "client";
  j["asn"] = 64501;
  j["arm"] = cc;
  return j.dump();
}

TEST(SampleUnit, DefaultsToTransfersForFctAndThroughputOnly) {
  EXPECT_EQ(default_unit(Measure::kFct), SampleUnit::kTransfer);
  EXPECT_EQ(default_unit(Measure::kThroughput), SampleUnit::kTransfer);
  EXPECT_EQ(default_unit(Measure::kRtt), SampleUnit::kFlow);
  EXPECT_EQ(default_unit(Measure::kRetrans), SampleUnit::kFlow);
  EXPECT_EQ(parse_sample_unit("transfer"), SampleUnit::kTransfer);
  EXPECT_EQ(parse_sample_unit("flow"), SampleUnit::kFlow);
  EXPECT_FALSE(parse_sample_unit("transfers"));
  for (int m = 0; m < kMeasureCount; ++m) {
    const auto metric = static_cast<Measure>(m);
    EXPECT_TRUE(unit_supported(metric, SampleUnit::kFlow)) << to_string(metric);
    EXPECT_TRUE(unit_supported(metric, default_unit(metric))) << to_string(metric);
  }
  EXPECT_FALSE(unit_supported(Measure::kRtt, SampleUnit::kTransfer));
  EXPECT_FALSE(unit_supported(Measure::kRetrans, SampleUnit::kTransfer));
  EXPECT_NE(unit_unsupported_reason(Measure::kRetrans, SampleUnit::kTransfer).find("--unit flow"),
            std::string::npos);
  EXPECT_EQ(unit_unsupported_reason(Measure::kFct, SampleUnit::kTransfer), "");
}

// One log with new flow lines, transfer lines, a line from before transfers
// (no kind) and a kind this version does not know: each unit reads its own.
TEST(TransferCompare, EachUnitReadsOnlyItsOwnLinesOfAMixedLog) {
  const std::vector<std::string> log = {
      flow_line("flow", "cubic", 50000, 1000),
      flow_line("", "cubic", 60000, 1100),  // before transfers: a flow
      flow_line("flow", "bbr", 50000, 900),
      transfer_line(transfer("cubic", 64501, TransferDirection::kSend, 20000, 300)),
      transfer_line(transfer("cubic", 64501, TransferDirection::kRecv, 800, 50)),
      transfer_line(transfer("bbr", 64501, TransferDirection::kSend, 20000, 250)),
      R"({"kind": "probe", "cc": "cubic", "outcome": "ok", "bytes_acked": 10, "fct_us": 5})",
  };
  for (const SampleUnit unit : {SampleUnit::kFlow, SampleUnit::kTransfer}) {
    const CompareOptions o = opts(Measure::kFct, unit, "all", "cc=cubic", "cc=bbr");
    const Selection a = sel(o.a), b = sel(o.b);
    FlowLogCollector c(o, a, b);
    for (const auto& l : log) c.add_line(l);
    const FlowLogScan scan = c.finish();
    SCOPED_TRACE(to_string(unit));
    EXPECT_EQ(scan.lines, 7u);
    EXPECT_EQ(scan.unknown_kind, 1u);
    EXPECT_EQ(scan.records, 3u);
    EXPECT_EQ(scan.other_unit, 3u);
    // Matched and measured: a received transfer has no fct sample.
    EXPECT_EQ(scan.matched_a, unit == SampleUnit::kFlow ? 2u : 1u);
    EXPECT_EQ(scan.matched_b, 1u);
    std::vector<double> a_values;
    for (const auto& g : scan.groups)
      for (double v : g.a.values()) a_values.push_back(v);
    std::sort(a_values.begin(), a_values.end());
    if (unit == SampleUnit::kFlow)
      EXPECT_EQ(a_values, (std::vector<double>{1000, 1100}));
    else
      EXPECT_EQ(a_values, (std::vector<double>{300}));  // fct: what this host sent
  }
}

// A log written at rate 1 for a while, then at 8 (a reload): the first part's
// flows would outweigh the second's eight to one. Only the flows rate 8 keeps
// count, from both parts; a log of one rate is read whole.
TEST(TransferCompare, OfLinesOfSeveralRatesOnlyTheFlowsTheLargestKeepsCount) {
  const CompareOptions o = opts(Measure::kFct, SampleUnit::kTransfer, "all", "cc=cubic", "cc=bbr");
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector mixed(o, a, b), uniform(o, a, b);
  uint64_t kept[2] = {0, 0}, written = 0;
  for (int i = 0; i < 4000; ++i) {
    TransferRecord t = transfer("cubic", 64501, TransferDirection::kSend, 20000, i < 2000 ? 100 : 200);
    t.flow_start_ns = 1700000000000000000 + int64_t{i} * 977;
    t.lport = 443;
    t.rport = static_cast<uint16_t>(20000 + i);
    t.sampling_rate = i < 2000 ? 1 : 8;
    const bool at8 = transfer_sampled(t.lport, t.rport, 8);
    if (at8) ++kept[i < 2000 ? 0 : 1];
    if (i < 2000 || at8) {
      mixed.add_line(transfer_line(t));
      ++written;
    }
    if (i < 2000) uniform.add_line(transfer_line(t));
  }
  const FlowLogScan scan = mixed.finish();
  EXPECT_EQ(scan.min_sampling_rate, 1u);
  EXPECT_EQ(scan.max_sampling_rate, 8u);
  EXPECT_EQ(scan.matched_a, kept[0] + kept[1]);
  EXPECT_EQ(scan.thinned, written - kept[0] - kept[1]);
  ASSERT_EQ(scan.groups.size(), 1u);
  const ArmDistribution& got = scan.groups[0].a;
  ASSERT_EQ(got.values(), (std::vector<double>{100, 200}));
  EXPECT_EQ(got.cumulative()[0], kept[0]);
  EXPECT_EQ(got.count(), kept[0] + kept[1]);
  EXPECT_GT(kept[0], 150u);  // about 250 each
  EXPECT_GT(kept[1], 150u);

  const FlowLogScan one = uniform.finish();
  EXPECT_EQ(one.thinned, 0u);
  EXPECT_EQ(one.matched_a, 2000u);
}

TEST(TransferCompare, FctIsSplitByTheTransfersOwnSize) {
  const CompareOptions o = opts(Measure::kFct, SampleUnit::kTransfer, "asn", "cc=cubic", "cc=bbr");
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector c(o, a, b);
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kSend, 30000, 1000)));    // lt_100k
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kSend, 40000, 1200)));    // lt_100k
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kSend, 500000, 9000)));   // 100k_1m
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kRecv, 500000, 9000)));   // received
  c.add_line(transfer_line(transfer("bbr", 64501, TransferDirection::kSend, 2000000, 30000)));   // 1m_3m
  c.add_line(transfer_line(transfer("bbr", 64501, TransferDirection::kSend, 5000000, 60000)));   // throughput only
  c.add_line(transfer_line(transfer("bbr", 64501, TransferDirection::kSend, 0, 10)));            // no data
  c.add_line(transfer_line(transfer("bbr", 64501, TransferDirection::kSend, 1000, 0)));          // under a µs: lt_100k
  const FlowLogScan scan = c.finish();
  std::map<std::string, std::pair<uint64_t, uint64_t>> n;  // size class -> (A, B)
  for (const auto& g : scan.groups) {
    EXPECT_EQ(g.group, "64501");
    ASSERT_TRUE(g.size_class);
    n[*g.size_class] = {g.a.count(), g.b.count()};
  }
  EXPECT_EQ(n.size(), 3u);
  EXPECT_EQ(n["lt_100k"], std::make_pair(uint64_t{2}, uint64_t{1}));
  EXPECT_EQ(n["100k_1m"], std::make_pair(uint64_t{1}, uint64_t{0}));
  EXPECT_EQ(n["1m_3m"], std::make_pair(uint64_t{0}, uint64_t{1}));
}

TEST(TransferCompare, ThroughputCountsOnlyLargeSendTransfersTheReceiverDidNotLimit) {
  const CompareOptions o = opts(Measure::kThroughput, SampleUnit::kTransfer, "all", "cc=cubic", "cc=bbr");
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector c(o, a, b);
  // 5 MB in 2 s = 2.5 MB/s (20 Mbit/s).
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kSend, 5000000, 2000000)));
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kRecv, 5000000, 1000000)));  // received
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kSend, 2999999, 1000000)));  // small
  TransferRecord limited = transfer("cubic", 64501, TransferDirection::kSend, 5000000, 1000000);
  limited.rwnd_limited_us = 500001;  // more than half its time
  ASSERT_TRUE(limited.rwnd_limited());
  c.add_line(transfer_line(limited));
  TransferRecord half = transfer("bbr", 64501, TransferDirection::kSend, 4000000, 1000000);
  half.rwnd_limited_us = 500000;  // exactly half: still counts
  ASSERT_FALSE(half.rwnd_limited());
  c.add_line(transfer_line(half));
  const FlowLogScan scan = c.finish();
  ASSERT_EQ(scan.groups.size(), 1u);
  EXPECT_FALSE(scan.groups[0].size_class);
  ASSERT_EQ(scan.groups[0].a.count(), 1u);
  EXPECT_DOUBLE_EQ(scan.groups[0].a.quantile(0.5), 2.5e6);  // bytes/s, as flow throughput
  ASSERT_EQ(scan.groups[0].b.count(), 1u);
  EXPECT_DOUBLE_EQ(scan.groups[0].b.quantile(0.5), 4e6);

  // The daemon decides the same from the record itself.
  const MetricOptions mo;
  EXPECT_FALSE(metric_value(Measure::kThroughput, metric_inputs(limited), mo));
  EXPECT_FALSE(metric_value(Measure::kThroughput,
                            metric_inputs(transfer("cubic", 1, TransferDirection::kRecv, 5000000, 1000000)), mo));
  EXPECT_DOUBLE_EQ(*metric_value(Measure::kThroughput, metric_inputs(half), mo), 4e6);
  // Per transfer, rtt and retrans have no value.
  EXPECT_FALSE(metric_value(Measure::kRtt, metric_inputs(half), mo));
  EXPECT_FALSE(metric_value(Measure::kRetrans, metric_inputs(half), mo));
}

TEST(TransferCompare, SelectionsAndGroupsUseTheTransfersFields) {
  const CompareOptions o =
      opts(Measure::kThroughput, SampleUnit::kTransfer, "dir", "arm=cubic,dir=passive", "cc=bbr,asn=64502");
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector c(o, a, b);
  const uint64_t big = 5000000;
  c.add_line(transfer_line(transfer("cubic", 64501, TransferDirection::kSend, big, 100)));
  TransferRecord active = transfer("cubic", 64501, TransferDirection::kSend, big, 100);
  active.dir = Direction::kActive;
  c.add_line(transfer_line(active));                                                        // not dir=passive
  c.add_line(transfer_line(transfer("bbr", 64502, TransferDirection::kSend, big, 100)));    // B
  c.add_line(transfer_line(transfer("bbr", 64501, TransferDirection::kSend, big, 100)));    // other ASN
  const FlowLogScan scan = c.finish();
  std::map<std::string, std::pair<uint64_t, uint64_t>> n;
  for (const auto& g : scan.groups) n[g.group] = {g.a.count(), g.b.count()};
  // Grouped by the transfer's flow direction; the active one is in neither arm.
  EXPECT_EQ(n.size(), 1u);
  EXPECT_EQ(n["passive"], std::make_pair(uint64_t{1}, uint64_t{1}));
}

TEST(TransferCompare, ReportAndJsonSayWhichUnitWasCompared) {
  for (const SampleUnit unit : {SampleUnit::kFlow, SampleUnit::kTransfer}) {
    const CompareOptions o = opts(Measure::kFct, unit, "all", "cc=cubic", "cc=bbr");
    GroupSamples g;
    g.group = "all";
    g.size_class = "lt_100k";
    g.a = ArmDistribution::exact({100, 200, 300});
    g.b = ArmDistribution::exact({150, 250});
    const CompareResult r = compare_groups({g}, o);
    const auto j = compare_result_json(r);
    EXPECT_EQ(j["unit"], to_string(unit));
    EXPECT_EQ(j["value_unit"], "us");
    const std::string units = unit_plural(unit);
    EXPECT_NE(j["description"].get<std::string>().find(unit == SampleUnit::kTransfer ? "xfer_us" : "fct_us"),
              std::string::npos);
    const std::string table = format_compare_table(r);
    EXPECT_NE(table.find("unit: " + std::string(to_string(unit))), std::string::npos) << table;
    EXPECT_NE(table.find("fewer than 20 " + units + " in an arm"), std::string::npos) << table;
  }
}

// The flow log's notes say when the unit asked for is not in the log.
TEST(TransferCompare, AFlowOnlyLogPointsToUnitFlow) {
  char path[] = "/tmp/tcpscope-transfer-compare-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = flow_line("", "cubic", 50000, 1000) + "\n" + flow_line("flow", "bbr", 50000, 900) + "\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const CompareOptions o = opts(Measure::kFct, SampleUnit::kTransfer, "all", "cc=cubic", "cc=bbr");
  FlowLogSource source(path, MetricOptions{});
  CompareSamples samples;
  std::string error;
  ASSERT_TRUE(source.collect(o, sel(o.a), sel(o.b), &samples, &error)) << error;
  unlink(path);
  EXPECT_TRUE(samples.groups.empty());
  ASSERT_EQ(samples.notes.size(), 2u);
  EXPECT_EQ(samples.notes[0],
            "flow log: 2 lines read, 0 transfer records among them; 0 transfers in A and 0 in B have a value for fct.");
  EXPECT_NE(samples.notes[1].find("with --unit flow"), std::string::npos) << samples.notes[1];
}

// Transfers of known spread: in AS 64501 BBR is 10 % faster; sizes in
// every size class and above the throughput threshold, both directions,
// some receiver-window limited.
std::vector<TransferRecord> transfers(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> size(11, 1.8), xfer(std::log(20000), 0.8);
  std::vector<TransferRecord> out;
  for (const uint32_t asn : {64501u, 64502u}) {
    for (const char* cc : {"cubic", "bbr"}) {
      const double scale = asn == 64501 && std::string(cc) == "bbr" ? 0.9 : 1.0;
      for (int i = 0; i < 1500; ++i) {
        const auto dir = i % 4 ? TransferDirection::kSend : TransferDirection::kRecv;
        uint64_t bytes = static_cast<uint64_t>(size(rng)) + 1;
        if (i % 8 == 0) bytes += 3000000;
        const int64_t us = static_cast<int64_t>(xfer(rng) * scale * (bytes > 3000000 ? 30 : 1)) + 1;
        TransferRecord t = transfer(cc, asn, dir, bytes, us);
        t.seq = static_cast<uint32_t>(i % 5);
        t.enrichment.peer_class = i % 3 ? "client" : "pop-to-pop";
        if (i % 16 == 0) t.rwnd_limited_us = static_cast<uint32_t>(us);
        out.push_back(std::move(t));
      }
    }
  }
  return out;
}

// The daemon's transfer sketches, through its HTTP answer as compare
// --server reads it, agree with the flow log's transfer lines on counts
// exactly and quantiles within the sketch's 1 %; its flow sketches hold no
// transfer.
TEST(FlowDistributionsTransfers, RoundTripAgreesWithTheFlowLog) {
  const auto ts = transfers(5);
  FlowDistributions d{FlowDistributionsOptions{}};
  for (const auto& t : ts) d.add(t, AsnLabel::kOwn);
  EXPECT_EQ(d.stats().transfers, ts.size());
  EXPECT_EQ(d.stats().flows, 0u);

  for (const Measure m : {Measure::kFct, Measure::kThroughput}) {
    for (const std::string by : {"asn", "peer_class"}) {
      const CompareOptions o = opts(m, SampleUnit::kTransfer, by, "cc=cubic", "cc=bbr");
      const std::string target = distributions_target(o);
      EXPECT_NE(target.find("&unit=transfer&"), std::string::npos) << target;
      const std::string body = d.handle_query(target.substr(target.find('?') + 1));
      EXPECT_EQ(nlohmann::json::parse(body)["unit"], "transfer");
      ServerScan scan;
      std::string error;
      ASSERT_TRUE(parse_distributions_response(body, &scan, &error)) << error;
      EXPECT_EQ(scan.unit, SampleUnit::kTransfer);
      const CompareResult sketched = compare_groups(std::move(scan.groups), o);

      const Selection a = sel(o.a), b = sel(o.b);
      FlowLogCollector c(o, a, b);
      for (const auto& t : ts) c.add_line(transfer_line(t));
      const CompareResult exact = compare_groups(c.finish().groups, o);

      const std::string where = std::string(to_string(m)) + " by " + by;
      ASSERT_EQ(exact.groups.size(), sketched.groups.size()) << where;
      ASSERT_FALSE(exact.groups.empty()) << where;
      for (size_t i = 0; i < exact.groups.size(); ++i) {
        const GroupResult& e = exact.groups[i];
        const GroupResult& s = sketched.groups[i];
        EXPECT_EQ(e.group, s.group) << where;
        EXPECT_EQ(e.size_class, s.size_class) << where;
        EXPECT_EQ(e.a.n, s.a.n) << where << " " << e.group;
        EXPECT_EQ(e.b.n, s.b.n) << where << " " << e.group;
        // p50 of A, p90 of B: none in both when an arm is too small for it.
        for (const auto& [x, y] : {std::make_pair(e.a.quantiles[0].value, s.a.quantiles[0].value),
                                   std::make_pair(e.b.quantiles[1].value, s.b.quantiles[1].value)}) {
          ASSERT_EQ(x.has_value(), y.has_value()) << where << " " << e.group;
          if (x) {
            EXPECT_LE(std::abs(*y - *x) / *x, 0.01 + 1e-12) << where << " " << e.group << ": " << *x << " vs " << *y;
          }
        }
      }
    }
  }

  // Flows and transfers are kept apart: a flow query of the same keys finds nothing.
  const CompareOptions flows = opts(Measure::kFct, SampleUnit::kFlow, "asn", "cc=cubic", "cc=bbr");
  const std::string target = distributions_target(flows);
  EXPECT_EQ(target.find("unit="), std::string::npos) << target;  // flow: the endpoint's default
  const auto j = nlohmann::json::parse(d.handle_query(target.substr(target.find('?') + 1)));
  EXPECT_EQ(j["unit"], "flow");
  EXPECT_TRUE(j["groups"].empty());
  EXPECT_EQ(j["folded_flows"], 0);
  EXPECT_FALSE(j.contains("folded_transfers"));
}

TEST(FlowDistributionsTransfers, RejectsUnitsAMetricIsNotComparedBy) {
  FlowDistributions d{FlowDistributionsOptions{}};
  d.add(transfer("cubic", 1, TransferDirection::kSend, 1000, 100), AsnLabel::kOwn);
  try {
    d.handle_query("metric=rtt&unit=transfer&a=cc%3Dbbr&b=cc%3Dcubic");
    FAIL() << "rtt per transfer accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rtt is compared per flow only"), std::string::npos) << e.what();
  }
  EXPECT_THROW(d.handle_query("metric=fct&unit=connection&a=cc%3Dbbr&b=cc%3Dcubic"), std::invalid_argument);
  EXPECT_NO_THROW(d.handle_query("metric=throughput&unit=transfer&a=cc%3Dbbr&b=cc%3Dcubic"));

  // Every answer names its unit (query_server checks it against the request).
  ServerScan scan;
  std::string error;
  ASSERT_TRUE(parse_distributions_response(d.handle_query("unit=flow&a=cc%3Dbbr&b=cc%3Dcubic"), &scan, &error))
      << error;
  EXPECT_EQ(scan.unit, SampleUnit::kFlow);
}

// A transfer whose key finds the table full folds into "other" and is
// counted as a folded transfer, not a folded flow.
TEST(FlowDistributionsTransfers, FoldedAndDroppedTransfersAreCountedApart) {
  FlowDistributionsOptions o;
  o.max_keys = 16;
  FlowDistributions d(o);
  for (uint32_t asn = 1; asn <= 16; ++asn)
    d.add(transfer("cubic", asn, TransferDirection::kSend, 1000, 100), AsnLabel::kOther);
  for (uint32_t asn = 17; asn <= 20; ++asn)
    d.add(transfer("cubic", asn, TransferDirection::kSend, 1000, 100), AsnLabel::kOther);
  const auto st = d.stats();
  EXPECT_EQ(st.folded_transfers, 4u);
  EXPECT_EQ(st.folded_flows, 0u);
  const auto j = nlohmann::json::parse(d.handle_query("unit=transfer&by=asn&a=cc%3Dcubic&b=cc%3Dbbr"));
  EXPECT_EQ(j["folded_transfers"], 4);
  ServerScan scan;
  std::string error;
  ASSERT_TRUE(parse_distributions_response(j.dump(), &scan, &error)) << error;
  EXPECT_EQ(scan.folded, 4u);
}

}  // namespace
}  // namespace tcpscope
