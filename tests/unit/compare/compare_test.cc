// Selections, the flow-log reader, and the JSON / table output of compare.
#include "compare/compare.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "compare/compare_source.h"
#include "compare/flow_log_source.h"
#include "measure/selection.h"
#include "record/flow_json.h"
#include "record/flow_record.h"
#include "text/utf8_text.h"

#include "compare_options.h"

namespace tcpscope {
namespace {

Selection::FieldGetter getter(std::map<std::string, std::string> fields) {
  return [fields](const std::string& f) -> std::optional<std::string> {
    auto it = fields.find(f);
    if (it == fields.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Selection, ParsesAndMatches) {
  const auto bbr_client = sel("cc=bbr, peer_class=client");
  EXPECT_TRUE(bbr_client.matches(getter({{"cc", "bbr"}, {"peer_class", "client"}})));
  EXPECT_FALSE(bbr_client.matches(getter({{"cc", "cubic"}, {"peer_class", "client"}})));
  EXPECT_FALSE(bbr_client.matches(getter({{"cc", "bbr"}})));  // missing field: no match
  const auto asns = sel("asn=64501|64502");
  EXPECT_TRUE(asns.matches(getter({{"asn", "64502"}})));
  EXPECT_FALSE(asns.matches(getter({{"asn", "64503"}})));
  const auto not_bbr = sel("cc!=bbr");
  EXPECT_TRUE(not_bbr.matches(getter({{"cc", "cubic"}})));
  EXPECT_FALSE(not_bbr.matches(getter({{"cc", "bbr"}})));
  EXPECT_TRUE(sel("arm!=bbr").matches(getter({})));
  ASSERT_EQ(bbr_client.terms().size(), 2u);
  EXPECT_EQ(bbr_client.terms()[1].field, "peer_class");
}

TEST(Selection, RejectsMalformedText) {
  std::string why;
  for (const char* bad : {"", "cc", "=bbr", "cc=", "cc=bbr|", "CC=bbr", "cc=bbr,,asn=1", "peer class=x"}) {
    EXPECT_FALSE(Selection::parse(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

FlowRecord flow(const std::string& cc, uint32_t asn, uint64_t bytes, int64_t fct_us) {
  FlowRecord f;
  f.cc = cc;
  f.enrichment.asn = asn;
  f.enrichment.peer_class = "client";
  f.bytes_acked = bytes;
  f.bytes_received = 0;
  f.fct_us = fct_us;
  f.srtt_us = 20000;
  f.segs_out = 100;
  f.retrans_segs = 1;
  f.laddr = *IpAddr::parse("198.18.0.1");
  f.raddr = *IpAddr::parse("198.18.0.2");
  return f;
}

std::string line(const FlowRecord& f) {
  std::string s;
  append_flow_json(f, &s);
  s.pop_back();
  return s;
}

CompareOptions options(Measure m, const std::string& by) {
  CompareOptions o;
  o.metric = m;
  o.by = by;
  o.a = "cc=cubic";
  o.b = "cc=bbr";
  return o;
}

TEST(FlowLogCollector, PicksTheFlowsOfEachMetricAndSplitsFctBySizeClass) {
  const CompareOptions o = options(Measure::kFct, "asn");
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector c(o, a, b);
  c.add_line(line(flow("cubic", 64501, 50000, 1000)));     // lt_100k
  c.add_line(line(flow("bbr", 64501, 500000, 2000)));      // 100k_1m
  c.add_line(line(flow("bbr", 64501, 5000000, 3000)));     // throughput only
  c.add_line(line(flow("reno", 64501, 50000, 1000)));      // neither arm
  FlowRecord reset = flow("cubic", 64501, 50000, 1000);
  reset.outcome = Outcome::kReset;                          // not completed
  c.add_line(line(reset));
  FlowRecord partial = flow("cubic", 64501, 50000, 1000);
  partial.partial = true;                                   // unknown start
  c.add_line(line(partial));
  c.add_line(line(flow("cubic", 64501, 0, 1000)));          // no data
  c.add_line("{\"truncated\": ");
  c.add_line("");
  const FlowLogScan scan = c.finish();
  EXPECT_EQ(scan.lines, 8u);
  EXPECT_EQ(scan.malformed, 1u);
  EXPECT_EQ(scan.matched_a, 1u);
  EXPECT_EQ(scan.matched_b, 1u);
  ASSERT_EQ(scan.groups.size(), 2u);
  for (const auto& g : scan.groups) {
    EXPECT_EQ(g.group, "64501");
    ASSERT_TRUE(g.size_class);
    if (*g.size_class == "lt_100k") {
      EXPECT_EQ(g.a.count(), 1u);
      EXPECT_EQ(g.b.count(), 0u);
      EXPECT_EQ(g.a.quantile(0.5), 1000);
    } else {
      EXPECT_EQ(*g.size_class, "100k_1m");
      EXPECT_EQ(g.b.count(), 1u);
    }
  }

  const CompareOptions t = options(Measure::kThroughput, "asn");
  FlowLogCollector tc(t, a, b);
  tc.add_line(line(flow("bbr", 64501, 5000000, 4000000)));  // 5 MB in 4 s = 1.25 MB/s
  tc.add_line(line(flow("cubic", 64501, 50000, 1000)));     // too small
  const FlowLogScan ts = tc.finish();
  ASSERT_EQ(ts.groups.size(), 1u);
  EXPECT_FALSE(ts.groups[0].size_class);
  EXPECT_DOUBLE_EQ(ts.groups[0].b.quantile(0.5), 1.25e6);

  const CompareOptions r = options(Measure::kRetrans, "peer_class");
  FlowLogCollector rc(r, a, b);
  rc.add_line(line(flow("cubic", 1, 5000000, 4000000)));
  const FlowLogScan rs = rc.finish();
  ASSERT_EQ(rs.groups.size(), 1u);
  EXPECT_EQ(rs.groups[0].group, "client");
  EXPECT_DOUBLE_EQ(rs.groups[0].a.quantile(0.5), 0.01);
}

TEST(FlowLogCollector, GroupsAndSelectsOnAnyFieldIncludingNullAndSizeClass) {
  CompareOptions o = options(Measure::kRtt, "arm");
  o.a = "size_class=lt_100k";
  o.b = "size_class!=lt_100k,experiment=null";
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector c(o, a, b);
  FlowRecord with_arm = flow("bbr", 1, 50000, 1000);
  with_arm.enrichment.arm = "bbr";
  c.add_line(line(with_arm));
  c.add_line(line(flow("bbr", 1, 500000, 1000)));
  const FlowLogScan scan = c.finish();
  ASSERT_EQ(scan.groups.size(), 2u);
  EXPECT_EQ(scan.groups[0].group, "bbr");
  EXPECT_EQ(scan.groups[0].a.count(), 1u);
  EXPECT_EQ(scan.groups[1].group, "null");
  EXPECT_EQ(scan.groups[1].b.count(), 1u);
}

TEST(FlowLogCollector, FastScannerAndFullParserReadRecordsAlike) {
  // Each pair: the same record as the daemon writes it (the fast scanner
  // takes it) and with a nested extra field (forcing the full parser).
  const std::vector<std::string> records = {
      R"({"cc":"cubic","asn":64501,"peer_class":"client","outcome":"ok","bytes_acked":5000,"bytes_received":0,"fct_us":1200})",
      R"({ "cc" : "bbr" , "asn" : 64501 , "peer_class" : "cli\u0065nt" , "outcome" : "ok" , "bytes_acked" : 5e3 , "fct_us" : 1100.0 })",
      R"({"cc":"bbr","asn":64501,"peer_class":"client","outcome":"o\u006b","bytes_acked":7000,"fct_us":900,"partial":false})",
      R"({"cc":"bbr","asn":64501,"peer_class":"client","outcome":"ok","bytes_acked":7000,"fct_us":900,"partial":true})",
      R"({"cc":"cubic","asn":-0,"peer_class":"client","outcome":"ok","bytes_acked":7000,"fct_us":800,"comm":"a\"b\\c"})",
      R"({"cc":"cubic","cc":"bbr","asn":64501,"peer_class":"client","outcome":"ok","bytes_acked":100,"fct_us":700})",
      R"({"cc":"cubic","asn":64501,"peer_class":"client","outcome":"ok","bytes_acked":-5,"bytes_received":10,"fct_us":600})",
  };
  CompareOptions o = options(Measure::kFct, "asn");
  o.a = "cc=cubic,peer_class=client";
  o.b = "cc=bbr,peer_class=client";
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogCollector fast(o, a, b), full(o, a, b);
  for (const auto& r : records) {
    fast.add_line(r);
    full.add_line(r.substr(0, r.size() - 1) + R"(,"nested":{"x":[1,2]}})");
  }
  const FlowLogScan x = fast.finish(), y = full.finish();
  EXPECT_EQ(x.malformed, 0u);
  EXPECT_EQ(y.malformed, 0u);
  EXPECT_EQ(x.matched_a, y.matched_a);
  EXPECT_EQ(x.matched_b, y.matched_b);
  EXPECT_EQ(x.matched_a, 3u);  // records 1, 5 (asn "0") and 7
  EXPECT_EQ(x.matched_b, 3u);  // records 2, 3 and 6 (the last "cc" wins)
  ASSERT_EQ(x.groups.size(), y.groups.size());
  for (size_t i = 0; i < x.groups.size(); ++i) {
    EXPECT_EQ(x.groups[i].group, y.groups[i].group);
    EXPECT_EQ(x.groups[i].a.values(), y.groups[i].a.values());
    EXPECT_EQ(x.groups[i].b.values(), y.groups[i].b.values());
  }
  ASSERT_EQ(x.groups.size(), 2u);
  EXPECT_EQ(x.groups[0].group, "0");
  EXPECT_EQ(x.groups[1].group, "64501");
  EXPECT_EQ(x.groups[1].b.values(), (std::vector<double>{700, 900, 1100}));
  // Broken lines are counted, not fatal.
  FlowLogCollector bad(o, a, b);
  for (const char* l : {"{", "{\"cc\":}", "[1,2]", "{\"cc\":\"bbr\"} trailing", "nul"}) bad.add_line(l);
  EXPECT_EQ(bad.finish().malformed, 5u);
}

class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    char tmpl[] = "/tmp/tcpscope-compare-XXXXXX";
    int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    unlink(tmpl);
    path_ = std::string(tmpl) + suffix;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ScanFlowLog, ReadsPlainAndGzipFilesAlike) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> d(9, 1);
  std::string text;
  for (int i = 0; i < 500; ++i) {
    text += line(flow(i % 2 ? "bbr" : "cubic", 64501, 20000, static_cast<int64_t>(d(rng)))) + "\n";
  }
  TempFile plain(".ndjson"), gz(".ndjson.gz");
  std::ofstream(plain.path()) << text;
  gzFile g = gzopen(gz.path().c_str(), "wb");
  ASSERT_TRUE(g);
  gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
  gzclose(g);

  const CompareOptions o = options(Measure::kFct, "asn");
  const Selection a = sel(o.a), b = sel(o.b);
  FlowLogScan from_plain, from_gz;
  std::string error;
  ASSERT_TRUE(scan_flow_log(plain.path(), o, a, b, &from_plain, &error)) << error;
  ASSERT_TRUE(scan_flow_log(gz.path(), o, a, b, &from_gz, &error)) << error;
  EXPECT_EQ(from_plain.lines, 500u);
  EXPECT_EQ(from_gz.lines, 500u);
  ASSERT_EQ(from_plain.groups.size(), 1u);
  ASSERT_EQ(from_gz.groups.size(), 1u);
  EXPECT_EQ(from_plain.groups[0].a.count(), 250u);
  EXPECT_EQ(from_plain.groups[0].a.values(), from_gz.groups[0].a.values());
  EXPECT_EQ(from_plain.groups[0].b.values(), from_gz.groups[0].b.values());

  EXPECT_FALSE(from_gz.truncated);
  // A gzip file cut short (still being written): the complete lines count.
  {
    std::ifstream in(gz.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(gz.path(), std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  }
  FlowLogScan cut;
  ASSERT_TRUE(scan_flow_log(gz.path(), o, a, b, &cut, &error)) << error;
  EXPECT_TRUE(cut.truncated);
  EXPECT_GT(cut.lines, 0u);
  EXPECT_LT(cut.lines, 500u);

  EXPECT_FALSE(scan_flow_log("/nonexistent/flows.ndjson", o, a, b, &from_plain, &error));
  EXPECT_NE(error.find("/nonexistent/flows.ndjson"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

TEST(FlowLogSource, NamesItsFileAndNotesWhatItRead) {
  std::string text;
  text += line(flow("cubic", 64501, 50000, 1000)) + "\n";   // A and B
  text += line(flow("bbr", 64502, 50000, 2000)) + "\n";     // B
  text += line(flow("cubic", 64503, 500000, 3000)) + "\n";  // A
  text += "{\"cut\": \n";
  TempFile log(".ndjson");
  std::ofstream(log.path()) << text;
  const CompareOptions o = options(Measure::kFct, "asn");
  const Selection a = sel("cc=cubic"), b = sel("asn=64501|64502");
  MetricOptions mo;
  mo.size_classes_bytes = {100000, 1000000};
  mo.throughput_min_bytes = 2000000;
  FlowLogSource source(log.path(), mo);
  EXPECT_EQ(source.description(), "flows " + log.path());
  CompareSamples samples;
  std::string error;
  ASSERT_TRUE(source.collect(o, a, b, &samples, &error)) << error;
  EXPECT_EQ(samples.metric_options.size_classes_bytes, mo.size_classes_bytes);
  EXPECT_EQ(samples.metric_options.throughput_min_bytes, 2000000u);
  EXPECT_EQ(samples.size_classes, (std::vector<std::string>{"lt_100k", "100k_1m", "ge_1m"}));
  EXPECT_EQ(samples.groups.size(), 3u);
  ASSERT_EQ(samples.notes.size(), 3u);
  EXPECT_EQ(samples.notes[0],
            "flow log: 4 lines read, 3 flow records among them; 2 flows in A and 2 in B have a value for fct.");
  EXPECT_EQ(samples.notes[1], "1 malformed lines skipped (not a JSON object).");
  EXPECT_EQ(samples.notes[2], "warning: 1 flows match both A and B and count in both arms.");

  FlowLogSource missing("/nonexistent/flows.ndjson", mo);
  EXPECT_FALSE(missing.collect(o, a, b, &samples, &error));
  EXPECT_EQ(error.rfind("/nonexistent/flows.ndjson: ", 0), 0u) << error;
}

// Any source: its samples are compared as they come, the report names it
// and says its notes first.
class FixedSource : public CompareSource {
 public:
  std::string description() const override { return "fixed test data"; }
  bool collect(const CompareOptions&, const Selection&, const Selection&, CompareSamples* out,
               std::string*) override {
    GroupSamples g;
    g.group = "all";
    g.a = ArmDistribution::exact(std::vector<double>(30, 0.0));
    g.b = ArmDistribution::exact(std::vector<double>(30, 0.0));
    out->groups = {g};
    out->metric_options.throughput_min_bytes = 12345;
    out->size_classes = {"small", "large"};
    out->notes = {"fixed: 60 flows."};
    return true;
  }
};

TEST(CompareSource, ResultNamesTheSourceAndStartsWithItsNotes) {
  FixedSource source;
  CompareSamples samples;
  std::string error;
  CompareOptions o = options(Measure::kRetrans, "all");
  ASSERT_TRUE(source.collect(o, sel(o.a), sel(o.b), &samples, &error));
  const CompareResult r = compare_samples(std::move(samples), o, source.description());
  EXPECT_EQ(r.source, "fixed test data");
  EXPECT_EQ(r.options.metric_options.throughput_min_bytes, 12345u);
  EXPECT_EQ(r.size_classes, (std::vector<std::string>{"small", "large"}));
  ASSERT_EQ(r.groups.size(), 1u);
  EXPECT_EQ(r.groups[0].a.n, 30u);
  // The source's note, then compare_groups' own (no interval: every A flow is 0).
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_EQ(r.notes[0], "fixed: 60 flows.");
  EXPECT_EQ(r.notes[1].rfind("no 95% CI for all: ", 0), 0u) << r.notes[1];
  EXPECT_NE(format_compare_table(r).find("source: fixed test data"), std::string::npos);
}

CompareResult sample_result() {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(10, 0.7);
  std::vector<GroupSamples> groups;
  for (const char* name : {"64501", "64502"}) {
    for (uint32_t sc = 0; sc < 2; ++sc) {
      GroupSamples g;
      g.group = name;
      g.size_class = sc ? "100k_1m" : "lt_100k";
      g.size_class_order = sc;
      std::vector<double> a, b;
      const int n = std::string(name) == "64501" ? 1000 : 10;
      for (int i = 0; i < n; ++i) a.push_back(d(rng));
      for (int i = 0; i < n; ++i) b.push_back(0.8 * d(rng));
      g.a = ArmDistribution::exact(a);
      g.b = ArmDistribution::exact(b);
      groups.push_back(std::move(g));
    }
  }
  CompareResult r = compare_groups(std::move(groups), options(Measure::kFct, "asn"));
  r.source = "flows test.ndjson";
  return r;
}

TEST(CompareOutput, JsonHasTheShapeSpecFixes) {
  const CompareResult r = sample_result();
  const nlohmann::json j = nlohmann::json::parse(compare_result_json(r).dump());
  EXPECT_EQ(j["metric"], "fct");
  EXPECT_EQ(j["a"], "cc=cubic");
  EXPECT_EQ(j["b"], "cc=bbr");
  ASSERT_TRUE(j["groups"].is_array());
  ASSERT_EQ(j["groups"].size(), 4u);
  // Most flows first, size classes in order.
  EXPECT_EQ(j["groups"][0]["group"], "64501");
  EXPECT_EQ(j["groups"][0]["size_class"], "lt_100k");
  EXPECT_EQ(j["groups"][1]["size_class"], "100k_1m");
  for (const auto& g : j["groups"]) {
    for (const char* k : {"group", "n_a", "n_b", "a", "b", "diff", "ci", "p_value", "q_value", "verdict"})
      EXPECT_TRUE(g.contains(k)) << k;
    EXPECT_TRUE(g["group"].is_string());
    EXPECT_TRUE(g["n_a"].is_number_integer());
    // Numbers where the arm holds the quantile (p99: 100 values), null where it does not.
    for (const char* arm : {"a", "b"}) {
      const uint64_t n = g[std::string("n_") + arm];
      for (const auto& [q, min_n] : {std::pair{"p50", 2u}, {"p90", 10u}, {"p99", 100u}})
        EXPECT_EQ(g[arm][q].is_number(), n >= min_n) << arm << q;
    }
    const std::string v = g["verdict"];
    EXPECT_TRUE(v == "b better" || v == "a better" || v == "no significant difference" || v == "insufficient data");
  }
  const auto& big = j["groups"][0];
  EXPECT_EQ(big["verdict"], "b better");
  EXPECT_TRUE(big["ci"].is_array());
  EXPECT_LT(big["ci"][0].get<double>(), big["diff"].get<double>());
  EXPECT_GT(big["ci"][1].get<double>(), big["diff"].get<double>());
  EXPECT_GE(big["q_value"].get<double>(), big["p_value"].get<double>());
  const auto& small = j["groups"][3];
  EXPECT_EQ(small["verdict"], "insufficient data");
  EXPECT_TRUE(small["p_value"].is_null());
  EXPECT_TRUE(small["ci"].is_null());
  EXPECT_EQ(j["min_sample"], 20);
  EXPECT_EQ(j["groups_tested"], 2);
  EXPECT_NE(j["fdr_note"].get<std::string>().find("Benjamini-Hochberg"), std::string::npos);
  EXPECT_NE(j["ci_method"].get<std::string>().find("bootstrap"), std::string::npos);
}

// 20,000 values 1..20,000 in A and 5,000 in B, shuffled: the q-quantile of A
// is 1 + floor(q (n - 1)); B is too small for p99.99.
TEST(CompareOutput, AskedQuantilesAreExactOrNotAvailable) {
  std::vector<double> a, b;
  for (int i = 1; i <= 20000; ++i) a.push_back(i);
  for (int i = 1; i <= 5000; ++i) b.push_back(2 * i);
  std::mt19937_64 rng(5);
  std::shuffle(a.begin(), a.end(), rng);
  std::vector<GroupSamples> groups(1);
  groups[0].group = "all";
  groups[0].a = ArmDistribution::exact(a);
  groups[0].b = ArmDistribution::exact(b);
  CompareOptions o = options(Measure::kRtt, "all");
  o.quantiles = *parse_quantiles("99.99,50,99.9", nullptr);
  const CompareResult r = compare_groups(std::move(groups), o);
  const GroupResult& g = r.groups[0];
  ASSERT_EQ(g.a.quantiles.size(), 3u);
  EXPECT_EQ(g.a.quantiles[0].value, 10000.0);  // rank floor(0.5 * 19999) = 9999
  EXPECT_EQ(g.a.quantiles[1].value, 19980.0);  // rank floor(0.999 * 19999) = 19979
  EXPECT_EQ(g.a.quantiles[2].value, 19998.0);  // rank floor(0.9999 * 19999) = 19997
  EXPECT_EQ(g.b.quantiles[1].value, 9990.0);   // 2 * (1 + floor(0.999 * 4999))
  EXPECT_FALSE(g.b.quantiles[2].value);        // 5000 < 10000

  const auto j = nlohmann::json::parse(compare_result_json(r).dump());
  const auto& arm_a = j["groups"][0]["a"];
  EXPECT_EQ(arm_a["p50"], 10000);
  EXPECT_EQ(arm_a["p99.9"], 19980);
  EXPECT_EQ(arm_a["p99.99"], 19998);
  EXPECT_FALSE(arm_a.contains("p90"));
  EXPECT_TRUE(j["groups"][0]["b"]["p99.99"].is_null());
  EXPECT_EQ(j["groups"][0]["b"]["p99.9"], 9990);
  EXPECT_EQ(j["quantiles"], nlohmann::json::parse(R"([{"key": "p50", "q": 0.5, "min_n": 2},
      {"key": "p99.9", "q": 0.999, "min_n": 1000}, {"key": "p99.99", "q": 0.9999, "min_n": 10000}])"));
  EXPECT_NE(j["quantile_note"].get<std::string>().find("p99.99: 10000"), std::string::npos) << j["quantile_note"];

  const std::string t = format_compare_table(r);
  for (const char* h : {"A p50", "A p99.9", "A p99.99", "B p50", "B p99.9", "B p99.99"})
    EXPECT_NE(t.find(h), std::string::npos) << h << "\n" << t;
  EXPECT_EQ(t.find("A p90"), std::string::npos) << t;
  EXPECT_NE(t.find("n/a"), std::string::npos) << t;
  EXPECT_NE(t.find("\nQuantiles: the q-quantile is the order statistic"), std::string::npos) << t;
  // The default quantiles on arms that hold them all: no n/a, no note.
  const std::string full = format_compare_table(compare_groups(
      {GroupSamples{"all", std::nullopt, 0, ArmDistribution::exact(a), ArmDistribution::exact(b)}},
      options(Measure::kRtt, "all")));
  EXPECT_EQ(full.find("n/a"), std::string::npos) << full;
}

TEST(CompareOutput, TableIsAlignedAndExplainsItself) {
  const std::string t = format_compare_table(sample_result());
  EXPECT_NE(t.find("b better"), std::string::npos);
  EXPECT_NE(t.find("insufficient data"), std::string::npos);
  EXPECT_NE(t.find("Benjamini-Hochberg"), std::string::npos);
  EXPECT_NE(t.find("fewer than 20 flows"), std::string::npos);
  EXPECT_NE(t.find("bootstrap"), std::string::npos);
  // Header and rows: every column starts at the same offset.
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < t.size()) {
    size_t nl = t.find('\n', start);
    lines.push_back(t.substr(start, nl - start));
    start = nl + 1;
  }
  size_t header = 0;
  while (header < lines.size() && lines[header].rfind("asn ", 0) != 0) ++header;
  ASSERT_LT(header + 4, lines.size());
  const size_t verdict_col = lines[header].find("verdict");
  const size_t n_a_end = lines[header].find("n_a") + 3;
  for (size_t i = header + 1; i <= header + 4; ++i) {
    ASSERT_GT(lines[i].size(), verdict_col) << lines[i];
    EXPECT_NE(lines[i][verdict_col], ' ') << "verdict left-aligned: " << lines[i];
    EXPECT_EQ(lines[i][verdict_col - 1], ' ') << lines[i];
    EXPECT_NE(lines[i][n_a_end - 1], ' ') << "n_a right-aligned: " << lines[i];
    EXPECT_EQ(lines[i][n_a_end], ' ') << lines[i];
  }
}

TEST(CompareOutput, TableColumnsLineUpWithUtf8GroupNames) {
  CompareResult r = sample_result();
  const std::string names[] = {"Telef\xC3\xB3nica de Espa\xC3\xB1" "a", "\xE4\xB8\xAD\xE5\x9B\xBD\xE7\x94\xB5\xE4\xBF\xA1"};
  for (size_t i = 0; i < r.groups.size(); ++i) r.groups[i].group = names[i / 2 % 2];
  const std::string t = format_compare_table(r);
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = t.find('\n', at)) != std::string::npos; at = nl + 1) lines.push_back(t.substr(at, nl - at));
  size_t header = 0;
  while (header < lines.size() && lines[header].rfind("asn ", 0) != 0) ++header;
  ASSERT_LT(header + 4, lines.size()) << t;
  // n_a is right-aligned: it ends in the same terminal column on every line.
  const std::string& h = lines[header];
  const size_t n_a_end = display_width(h.substr(0, h.find("n_a") + 3));
  for (size_t i = header + 1; i <= header + 4; ++i) {
    const std::string& row = lines[i];
    const std::string& name = row.find(names[0]) != std::string::npos ? names[0] : names[1];
    ASSERT_EQ(row.find(name), 0u) << t;
    size_t at = row.find_first_not_of(' ', name.size());  // the size class
    at = row.find_first_not_of(' ', row.find(' ', at));   // n_a
    EXPECT_EQ(display_width(row.substr(0, row.find(' ', at))), n_a_end) << t;
  }
}

TEST(CompareOutput, TopKeepsWholeGroupsButTestsEverything) {
  std::mt19937_64 rng(9);
  std::lognormal_distribution<double> d(10, 0.7);
  std::vector<GroupSamples> groups;
  for (int i = 0; i < 5; ++i) {
    GroupSamples g;
    g.group = "g" + std::to_string(i);
    std::vector<double> a, b;
    for (int k = 0; k < 30 + 10 * i; ++k) a.push_back(d(rng)), b.push_back(d(rng));
    g.a = ArmDistribution::exact(a);
    g.b = ArmDistribution::exact(b);
    groups.push_back(std::move(g));
  }
  CompareOptions o = options(Measure::kRtt, "asn");
  o.top = 2;
  const CompareResult r = compare_groups(std::move(groups), o);
  ASSERT_EQ(r.groups.size(), 2u);
  EXPECT_EQ(r.groups[0].group, "g4");
  EXPECT_EQ(r.groups[1].group, "g3");
  EXPECT_EQ(r.groups_tested, 5u);
  EXPECT_EQ(r.groups_total, 5u);
}

}  // namespace
}  // namespace tcpscope
