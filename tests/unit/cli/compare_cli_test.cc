// The client side: the HTTP client, `tcpscope flows` and `tcpscope compare`
// end to end against a real HttpServer on a loopback port.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aggregate/flow_distributions.h"
#include "cli/compare_command.h"
#include "cli/flows_command.h"
#include "http/http_auth.h"
#include "http/http_server.h"
#include "net/http_client.h"
#include "record/flow_json.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"
#include "text/url_query.h"
#include "../temp_dir.h"

namespace tcpscope {
namespace {

std::unique_ptr<HttpServer> start_server() {
  std::string error;
  auto s = HttpServer::start("127.0.0.1:0", &error);
  EXPECT_TRUE(s) << error;
  return s;
}

std::string base(const HttpServer& s) { return "http://127.0.0.1:" + std::to_string(s.port()); }

// The URL as parse_http_url reads it; one it refuses fails the test.
HttpUrl parsed_url(const std::string& text) {
  HttpUrl u;
  std::string why;
  EXPECT_TRUE(parse_http_url(text, &u, &why)) << text << ": " << why;
  return u;
}

TEST(HttpClient, ParsesUrls) {
  HttpUrl u = parsed_url("http://127.0.0.1:9810");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "9810");
  EXPECT_EQ(u.target, "/");
  u = parsed_url("[::1]:9810/api/v1/flows?x=1");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.target, "/api/v1/flows?x=1");
  EXPECT_EQ(parsed_url("localhost").port, "80");
  std::string why;
  EXPECT_FALSE(parse_http_url("https://127.0.0.1:9810", &u, &why));
  EXPECT_FALSE(parse_http_url("http://127.0.0.1:99999", &u, &why));
  EXPECT_FALSE(parse_http_url("http://:80", &u, &why));
  EXPECT_EQ(join_url("http://h:1/", "/api"), "http://h:1/api");
  EXPECT_EQ(join_url("http://h:1", "api"), "http://h:1/api");
}

TEST(HttpClient, EncodesQueries) {
  EXPECT_EQ(url_encode("cc=bbr,peer_class=client|x y"), "cc%3Dbbr%2Cpeer_class%3Dclient%7Cx%20y");
  EXPECT_EQ(url_decode("cc%3Dbbr+x%zz"), "cc=bbr x%zz");
  const auto q = parse_query_string("a=cc%3Dcubic&b=cc%3Dbbr&flag&&by=asn");
  EXPECT_EQ(q.at("a"), "cc=cubic");
  EXPECT_EQ(q.at("b"), "cc=bbr");
  EXPECT_EQ(q.at("flag"), "");
  EXPECT_EQ(q.at("by"), "asn");
}

TEST(HttpClient, GetsJsonAndStatusesFromTheDaemonsServer) {
  auto server = start_server();
  ASSERT_TRUE(server);
  server->handle_json("/echo", [](const std::string& q) { return nlohmann::json{{"query", q}}.dump(); });
  server->handle_json("/bad", [](const std::string&) -> std::string { throw std::invalid_argument("no such thing"); });
  HttpResponse r;
  std::string error;
  ASSERT_TRUE(http_get(base(*server) + "/echo?a=cc%3Dbbr", 5000, &r, &error)) << error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(nlohmann::json::parse(r.body)["query"], "a=cc%3Dbbr");
  ASSERT_TRUE(http_get(base(*server) + "/missing", 5000, &r, &error)) << error;
  EXPECT_EQ(r.status, 404);
  ASSERT_TRUE(http_get(base(*server) + "/bad", 5000, &r, &error)) << error;
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"], "no such thing");

  const int port = server->port();
  server->stop();
  EXPECT_FALSE(http_get("http://127.0.0.1:" + std::to_string(port) + "/echo", 2000, &r, &error));
  EXPECT_NE(error.find("connect 127.0.0.1:" + std::to_string(port)), std::string::npos) << error;
  EXPECT_NE(error.find("Connection refused"), std::string::npos) << error;
}

