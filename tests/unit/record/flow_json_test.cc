#include "record/flow_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../record_fixtures.h"

namespace tcpscope {
namespace {

FlowRecord sample() {
  FlowRecord r;
  r.start_ns = 1700000000123456789;
  r.end_ns = 1700000001123456789;
  r.fct_us = 250000;
  r.duration_us = 1000000;
  set_passive_endpoints(&r, "fd00::2", 51234);
  r.outcome = Outcome::kReset;
  r.cc = "bbr";
  r.bytes_acked = 18446744073709551615ULL;  // u64 max survives
  r.enrichment.peer_class = "pop-to-pop";
  r.enrichment.asn = 64501;
  r.enrichment.as_org = "Example \"Wireless\" \\ Net";
  r.enrichment.cc_rule = "wireless-bbr";
  r.comm = std::string("we\x01ird\xff", 7);
  r.pid = 4242;
  return r;
}

TEST(FlowJson, OneValidObjectPerLineWithSpecFields) {
  std::string out;
  append_flow_json(sample(), &out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1);
  auto j = nlohmann::json::parse(out);
  for (const char* k : {"kind", "start_ns", "end_ns", "fct_us", "duration_us", "family", "laddr", "lport", "raddr",
                        "rport", "dir", "outcome", "cc", "srtt_us", "min_rtt_us", "rttvar_us", "cwnd",
                        "max_cwnd", "ssthresh", "mss", "bytes_acked", "bytes_received", "bytes_retrans",
                        "segs_out", "segs_in", "retrans_segs", "lost_segs", "delivery_rate_bps",
                        "pacing_rate_bps", "peer_class", "asn", "as_org", "cc_rule", "experiment", "arm",
                        "app_set_cc", "pid", "comm", "cgroup_id", "netns", "service"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["service"], "") << "no owner named: empty, as for an unknown one";
  EXPECT_EQ(j["kind"], "flow");
  EXPECT_EQ(out.rfind("{\"kind\":\"flow\",", 0), 0u) << "kind comes first";
  EXPECT_EQ(j["start_ns"].get<int64_t>(), 1700000000123456789);
  EXPECT_EQ(j["family"], 6);
  EXPECT_EQ(j["raddr"], "fd00::2");
  EXPECT_EQ(j["dir"], "passive");
  EXPECT_EQ(j["outcome"], "reset");
  EXPECT_EQ(j["bytes_acked"].get<uint64_t>(), 18446744073709551615ULL);
  EXPECT_EQ(j["as_org"], "Example \"Wireless\" \\ Net");
  EXPECT_EQ(j["cc_rule"], "wireless-bbr");
  EXPECT_TRUE(j["experiment"].is_null());
  EXPECT_TRUE(j["arm"].is_null());
  EXPECT_EQ(j["app_set_cc"], false);
}

TEST(FlowJson, TextIsUtf8InvalidBytesReplacedControlsEscaped) {
  std::string out;
  append_flow_json(sample(), &out);
  EXPECT_NE(out.find("\"comm\":\"we\\u0001ird\xEF\xBF\xBD\""), std::string::npos) << out;
  auto j = nlohmann::json::parse(out);  // throws on invalid UTF-8 or raw control bytes
  EXPECT_EQ(j["comm"], "we\x01ird\xEF\xBF\xBD");  // the invalid 0xff as U+FFFD

  FlowRecord r = sample();
  r.comm = "cl\xC3\xAF" "ent-\xC3\xBCtf8";
  r.enrichment.as_org = "\xE4\xB8\xAD\xE5\x9B\xBD\xE7\x94\xB5\xE4\xBF\xA1";
  out.clear();
  append_flow_json(r, &out);
  EXPECT_NE(out.find("\"comm\":\"cl\xC3\xAF" "ent-\xC3\xBCtf8\""), std::string::npos) << out;
  j = nlohmann::json::parse(out);
  EXPECT_EQ(j["comm"], r.comm);
  EXPECT_EQ(j["as_org"], r.enrichment.as_org);

  r.comm = "cut-name-abcd\xE4\xB8";  // 15 bytes, the kernel's cut inside a 3-byte character
  out.clear();
  append_flow_json(r, &out);
  EXPECT_EQ(nlohmann::json::parse(out)["comm"], "cut-name-abcd\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(FlowJson, LinesAppend) { expect_one_line_each(append_flow_json, sample()); }

}  // namespace
}  // namespace tcpscope
