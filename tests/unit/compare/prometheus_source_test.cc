// compare --prometheus: the PromQL it sends, the buckets it reads back, the
// bucket-resolution rule of the statistics, and its errors, against canned
// answers of the Prometheus query API served on a loopback port.
#include "compare/prometheus_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cli/compare_command.h"
#include "http/http_server.h"
#include "text/url_query.h"

#include "compare_options.h"

namespace tcpscope {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

PrometheusHistogram histogram(Measure m, SampleUnit u) {
  std::string why;
  auto h = prometheus_histogram(m, u, &why);
  EXPECT_TRUE(h) << why;
  return *h;
}

// One series of an instant-query vector.
nlohmann::json series(std::map<std::string, std::string> labels, const std::string& value) {
  return {{"metric", labels}, {"value", {1764064800.0, value}}};
}

std::string vector_answer(const nlohmann::json& result) {
  return nlohmann::json{{"status", "success"}, {"data", {{"resultType", "vector"}, {"result", result}}}}.dump();
}

// Cumulative buckets of one group from per-bucket counts at the fct bounds.
void add_group(nlohmann::json* result, const std::string& asn, const std::string& size_class,
               const std::vector<std::pair<std::string, double>>& cumulative) {
  for (const auto& [le, v] : cumulative) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", v);
    result->push_back(series({{"le", le}, {"asn", asn}, {"size_class", size_class}}, text));
  }
}

TEST(PromQuery, BuildsTheIncreaseQueryWithEscapedMatchers) {
  const auto h = histogram(Measure::kFct, SampleUnit::kTransfer);
  EXPECT_EQ(h.name, "tcpscope_transfer_seconds");
  std::string q, why;
  ASSERT_TRUE(prometheus_arm_query(h, sel("cc=bbr,asn=64501|64502,peer_class!=origin"), "asn", true, 300000, &q, &why))
      << why;
  EXPECT_EQ(q,
            "sum by (le, asn, size_class) (increase(tcpscope_transfer_seconds_bucket{direction=\"send\", cc=\"bbr\", "
            "asn=~\"64501|64502\", peer_class!=\"origin\"}[5m]))");
  // Several negated values, regex metacharacters and quotes in values.
  ASSERT_TRUE(prometheus_arm_query(histogram(Measure::kRtt, SampleUnit::kFlow),
                                   sel("peer_class!=a.b|c\"d"), "all", false, 3600000, &q, &why))
      << why;
  EXPECT_EQ(q, "sum by (le) (increase(tcpscope_srtt_seconds_bucket{peer_class!~\"a\\\\.b|c\\\"d\"}[1h]))");
  // by size_class: the label once.
  ASSERT_TRUE(prometheus_arm_query(histogram(Measure::kFct, SampleUnit::kFlow), sel("cc=cubic"), "size_class",
                                   true, 61500, &q, &why));
  EXPECT_EQ(q, "sum by (le, size_class) (increase(tcpscope_flow_completion_seconds_bucket{cc=\"cubic\"}[61500ms]))");
  EXPECT_EQ(histogram(Measure::kThroughput, SampleUnit::kTransfer).name,
            "tcpscope_transfer_throughput_bytes_per_second");
  EXPECT_EQ(histogram(Measure::kThroughput, SampleUnit::kFlow).scale, 1) << "bytes/s, the metric's unit";
}