TEST(HttpClient, Base64AndRedaction) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("a"), "YQ==");
  EXPECT_EQ(base64_encode("ab"), "YWI=");
  EXPECT_EQ(base64_encode("abc"), "YWJj");
  EXPECT_EQ(base64_encode("user:pass"), "dXNlcjpwYXNz");
  EXPECT_EQ(redact_url("http://ops:s3cret@127.0.0.1:9810/x?a=b@c"), "http://***@127.0.0.1:9810/x?a=b@c");
  EXPECT_EQ(redact_url("http://127.0.0.1:9810/x?a=b@c"), "http://127.0.0.1:9810/x?a=b@c");
  const HttpUrl u = parsed_url("http://ops:p%40ss@[::1]:9810/api");
  EXPECT_EQ(u.userinfo, "ops:p@ss");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.target, "/api");
}

TEST(HttpClient, SendsBasicCredentialsAndKeepsThemOutOfMessages) {
  auto server = std::unique_ptr<HttpServer>();
  HttpConfig security;
  security.basic_auth_user = "ops";
  security.basic_auth_password_sha256 = to_hex(sha256("s3cret"));
  std::string error;
  server = HttpServer::start("127.0.0.1:0", security, &error);
  ASSERT_TRUE(server) << error;
  server->handle_json("/api/v1/flows", [](const std::string&) { return std::string("[]"); });
  const std::string port = std::to_string(server->port());
  HttpResponse r;
  ASSERT_TRUE(http_get("http://127.0.0.1:" + port + "/api/v1/flows", 5000, &r, &error)) << error;
  EXPECT_EQ(r.status, 401);
  ASSERT_TRUE(http_get("http://ops:s3cret@127.0.0.1:" + port + "/api/v1/flows", 5000, &r, &error)) << error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body), nlohmann::json::array());
  ASSERT_TRUE(http_get("http://ops:wrong@127.0.0.1:" + port + "/api/v1/flows", 5000, &r, &error)) << error;
  EXPECT_EQ(r.status, 401);
  setenv("TCPSCOPE_BASIC_AUTH", "ops:s3cret", 1);
  ASSERT_TRUE(http_get("http://127.0.0.1:" + port + "/api/v1/flows", 5000, &r, &error)) << error;
  unsetenv("TCPSCOPE_BASIC_AUTH");
  EXPECT_EQ(r.status, 200);

  std::ostringstream out, err;
  EXPECT_EQ(flows_command({"--server", "http://ops:wrong@127.0.0.1:" + port}, out, err), 1);
  EXPECT_NE(err.str().find("401"), std::string::npos) << err.str();
  EXPECT_EQ(err.str().find("wrong"), std::string::npos) << "password in a message: " << err.str();
  server->stop();
  EXPECT_FALSE(http_get("http://ops:s3cret@127.0.0.1:" + port + "/x", 2000, &r, &error));
  EXPECT_EQ(error.find("s3cret"), std::string::npos) << error;
}

FlowRecord open_flow(const std::string& cc, uint32_t srtt_us, uint64_t bytes, int64_t age_s, int64_t now_ns) {
  FlowRecord f;
  f.cc = cc;
  f.srtt_us = srtt_us;
  f.bytes_acked = bytes;
  f.start_ns = now_ns - age_s * 1000000000LL;
  f.laddr = *IpAddr::parse("198.18.0.1");
  f.raddr = *IpAddr::parse("fd00::2");
  f.lport = 443;
  static uint16_t next_rport = 50000;  // each flow its own connection
  f.rport = next_rport++;
  f.dir = Direction::kPassive;
  f.enrichment.peer_class = "client";
  f.enrichment.asn = 64501;
  f.enrichment.as_org = "Test Wireless";
  f.kernel.cwnd = 10;
  f.comm = "nginx";
  f.pid = 42;
  return f;
}

