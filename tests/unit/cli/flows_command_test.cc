// `tcpscope flows`: --watch refreshes a bounded number of times against a
// live endpoint, and an empty list says why it may be empty.
#include "cli/flows_command.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/http_server.h"
#include "record/flow_json.h"
#include "record/flow_record.h"

namespace tcpscope {
namespace {

std::string one_flow_json() {
  FlowRecord f;
  f.cc = "bbr";
  f.enrichment.peer_class = "client";
  f.enrichment.asn = 64501;
  f.bytes_acked = 123456;
  f.srtt_us = 20000;
  f.laddr = *IpAddr::parse("198.18.0.1");
  f.raddr = *IpAddr::parse("198.18.0.2");
  std::string line;
  append_flow_json(f, &line);
  line.pop_back();
  return "[" + line + "]\n";
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(FlowsCommand, AnEmptyListSaysSnapshotsMayBeDisabled) {
  FlowsViewOptions o;
  const std::string table = format_flows_table(nlohmann::json::array(), o, 0);
  EXPECT_NE(table.find("0 of 0 open flows"), std::string::npos) << table;
  EXPECT_NE(table.find("snapshot_interval_s: 0"), std::string::npos) << table;
  EXPECT_NE(table.find("cannot be told from here"), std::string::npos) << table;
  // Flows exist but the filter hides them: a different reason.
  std::string why;
  o.filter = Selection::parse("cc=cubic", &why);
  const std::string filtered = format_flows_table(nlohmann::json::array(), o, 3);
  EXPECT_NE(filtered.find("none of the 3 open flows matches --filter cc=cubic"), std::string::npos) << filtered;
  EXPECT_EQ(filtered.find("snapshot_interval_s"), std::string::npos) << filtered;
  // Not printed when something is shown.
  const auto shown = nlohmann::json::parse(one_flow_json());
  EXPECT_EQ(format_flows_table(shown, FlowsViewOptions{}, 1).find("snapshot_interval_s"), std::string::npos);
}

TEST(FlowsCommand, WatchRefreshesTheGivenNumberOfTimes) {
  std::string error;
  auto server = HttpServer::start("127.0.0.1:0", &error);
  ASSERT_TRUE(server) << error;
  std::atomic<int> calls{0};
  // The first answer is empty (no snapshot yet), later ones hold a flow.
  server->handle_json("/api/v1/flows", [&](const std::string&) {
    return calls.fetch_add(1) == 0 ? std::string("[]\n") : one_flow_json();
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server->port());

  std::ostringstream out, err;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(flows_command({"--server", url, "--watch", "1", "--count", "3"}, out, err), 0) << err.str();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(calls.load(), 3);
  EXPECT_GE(took, 1.9);  // two pauses of 1 s between three fetches
  EXPECT_LT(took, 10);
  const std::string text = out.str();
  EXPECT_EQ(count_of(text, "open flows, sorted by"), 3u) << text;
  EXPECT_NE(text.find("refresh 1 of 3"), std::string::npos) << text;
  EXPECT_NE(text.find("refresh 3 of 3"), std::string::npos) << text;
  EXPECT_EQ(count_of(text, "snapshot_interval_s: 0"), 1u) << text;  // only the empty first frame
  EXPECT_EQ(count_of(text, "1 of 1 open flows"), 2u) << text;

  // --json: one array per line per refresh; the empty reason on stderr.
  calls = 0;
  std::ostringstream jout, jerr;
  EXPECT_EQ(flows_command({"--server", url, "--json", "--watch", "1", "--count", "2"}, jout, jerr), 0);
  std::istringstream lines(jout.str());
  std::vector<nlohmann::json> docs;
  for (std::string line; std::getline(lines, line);) docs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(docs.size(), 2u) << jout.str();
  EXPECT_TRUE(docs[0].is_array() && docs[0].empty());
  ASSERT_EQ(docs[1].size(), 1u);
  EXPECT_EQ(docs[1][0]["cc"], "bbr");
  EXPECT_NE(jerr.str().find("snapshot_interval_s: 0"), std::string::npos) << jerr.str();
}

TEST(FlowsCommand, WatchIsBounded) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--watch", "0"}, {"--watch", "3601"}, {"--watch", "0.5"}, {"--watch", "x"},
        {"--count", "2"}, {"--watch", "1", "--count", "0"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(flows_command(args, out, err), 2) << args[0] << " " << args[1];
    EXPECT_FALSE(err.str().empty());
  }
}

TEST(FlowsCommand, WatchOutlivesAnUnreachableDaemonAndReportsIt) {
  // Nothing listens on this port: every fetch fails, the watch still ends
  // after --count refreshes, with exit 1.
  std::string error;
  auto probe = HttpServer::start("127.0.0.1:0", &error);
  ASSERT_TRUE(probe) << error;
  const std::string url = "http://127.0.0.1:" + std::to_string(probe->port());
  probe.reset();
  std::ostringstream out, err;
  EXPECT_EQ(flows_command({"--server", url, "--watch", "1", "--count", "2", "--timeout-ms", "500"}, out, err), 1);
  EXPECT_EQ(count_of(err.str(), "tcpscope flows:"), 2u) << err.str();
}

}  // namespace
}  // namespace tcpscope