TEST(PromQuery, EscapesStringsAndRegexes) {
  EXPECT_EQ(promql_string("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
  EXPECT_EQ(promql_string(std::string("x\x01y")), "\"x\\x01y\"");
  EXPECT_EQ(regex_escape("a.b|c(d)*[e]^$"), "a\\.b\\|c\\(d\\)\\*\\[e\\]\\^\\$");
}

TEST(PromQuery, RefusesFieldsTheHistogramsLack) {
  std::string q, why;
  const auto h = histogram(Measure::kThroughput, SampleUnit::kTransfer);
  EXPECT_FALSE(prometheus_arm_query(h, sel("arm=bbr"), "asn", false, 60, &q, &why));
  EXPECT_EQ(why, "field \"arm\" is not a label of tcpscope_transfer_throughput_bytes_per_second: with --prometheus, "
                 "selections and --by use peer_class, asn, service, cc only");
  // size_class only where the histogram has it (fct).
  EXPECT_FALSE(prometheus_arm_query(h, sel("cc=bbr"), "size_class", false, 60, &q, &why));
  EXPECT_NE(why.find("\"size_class\""), std::string::npos) << why;
  EXPECT_FALSE(prometheus_histogram(Measure::kRetrans, SampleUnit::kFlow, &why));
  EXPECT_NE(why.find("retrans is not available from Prometheus"), std::string::npos) << why;
}

TEST(PromQuery, ParsesRangesAndTimes) {
  EXPECT_EQ(parse_range_ms("1500ms"), 1500);
  EXPECT_EQ(parse_range_ms("90s"), 90000);
  EXPECT_EQ(parse_range_ms("5m"), 300000);
  EXPECT_EQ(parse_range_ms("1h"), 3600000);
  EXPECT_EQ(parse_range_ms("7d"), 7 * 86400000);
  for (const char* bad : {"", "h", "0h", "1", "1w", "-1h", "1.5h", "1hm", "99999999999d"})
    EXPECT_FALSE(parse_range_ms(bad)) << bad;
  EXPECT_EQ(parse_query_time("1764064800"), 1764064800.0);
  EXPECT_EQ(parse_query_time("1764064800.25"), 1764064800.25);
  EXPECT_EQ(parse_query_time("2025-11-25T10:00:00Z"), 1764064800.0);
  EXPECT_EQ(parse_query_time("2025-11-25T11:30:00.5+01:30"), 1764064800.5);
  for (const char* bad : {"", "yesterday", "2025-11-25", "2025-11-25T10:00:00", "2025-13-01T00:00:00Z", "1e9"})
    EXPECT_FALSE(parse_query_time(bad)) << bad;
}

TEST(PromBuckets, CumulativeCountsBecomeMonotoneRoundedBuckets) {
  std::vector<double> upper;
  std::vector<uint64_t> counts;
  std::string why;
  // increase() extrapolates each series on its own: non-integers and dips.
  ASSERT_TRUE(bucket_counts({{0.1, 2.4}, {0.2, 2.2}, {0.5, 7.6}, {kInf, 10.49}}, &upper, &counts, &why)) << why;
  EXPECT_EQ(upper, (std::vector<double>{0.1, 0.2, 0.5, kInf}));
  EXPECT_EQ(counts, (std::vector<uint64_t>{2, 0, 6, 2}));
  EXPECT_FALSE(bucket_counts({{0.1, 1}, {0.2, 2}}, &upper, &counts, &why));
  EXPECT_EQ(why, "no le=\"+Inf\" bucket");
}

TEST(PromBuckets, BinnedDistributionPlacesValuesInTheirBuckets) {
  const auto d = ArmDistribution::binned({100, 200, 500, kInf}, {10, 0, 5, 5});
  EXPECT_EQ(d.count(), 20u);
  EXPECT_TRUE(d.binned());
  // The first bucket at hi / 2, others at their geometric midpoint, +Inf at its lower bound.
  EXPECT_EQ(d.values(), (std::vector<double>{50, std::sqrt(200.0 * 500.0), 500}));
  EXPECT_EQ(d.cumulative(), (std::vector<uint64_t>{10, 15, 20}));
  EXPECT_DOUBLE_EQ(d.quantile(0.6), std::sqrt(200.0 * 500.0));  // rank 11: past the first bucket's 10
  const BucketBounds b = d.quantile_bucket(0.6);
  EXPECT_EQ(b.lo, 200);
  EXPECT_EQ(b.hi, 500);
  EXPECT_EQ(d.quantile_bucket(0.5).lo, 0);  // rank 9: the first bucket (0, 100]
  EXPECT_EQ(d.quantile_bucket(0.5).hi, 100);
  EXPECT_TRUE(std::isinf(d.quantile_bucket(1.0).hi));
  EXPECT_EQ(d.quantile(1.0), 500);  // the +Inf bucket at its lower bound
  EXPECT_THROW(ArmDistribution::binned({100, 100}, {1, 1}), std::invalid_argument);
  EXPECT_THROW(ArmDistribution::binned({100}, {1, 1}), std::invalid_argument);
}

CompareOptions fct_options() {
  CompareOptions o;
  o.metric = Measure::kFct;
  o.unit = SampleUnit::kTransfer;
  o.by = "asn";
  o.a = "cc=cubic";
  o.b = "cc=bbr";
  o.resamples = 2000;
  return o;
}

GroupSamples binned_group(const std::string& name, const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  const std::vector<double> bounds = {5000, 10000, 20000, 30000, 50000, 100000, kInf};  // us
  GroupSamples g;
  g.group = name;
  g.size_class = "lt_100k";
  g.a = ArmDistribution::binned(bounds, a);
  g.b = ArmDistribution::binned(bounds, b);
  return g;
}

TEST(PromResolution, MediansInOneBucketNeverGetAVerdict) {
  // B is clearly higher (the rank test agrees, p ~ 0) but both medians lie in
  // (10ms, 20ms]: the change of the median is unresolved.
  auto r = compare_groups({binned_group("same", {0, 4000, 6000, 0, 0, 0, 0}, {0, 1000, 6000, 3000, 0, 0, 0})},
                          fct_options());
  ASSERT_EQ(r.groups.size(), 1u);
  const auto& g = r.groups[0];
  ASSERT_TRUE(g.p_value);
  EXPECT_LT(*g.p_value, 1e-10);
  EXPECT_EQ(g.verdict, Verdict::kNoDifference);
  EXPECT_NE(g.resolution_note.find("unresolved at bucket resolution: the medians lie in the same bucket"),
            std::string::npos)
      << g.resolution_note;
  // The interval covers every change the buckets allow: 10/20 - 1 .. 20/10 - 1.
  ASSERT_TRUE(g.change.lo && g.change.hi);
  EXPECT_LE(*g.change.lo, -0.5);
  EXPECT_GE(*g.change.hi, 1.0);
  EXPECT_EQ(g.a.quantiles[0].bucket->lo, 10000);  // p50
  EXPECT_EQ(g.b.quantiles[0].bucket->hi, 20000);

  const auto j = compare_result_json(r);
  EXPECT_EQ(j["groups"][0]["verdict"], "no significant difference");
  EXPECT_EQ(j["groups"][0]["a"]["bucket_bounds"]["p50"], nlohmann::ordered_json::array({10000.0, 20000.0}));
  EXPECT_TRUE(j["groups"][0]["resolution_note"].is_string());
  EXPECT_TRUE(j["bucket_resolution_note"].is_string());
  const std::string table = format_compare_table(r);
  EXPECT_NE(table.find("unresolved at bucket resolution"), std::string::npos) << table;
  EXPECT_NE(table.find("(10.0ms, 20.0ms]"), std::string::npos) << table;
}

TEST(PromResolution, AdjacentBucketsAreUnresolvedTooAndFarOnesDecide) {
  auto r = compare_groups({binned_group("adjacent", {0, 0, 9000, 1000, 0, 0, 0}, {0, 0, 1000, 9000, 0, 0, 0}),
                           binned_group("far", {0, 0, 9000, 1000, 0, 0, 0}, {0, 0, 0, 0, 1000, 9000, 0})},
                          fct_options());
  ASSERT_EQ(r.groups.size(), 2u);
  for (const auto& g : r.groups) {
    if (g.group == "adjacent") {
      EXPECT_EQ(g.verdict, Verdict::kNoDifference);
      EXPECT_NE(g.resolution_note.find("adjacent buckets"), std::string::npos) << g.resolution_note;
      EXPECT_LE(*g.change.lo, 0);
    } else {
      // A in (10ms, 20ms], B in (50ms, 100ms]: at least +150 %, B is worse.
      EXPECT_EQ(g.verdict, Verdict::kABetter);
      EXPECT_TRUE(g.resolution_note.empty());
      EXPECT_NEAR(*g.change.lo, 50000.0 / 20000 - 1, 1e-12);
      EXPECT_NEAR(*g.change.hi, 100000.0 / 10000 - 1, 1e-12);
    }
  }
}

TEST(PromResolution, AHalfInfiniteIntervalStillDecidesOnItsFiniteSide) {
  // A's median in the first bucket (0, 5ms]: no finite upper bound, but B's
  // (50ms, 100ms] is at least 900 % above anything A's bucket holds.
  auto r = compare_groups({binned_group("low", {900, 100, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 100, 900, 0})}, fct_options());
  const auto& g = r.groups[0];
  EXPECT_FALSE(g.change.lo);
  EXPECT_FALSE(g.change.ci_reason.empty());
  EXPECT_EQ(g.verdict, Verdict::kABetter);
}

// A fake query API: canned answers per arm, recognised by the cc matcher.
struct FakePrometheus {
  std::unique_ptr<HttpServer> server;
  std::vector<std::string> queries;
  std::string answer_a, answer_b;

  FakePrometheus() {
    std::string error;
    server = HttpServer::start("127.0.0.1:0", &error);
    EXPECT_TRUE(server) << error;
    server->handle_json("/api/v1/query", [this](const std::string& query) {
      const auto params = parse_query_string(query);
      const std::string q = params.count("query") ? params.at("query") : "";
      queries.push_back(q + (params.count("time") ? " @" + params.at("time") : ""));
      if (q.find("cc=\"cubic\"") != std::string::npos) return answer_a;
      if (q.find("cc=\"bbr\"") != std::string::npos) return answer_b;
      throw std::invalid_argument("unexpected query " + q);
    });
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
};

int run(const std::vector<std::string>& args, std::string* out, std::string* err) {
  std::ostringstream o, e;
  const int rc = compare_command(args, o, e);
  *out = o.str();
  *err = e.str();
  return rc;
}

TEST(PromSource, CollectsGroupsFromCannedAnswers) {
  FakePrometheus fake;
  nlohmann::json a = nlohmann::json::array(), b = nlohmann::json::array();
  // 64501: 100 transfers per arm; B a little faster, within the same buckets.
  add_group(&a, "64501", "lt_100k", {{"0.01", 10}, {"0.02", 60.4}, {"0.05", 99.8}, {"+Inf", 100.2}});
  add_group(&b, "64501", "lt_100k", {{"0.01", 30}, {"0.02", 80}, {"0.05", 100}, {"+Inf", 100}});
  // ge_3m is above throughput_min_bytes: not fct's population.
  add_group(&a, "64501", "ge_3m", {{"0.01", 0}, {"+Inf", 50}});
  // A group that did not grow over the range.
  add_group(&a, "other", "100k_1m", {{"0.01", 0}, {"+Inf", 0}});
  add_group(&b, "64502", "100k_1m", {{"0.01", 1}, {"0.02", 3}, {"+Inf", 3}});
  fake.answer_a = vector_answer(a);
  fake.answer_b = vector_answer(b);
  std::string out, err;
  ASSERT_EQ(run({"--prometheus", fake.url(), "--a", "cc=cubic", "--b", "cc=bbr", "--by", "asn", "--range", "5m",
                 "--time", "2025-11-25T10:00:00Z", "--json"},
                &out, &err),
            0)
      << err;
  ASSERT_EQ(fake.queries.size(), 2u);
  EXPECT_EQ(fake.queries[0],
            "sum by (le, asn, size_class) (increase(tcpscope_transfer_seconds_bucket{direction=\"send\", "
            "cc=\"cubic\"}[5m])) @1764064800.000");
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["source"], "prometheus " + fake.url());
  ASSERT_EQ(j["groups"].size(), 2u);
  const auto& g = j["groups"][0];
  EXPECT_EQ(g["group"], "64501");
  EXPECT_EQ(g["size_class"], "lt_100k");
  EXPECT_EQ(g["n_a"], 100);  // 100.2 rounded
  EXPECT_EQ(g["n_b"], 100);
  EXPECT_EQ(g["a"]["bucket_bounds"]["p50"], nlohmann::json::array({10000.0, 20000.0}));
  EXPECT_EQ(g["verdict"], "no significant difference");
  EXPECT_EQ(j["groups"][1]["group"], "64502");
  EXPECT_EQ(j["groups"][1]["n_a"], 0);
  EXPECT_EQ(j["groups"][1]["n_b"], 3);
  const std::string notes = j["notes"].dump();
  EXPECT_NE(notes.find("left out: ge_3m"), std::string::npos) << notes;
  EXPECT_NE(notes.find("asn \\\"other\\\""), std::string::npos) << notes;
  EXPECT_NE(notes.find("over the 5m ending at 2025-11-25T10:00:00Z"), std::string::npos) << notes;
}

// --by service: the query groups by the service label, and a series without
// it (Prometheus drops empty labels: the unknown service "") is group "".
TEST(PromSource, GroupsByServiceWithTheUnknownServiceAsEmpty) {
  FakePrometheus fake;
  nlohmann::json a = nlohmann::json::array(), b = nlohmann::json::array();
  auto add = [](nlohmann::json* result, std::map<std::string, std::string> labels,
                const std::vector<std::pair<std::string, double>>& cumulative) {
    for (const auto& [le, v] : cumulative) {
      labels["le"] = le;
      result->push_back(series(labels, std::to_string(v)));
    }
  };
  add(&a, {{"service", "nginx.service"}, {"size_class", "lt_100k"}}, {{"0.01", 10}, {"0.02", 60}, {"+Inf", 100}});
  add(&b, {{"service", "nginx.service"}, {"size_class", "lt_100k"}}, {{"0.01", 30}, {"0.02", 80}, {"+Inf", 100}});
  add(&a, {{"size_class", "lt_100k"}}, {{"0.01", 4}, {"+Inf", 7}});
  add(&b, {{"service", "other"}, {"size_class", "lt_100k"}}, {{"0.01", 1}, {"+Inf", 2}});
  fake.answer_a = vector_answer(a);
  fake.answer_b = vector_answer(b);
  std::string out, err;
  ASSERT_EQ(run({"--prometheus", fake.url(), "--a", "cc=cubic,service!=cron.service", "--b", "cc=bbr", "--by",
                 "service", "--range", "1h", "--json"},
                &out, &err),
            0)
      << err;
  ASSERT_EQ(fake.queries.size(), 2u);
  EXPECT_EQ(fake.queries[0],
            "sum by (le, service, size_class) (increase(tcpscope_transfer_seconds_bucket{direction=\"send\", "
            "cc=\"cubic\", service!=\"cron.service\"}[1h]))");
  const auto j = nlohmann::json::parse(out);
  std::map<std::string, std::pair<int, int>> n;  // group -> (n_a, n_b)
  for (const auto& g : j["groups"]) n[g["group"].get<std::string>()] = {g["n_a"].get<int>(), g["n_b"].get<int>()};
  EXPECT_EQ(n, (std::map<std::string, std::pair<int, int>>{
                   {"", {7, 0}}, {"nginx.service", {100, 100}}, {"other", {0, 2}}}));
  EXPECT_NE(j["notes"].dump().find("service \\\"other\\\""), std::string::npos) << j["notes"].dump();
}

// --quantiles from histograms: the bucket each lies in, with the same rule
// for an arm too small to hold one.
TEST(PromSource, AskedQuantilesAreTheBucketsTheyLieIn) {
  FakePrometheus fake;
  nlohmann::json a = nlohmann::json::array(), b = nlohmann::json::array();
  // A: 2000 transfers; rank floor(0.999 * 1999) = 1997 lies in (20ms, 50ms]. B: 500, too few for p99.9.
  add_group(&a, "64501", "lt_100k", {{"0.01", 1000}, {"0.02", 1990}, {"0.05", 1999}, {"+Inf", 2000}});
  add_group(&b, "64501", "lt_100k", {{"0.01", 400}, {"0.02", 500}, {"0.05", 500}, {"+Inf", 500}});
  fake.answer_a = vector_answer(a);
  fake.answer_b = vector_answer(b);
  const std::vector<std::string> args = {"--prometheus", fake.url(), "--a", "cc=cubic", "--b", "cc=bbr",
                                         "--by", "asn", "--quantiles", "99.9,50"};
  std::string out, err;
  auto with = [&args](std::vector<std::string> extra) {
    extra.insert(extra.begin(), args.begin(), args.end());
    return extra;
  };
  ASSERT_EQ(run(with({"--json"}), &out, &err), 0) << err;
  const auto j = nlohmann::json::parse(out);
  const auto& g = j["groups"][0];
  EXPECT_EQ(g["a"]["bucket_bounds"]["p50"], nlohmann::json::array({0.0, 10000.0}));
  EXPECT_EQ(g["a"]["bucket_bounds"]["p99.9"], nlohmann::json::array({20000.0, 50000.0}));
  EXPECT_DOUBLE_EQ(g["a"]["p99.9"].get<double>(), std::sqrt(20000.0 * 50000.0));  // the bucket's point
  EXPECT_TRUE(g["b"]["bucket_bounds"]["p99.9"].is_null());
  EXPECT_TRUE(g["b"]["p99.9"].is_null());
  EXPECT_FALSE(g["a"].contains("p90"));
  ASSERT_EQ(run(args, &out, &err), 0) << err;
  EXPECT_NE(out.find("A p99.9"), std::string::npos) << out;
  EXPECT_NE(out.find("(20.0ms, 50.0ms]"), std::string::npos) << out;
  EXPECT_NE(out.find("n/a"), std::string::npos) << out;
}

TEST(PromSource, FailuresAreOneLineNamingTheUrl) {
  FakePrometheus fake;
  std::string out, err;
  const std::vector<std::string> args = {"--prometheus", fake.url(), "--a", "cc=cubic", "--b", "cc=bbr"};
  auto one_line = [](const std::string& e) { return !e.empty() && e.find('\n') == e.size() - 1; };
  const std::string prefix = "tcpscope compare: GET " + fake.url() + "/api/v1/query: ";

  fake.answer_a = R"({"status":"error","errorType":"bad_data","error":"parse error at char 3"})";
  EXPECT_EQ(run(args, &out, &err), 1);
  EXPECT_EQ(err, prefix + "query failed: bad_data: parse error at char 3\n");

  fake.answer_a = "<html>not json</html>";
  EXPECT_EQ(run(args, &out, &err), 1);
  EXPECT_EQ(err, prefix + "answer is not JSON (not a Prometheus query API?)\n");

  fake.answer_a = R"({"status":"success","data":{"resultType":"matrix","result":[]}})";
  EXPECT_EQ(run(args, &out, &err), 1);
  EXPECT_EQ(err, prefix + "malformed answer: resultType \"matrix\", not \"vector\"\n");

  fake.answer_a = R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"le":"x"},"value":[1,"2"]}]}})";
  EXPECT_EQ(run(args, &out, &err), 1);
  EXPECT_EQ(err, prefix + "malformed answer: bucket bound le=\"x\"\n");

  fake.answer_a = R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"le":"1"},"value":[1,"2"]}]}})";
  fake.answer_b = fake.answer_a;
  EXPECT_EQ(run(args, &out, &err), 1);
  EXPECT_NE(err.find("no le=\"+Inf\" bucket"), std::string::npos) << err;
  EXPECT_TRUE(one_line(err)) << err;

  fake.answer_a = R"({"status":"success","data":{"resultType":"vector","result":{}}})";
  EXPECT_EQ(run(args, &out, &err), 1);
  EXPECT_TRUE(err.rfind(prefix + "malformed answer", 0) == 0) << err;
  EXPECT_TRUE(one_line(err)) << err;

  // HTTP error statuses carry the API's reason (the fake throws -> 400).
  EXPECT_EQ(run({"--prometheus", fake.url(), "--a", "cc=reno", "--b", "cc=bbr"}, &out, &err), 1);
  EXPECT_TRUE(err.rfind(prefix + "HTTP 400: unexpected query", 0) == 0) << err;
  EXPECT_TRUE(one_line(err)) << err;

  // Unreachable: the port of a stopped server.
  const std::string dead = fake.url();
  fake.server->stop();
  EXPECT_EQ(run({"--prometheus", dead, "--a", "cc=cubic", "--b", "cc=bbr", "--timeout-ms", "2000"}, &out, &err), 1);
  EXPECT_TRUE(err.rfind("tcpscope compare: GET " + dead + "/api/v1/query: connect", 0) == 0) << err;
  EXPECT_TRUE(one_line(err)) << err;
}