std::string json_array(const std::vector<FlowRecord>& flows) {
  std::string out = "[";
  for (const auto& f : flows) {
    if (out.size() > 1) out += ",";
    append_flow_json(f, &out);
    out.pop_back();
  }
  return out + "]";
}

int run(int (*cmd)(const std::vector<std::string>&, std::ostream&, std::ostream&), std::vector<std::string> args,
        std::string* out, std::string* err) {
  std::ostringstream o, e;
  const int rc = cmd(args, o, e);
  *out = o.str();
  *err = e.str();
  return rc;
}

TEST(FlowsCommand, ShowsSortsFiltersAndLimitsTheDaemonsOpenFlows) {
  auto server = start_server();
  ASSERT_TRUE(server);
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string body = json_array({open_flow("cubic", 30000, 5000, 10, now), open_flow("bbr", 80000, 900000, 70, now),
                                       open_flow("bbr", 10000, 100, 4000, now)});
  server->handle_json("/api/v1/flows", [body](const std::string&) { return body; });
  std::string out, err;
  ASSERT_EQ(run(flows_command, {"--server", base(*server), "--sort", "srtt"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("LOCAL"), std::string::npos);
  EXPECT_NE(out.find("[fd00::2]:5000"), std::string::npos);
  EXPECT_NE(out.find("64501 Test Wireless"), std::string::npos);
  EXPECT_NE(out.find("nginx/42"), std::string::npos);
  EXPECT_NE(out.find("1m10s"), std::string::npos);  // age of the 70 s flow
  EXPECT_NE(out.find("1h06m"), std::string::npos);
  EXPECT_NE(out.find("3 of 3 open flows"), std::string::npos);
  // Largest srtt first: 80 ms, 30 ms, 10 ms.
  EXPECT_LT(out.find("80.0ms"), out.find("30.0ms"));
  EXPECT_LT(out.find("30.0ms"), out.find("10.0ms"));

  ASSERT_EQ(run(flows_command, {"--server", base(*server), "--json", "--filter", "cc=bbr", "--sort", "age", "--limit", "1"},
                &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["cc"], "bbr");
  EXPECT_EQ(j[0]["srtt_us"], 10000);  // the oldest bbr flow

  ASSERT_EQ(run(flows_command, {"--server", base(*server), "--json", "--sort", "bytes", "--reverse"}, &out, &err), 0);
  EXPECT_EQ(nlohmann::json::parse(out)[0]["bytes_acked"], 100);

  EXPECT_EQ(run(flows_command, {"--server", base(*server), "--sort", "Bad Field"}, &out, &err), 2);
  EXPECT_EQ(run(flows_command, {"--bogus"}, &out, &err), 2);
  const int port = server->port();
  server->stop();
  EXPECT_EQ(run(flows_command, {"--server", "http://127.0.0.1:" + std::to_string(port)}, &out, &err), 1);
  EXPECT_NE(err.find("Connection refused"), std::string::npos) << err;
}

// Synthetic finished flows: BBR 10 % faster in AS 64501.
std::vector<FlowRecord> finished_flows() {
  std::mt19937_64 rng(12);
  std::lognormal_distribution<double> fct(std::log(40000), 0.6);
  std::vector<FlowRecord> out;
  for (int i = 0; i < 6000; ++i) {
    FlowRecord f;
    f.cc = i % 2 ? "bbr" : "cubic";
    f.enrichment.asn = i % 3 ? 64501 : 64502;
    f.enrichment.peer_class = "client";
    f.bytes_acked = 20000 + static_cast<uint64_t>(i % 7) * 300000;  // all three fct size classes
    f.fct_us = static_cast<int64_t>(fct(rng) * (f.cc == "bbr" && f.enrichment.asn == 64501 ? 0.9 : 1.0));
    f.srtt_us = 20000;
    f.segs_out = 30;
    f.laddr = *IpAddr::parse("198.18.0.1");
    f.raddr = *IpAddr::parse("198.18.0.2");
    out.push_back(std::move(f));
  }
  return out;
}

// finished_flows() twice: as a flow log in a scratch directory, and in a
// daemon's distributions served on a loopback port.
struct LogAndDaemon {
  TempDir dir;
  std::string log = dir.file("flows.ndjson"), plot = dir.file("cdf.svg");
  FlowDistributions dist{FlowDistributionsOptions{}};
  std::unique_ptr<HttpServer> server = start_server();

  LogAndDaemon() {
    std::string lines;
    for (const auto& r : finished_flows()) {
      append_flow_json(r, &lines);
      dist.add(r, AsnLabel::kOwn);
    }
    dir.write("flows.ndjson", lines);
    EXPECT_TRUE(server);
    if (server)
      server->handle_json("/api/v1/distributions", [this](const std::string& q) { return dist.handle_query(q); });
  }
  // compare's JSON (`args` end with --json) from the log, drawing `plot`, and from the daemon.
  std::pair<nlohmann::json, nlohmann::json> compare_both(const std::vector<std::string>& args) {
    std::string out, err;
    std::vector<std::string> from_log = {"--flows", log, "--plot", plot};
    from_log.insert(from_log.end(), args.begin(), args.end());
    EXPECT_EQ(run(compare_command, from_log, &out, &err), 0) << err;
    auto exact = nlohmann::json::parse(out);
    std::vector<std::string> from_server = {"--server", base(*server)};
    from_server.insert(from_server.end(), args.begin(), args.end());
    EXPECT_EQ(run(compare_command, from_server, &out, &err), 0) << err;
    return {std::move(exact), nlohmann::json::parse(out)};
  }
  std::string plot_svg() const {
    std::ifstream p(plot);
    return std::string((std::istreambuf_iterator<char>(p)), std::istreambuf_iterator<char>());
  }
};

TEST(CompareCommand, ServerAndFlowLogGiveTheSameAnswer) {
  LogAndDaemon both;
  ASSERT_TRUE(both.server);
  const auto& server = both.server;
  const auto [exact, sketched] =
      both.compare_both({"--a", "cc=cubic", "--b", "cc=bbr", "--by", "asn", "--unit", "flow", "--json"});
  std::string out, err;

  ASSERT_EQ(exact["groups"].size(), sketched["groups"].size());
  ASSERT_GE(exact["groups"].size(), 6u);  // 2 ASNs x 3 size classes
  for (size_t i = 0; i < exact["groups"].size(); ++i) {
    const auto& e = exact["groups"][i];
    const auto& s = sketched["groups"][i];
    EXPECT_EQ(e["group"], s["group"]);
    EXPECT_EQ(e["size_class"], s["size_class"]);
    EXPECT_EQ(e["n_a"], s["n_a"]);
    EXPECT_EQ(e["n_b"], s["n_b"]);
    for (const char* arm : {"a", "b"}) {
      const double x = e[arm]["p50"], y = s[arm]["p50"];
      EXPECT_LE(std::abs(x - y) / x, 0.01 + 1e-12) << e["group"] << " " << arm;
    }
  }
  EXPECT_EQ(exact["groups"][0]["group"], "64501");
  EXPECT_EQ(exact["groups"][0]["verdict"], "b better");
  EXPECT_EQ(sketched["groups"][0]["verdict"], "b better");
  EXPECT_EQ(sketched["relative_accuracy"], 0.01);

  // The plot: an SVG with an A and a B curve per group.
  const std::string svg = both.plot_svg();
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  size_t curves_a = 0, curves_b = 0;
  for (size_t at = 0; (at = svg.find("class=\"cdf-a\"", at)) != std::string::npos; ++at) ++curves_a;
  for (size_t at = 0; (at = svg.find("class=\"cdf-b\"", at)) != std::string::npos; ++at) ++curves_b;
  EXPECT_EQ(curves_a, exact["groups"].size());
  EXPECT_EQ(curves_b, exact["groups"].size());

  // The table names the method, the FDR control and the server's error.
  ASSERT_EQ(run(compare_command,
                {"--server", base(*server), "--a", "cc=cubic", "--b", "cc=bbr", "--by", "asn", "--unit", "flow"}, &out,
                &err),
            0);
  EXPECT_NE(out.find("Benjamini-Hochberg"), std::string::npos);
  EXPECT_NE(out.find("within 1%"), std::string::npos);

  // Fields the daemon does not keep: the daemon's reason, exit 1.
  EXPECT_EQ(run(compare_command, {"--server", base(*server), "--a", "comm=nginx", "--b", "cc=bbr"}, &out, &err), 1);
  EXPECT_NE(err.find("400"), std::string::npos) << err;
  EXPECT_NE(err.find("use the flow log"), std::string::npos) << err;
}

// --quantiles through the CLI: the flow log's exact tail, the daemon's within
// its sketches' 1 %, null in both for an arm too small to hold it, and the
// plot marks what it has.
TEST(CompareCommand, QuantilesFromTheFlowLogAndTheServer) {
  LogAndDaemon both;
  ASSERT_TRUE(both.server);
  const auto [exact, sketched] = both.compare_both({"--a", "cc=cubic", "--b", "cc=bbr", "--by", "all", "--unit",
                                                    "flow", "--metric", "fct", "--quantiles", "99.99,99.9,50",
                                                    "--json"});

  // The 100k_1m flows of each cc (3000 flows each, 3 of 7 sizes), sorted: the exact order statistics.
  std::map<std::string, std::vector<double>> fct;
  for (const auto& r : finished_flows())
    if (r.bytes_acked >= 100000 && r.bytes_acked < 1000000) fct[r.cc].push_back(static_cast<double>(r.fct_us));
  const auto& e = exact["groups"];
  ASSERT_EQ(e.size(), 3u);  // the size classes below throughput_min_bytes
  ASSERT_EQ(e[1]["size_class"], "100k_1m");
  ASSERT_EQ(sketched["groups"].size(), 3u);
  for (const auto& [arm, cc] : {std::pair{"a", "cubic"}, {"b", "bbr"}}) {
    auto& v = fct[cc];
    std::sort(v.begin(), v.end());
    ASSERT_GE(v.size(), 1000u);
    ASSERT_LT(v.size(), 10000u);
    const auto at = [&v](double q) { return v[static_cast<size_t>(std::floor(q * static_cast<double>(v.size() - 1)))]; };
    EXPECT_EQ(e[1][arm]["p50"], at(0.5));
    EXPECT_EQ(e[1][arm]["p99.9"], at(0.999));
    EXPECT_TRUE(e[1][arm]["p99.99"].is_null());
    EXPECT_TRUE(e[0][arm]["p99.9"].is_null());  // lt_100k: about 430 flows
    EXPECT_FALSE(e[1][arm].contains("p90"));
    for (size_t i = 0; i < e.size(); ++i) {
      for (const char* q : {"p50", "p99.9", "p99.99"}) {
        const auto& x = e[i][arm][q];
        const auto& y = sketched["groups"][i][arm][q];
        ASSERT_EQ(x.is_null(), y.is_null()) << i << arm << q;
        if (!x.is_null()) {
          EXPECT_LE(std::abs(x.get<double>() - y.get<double>()) / x.get<double>(), 0.01 + 1e-12) << i << arm << q;
        }
      }
    }
  }
  EXPECT_EQ(exact["quantiles"][2]["key"], "p99.99");
  EXPECT_EQ(exact["quantiles"][2]["min_n"], 10000);

  // The plot marks every quantile an arm holds, never one it does not.
  const std::string svg = both.plot_svg();
  size_t held = 0;
  for (const auto& g : e)
    for (const char* arm : {"a", "b"})
      for (const char* q : {"p50", "p99.9", "p99.99"}) held += !g[arm][q].is_null();
  size_t marks = 0;
  for (size_t at = 0; (at = svg.find("<circle class=\"quantile-", at)) != std::string::npos; ++at) ++marks;
  EXPECT_EQ(marks, held);
  EXPECT_EQ(svg.find("data-quantile=\"p99.99\""), std::string::npos);

  // The table says n/a and why.
  std::string out, err;
  ASSERT_EQ(run(compare_command,
                {"--flows", both.log, "--a", "cc=cubic", "--b", "cc=bbr", "--by", "all", "--unit", "flow", "--quantiles",
                 "50,99.99"},
                &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("A p99.99"), std::string::npos) << out;
  EXPECT_NE(out.find("n/a"), std::string::npos) << out;
  std::istringstream words(out);  // the notes are wrapped: one space between words
  std::string w, text;
  while (words >> w) text += w + " ";
  EXPECT_NE(text.find("p99.99: 10000) cannot hold it"), std::string::npos) << out;
}

TEST(CompareCommand, PlotsPngThroughRsvgConvert) {
  if (system("command -v rsvg-convert > /dev/null 2>&1") != 0) GTEST_SKIP() << "rsvg-convert (librsvg2-bin) not installed";
  char dir[] = "/tmp/tcpscope-compare-png-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  const std::string log = std::string(dir) + "/flows.ndjson", png = std::string(dir) + "/cdf.png";
  {
    std::ofstream f(log);
    std::string lines;
    for (const auto& r : finished_flows()) append_flow_json(r, &lines);
    f << lines;
  }
  std::string out, err;
  ASSERT_EQ(run(compare_command, {"--flows", log, "--a", "cc=cubic", "--b", "cc=bbr", "--unit", "flow", "--plot", png},
                &out, &err),
            0)
      << err;
  std::ifstream p(png, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(p)), std::istreambuf_iterator<char>());
  ASSERT_GT(data.size(), 1000u);
  EXPECT_EQ(data.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(data.substr(12, 4), "IHDR");
  std::remove(png.c_str());
  std::remove(log.c_str());
  rmdir(dir);
}

// A hand-written mixed log: `tcpscope compare` compares transfers for fct and
// throughput unless told --unit flow, flows for rtt and retrans, says which
// in its JSON, and refuses the units a metric has none of in one line.
TEST(CompareCommand, UnitDefaultsToTransfersForFctAndThroughput) {
  char dir[] = "/tmp/tcpscope-compare-unit-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  const std::string log = std::string(dir) + "/flows.ndjson";
  FlowDistributions dist{FlowDistributionsOptions{}};
  {
    std::ofstream f(log);
    for (int i = 0; i < 40; ++i) {
      const std::string cc = i % 2 ? "bbr" : "cubic";
      const std::string common = "\"cc\": \"" + cc + "\", \"peer_class\": \"client\", \"asn\": 64501";
      // One flow (every third without "kind", as before transfers) carrying
      // a small response and a large one.
      f << "{" << (i % 3 ? "\"kind\": \"flow\", " : "") << common
        << ", \"outcome\": \"ok\", \"bytes_acked\": 4000000, \"bytes_received\": 400, \"fct_us\": "
        << 900000 + i << ", \"srtt_us\": 20000, \"segs_out\": 3000, \"retrans_segs\": 1}\n";
      const std::string send = "{\"kind\": \"transfer\", " + common + ", \"direction\": \"send\", ";
      f << send << "\"bytes\": 50000, \"xfer_us\": " << 1000 + i << ", \"rwnd_limited_us\": 0}\n";
      f << send << "\"bytes\": 3950000, \"xfer_us\": " << 400000 + i << ", \"rwnd_limited_us\": 0}\n";
      TransferRecord t;
      t.cc = cc;
      t.enrichment.peer_class = "client";
      t.enrichment.asn = 64501;
      t.bytes = 50000;
      t.xfer_us = 1000 + i;
      dist.add(t, AsnLabel::kOwn);
    }
  }
  std::string out, err;
  auto json_of = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--flows", log, "--a", "cc=cubic", "--b", "cc=bbr", "--by", "all", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run(compare_command, args, &out, &err), 0) << err;
    return nlohmann::json::parse(out);
  };
  auto fct = json_of({});
  EXPECT_EQ(fct["unit"], "transfer");
  ASSERT_EQ(fct["groups"].size(), 1u);  // the small transfers, all lt_100k
  EXPECT_EQ(fct["groups"][0]["n_a"], 20);
  EXPECT_EQ(fct["groups"][0]["a"]["p50"], 1018);
  auto fct_flows = json_of({"--unit", "flow"});
  EXPECT_EQ(fct_flows["unit"], "flow");
  EXPECT_TRUE(fct_flows["groups"].empty());  // every flow is above throughput_min_bytes
  const std::string plot = std::string(dir) + "/throughput.svg";
  auto tput = json_of({"--metric", "throughput", "--plot", plot});
  EXPECT_EQ(tput["unit"], "transfer");
  EXPECT_EQ(tput["groups"][0]["n_a"], 20);
  // Shown in bit/s: cubic's median is its 10th fastest large transfer (i = 20).
  EXPECT_EQ(tput["value_unit"], "bit/s");
  EXPECT_EQ(tput["groups"][0]["a"]["p50"].get<double>(), 8.0 * 3950000 / (400020 / 1e6));
  {
    // ~79 Mbit/s: the plot's decade ticks are round in bit/s.
    std::ifstream p(plot);
    const std::string svg((std::istreambuf_iterator<char>(p)), std::istreambuf_iterator<char>());
    EXPECT_NE(svg.find(">10Mbit/s<"), std::string::npos) << svg.substr(0, 3000);
    EXPECT_NE(svg.find(">100Mbit/s<"), std::string::npos) << svg.substr(0, 3000);
    char value[32];
    std::snprintf(value, sizeof(value), "%.17g", tput["groups"][0]["a"]["p50"].get<double>());
    EXPECT_NE(svg.find("data-quantile=\"p50\" data-value=\"" + std::string(value) + "\""), std::string::npos)
        << "A's p50 mark at " << value << " bit/s";
  }
  auto tput_flows = json_of({"--metric", "throughput", "--unit", "flow"});
  EXPECT_EQ(tput_flows["groups"][0]["n_a"], 20);
  EXPECT_LT(tput_flows["groups"][0]["a"]["p50"].get<double>(), tput["groups"][0]["a"]["p50"].get<double>());
  EXPECT_EQ(json_of({"--metric", "rtt"})["unit"], "flow");
  EXPECT_EQ(json_of({"--metric", "retrans"})["unit"], "flow");

  EXPECT_EQ(run(compare_command,
                {"--flows", log, "--a", "cc=a", "--b", "cc=b", "--metric", "rtt", "--unit", "transfer"}, &out, &err),
            2);
  EXPECT_EQ(err.rfind("tcpscope compare: --unit transfer: rtt is compared per flow only", 0), 0u) << err;
  EXPECT_NE(err.substr(0, err.find('\n')).find("(use --unit flow)"), std::string::npos) << err;
  EXPECT_EQ(run(compare_command, {"--flows", log, "--a", "cc=a", "--b", "cc=b", "--unit", "connection"}, &out, &err), 2);
  EXPECT_NE(err.find("--unit must be transfer or flow"), std::string::npos) << err;

  // --server asks the daemon for the unit, and the table says which it was.
  auto server = start_server();
  ASSERT_TRUE(server);
  server->handle_json("/api/v1/distributions", [&](const std::string& q) { return dist.handle_query(q); });
  ASSERT_EQ(run(compare_command,
                {"--server", base(*server), "--a", "cc=cubic", "--b", "cc=bbr", "--by", "all", "--json"}, &out, &err),
            0)
      << err;
  const auto sketched = nlohmann::json::parse(out);
  EXPECT_EQ(sketched["unit"], "transfer");
  EXPECT_EQ(sketched["groups"][0]["n_a"], 20);
  ASSERT_EQ(run(compare_command, {"--server", base(*server), "--a", "cc=cubic", "--b", "cc=bbr"}, &out, &err), 0);
  EXPECT_NE(out.find("unit: transfer"), std::string::npos) << out;
  EXPECT_NE(out.find("sketches of the transfers of the last"), std::string::npos) << out;

  // A daemon from before transfers rejects the parameter: the error says what to do.
  auto old = start_server();
  ASSERT_TRUE(old);
  old->handle_json("/api/v1/distributions", [](const std::string&) -> std::string {
    throw std::invalid_argument("unknown query parameter \"unit\" (metric, by, a, b)");
  });
  EXPECT_EQ(run(compare_command, {"--server", base(*old), "--a", "cc=cubic", "--b", "cc=bbr"}, &out, &err), 1);
  EXPECT_NE(err.find("a daemon from before transfers (--unit flow compares its flows)"), std::string::npos) << err;

  // A daemon from before distributions format versions: compared, and said.
  auto format_1 = start_server();
  ASSERT_TRUE(format_1);
  format_1->handle_json("/api/v1/distributions", [&](const std::string& q) {
    auto j = nlohmann::json::parse(dist.handle_query(q));
    j.erase("format_version");
    j.erase("value_unit");
    return j.dump();
  });
  ASSERT_EQ(
      run(compare_command, {"--server", base(*format_1), "--a", "cc=cubic", "--b", "cc=bbr", "--json"}, &out, &err), 0)
      << err;
  const auto notes = nlohmann::json::parse(out)["notes"];
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const nlohmann::json& n) {
    return n.get<std::string>().find("is an older tcpscope (distributions format 1, this compare's is 2).") !=
           std::string::npos;
  })) << notes.dump();

  std::remove(log.c_str());
  rmdir(dir);
}

TEST(CompareCommand, UsageErrors) {
  std::string out, err;
  EXPECT_EQ(run(compare_command, {"--a", "cc=cubic", "--b", "cc=bbr"}, &out, &err), 2);
  EXPECT_NE(err.find("--flows"), std::string::npos);
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--server", "y", "--a", "cc=cubic", "--b", "cc=bbr"}, &out, &err), 2);
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--a", "cc", "--b", "cc=bbr"}, &out, &err), 2);
  EXPECT_NE(err.find("--a"), std::string::npos);
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--a", "cc=a", "--b", "cc=b", "--metric", "speed"}, &out, &err), 2);
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--a", "cc=a", "--b", "cc=b", "--plot", "x.gif"}, &out, &err), 2);
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--a", "cc=a", "--b", "cc=b", "--alpha", "2"}, &out, &err), 2);
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--a", "cc=a", "--b"}, &out, &err), 2);
  EXPECT_EQ(run(compare_command, {"--flows", "/nonexistent/f.ndjson", "--a", "cc=a", "--b", "cc=b"}, &out, &err), 1);
  EXPECT_NE(err.find("/nonexistent/f.ndjson: No such file or directory"), std::string::npos) << err;
  EXPECT_EQ(run(compare_command, {"--help"}, &out, &err), 0);
  EXPECT_NE(out.find("usage: tcpscope compare"), std::string::npos);
  EXPECT_NE(out.find("--quantiles"), std::string::npos);
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--a", "cc=a", "--b", "cc=b", "--quantiles", "50,100"}, &out, &err),
            2);
  EXPECT_EQ(err.substr(0, err.find('\n')),
            "tcpscope compare: --quantiles wants percentages in (0, 100) with at most 9 decimals, separated by "
            "commas (e.g. 50,90,99,99.9,99.99): \"100\" is not one");
  EXPECT_EQ(run(compare_command, {"--flows", "x", "--a", "cc=a", "--b", "cc=b", "--quantiles", "p99"}, &out, &err), 2);
  EXPECT_NE(err.find("\"p99\" is not one"), std::string::npos) << err;
}

}  // namespace
}  // namespace tcpscope