TEST(PromSource, CommandLineChecks) {
  std::string out, err;
  EXPECT_EQ(run({"--prometheus", "http://h", "--server", "http://h", "--a", "cc=a", "--b", "cc=b"}, &out, &err), 2);
  EXPECT_EQ(err.substr(0, err.find('\n')),
            "tcpscope compare: give exactly one of --flows FILE, --server URL, --clickhouse URL and --prometheus URL");
  EXPECT_EQ(run({"--prometheus", "http://h", "--range", "1w", "--a", "cc=a", "--b", "cc=b"}, &out, &err), 2);
  EXPECT_NE(err.find("--range wants"), std::string::npos) << err;
  EXPECT_EQ(run({"--flows", "x", "--range", "1h", "--a", "cc=a", "--b", "cc=b"}, &out, &err), 2);
  EXPECT_NE(err.find("--range and --time apply to --prometheus"), std::string::npos) << err;
  EXPECT_EQ(run({"--prometheus", "http://127.0.0.1:1", "--a", "arm=a", "--b", "cc=b"}, &out, &err), 1);
  EXPECT_EQ(err, "tcpscope compare: --a arm=a: field \"arm\" is not a label of tcpscope_transfer_seconds: with "
                 "--prometheus, selections and --by use peer_class, asn, service, cc, size_class only\n");
  EXPECT_EQ(run({"--prometheus", "http://127.0.0.1:1", "--metric", "retrans", "--a", "cc=a", "--b", "cc=b"}, &out,
                &err),
            1);
  EXPECT_NE(err.find("retrans is not available from Prometheus"), std::string::npos) << err;
}

}  // namespace
}  // namespace tcpscope
