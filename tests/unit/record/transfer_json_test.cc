#include "record/transfer_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>

#include "../record_fixtures.h"

namespace tcpscope {
namespace {

TransferRecord sample() {
  TransferRecord r;
  set_transfer_flow(&r, "fd00::2", 51234);
  r.netns = 4026531840u;
  r.sampling_rate = 16;
  r.seq = 2;
  r.direction = TransferDirection::kSend;
  r.start_ns = 1700000000123456789;
  r.end_ns = 1700000000373456789;
  r.xfer_us = 250000;
  r.bytes = 18446744073709551615ULL;  // u64 max survives
  r.retrans_segs = 3;
  r.srtt_us = 21000;
  r.min_rtt_us = 20000;
  set_chrono_us(&r, 250000, 1000, 2000);
  r.cc = "bbr";
  r.enrichment = {"pop-to-pop", 64501, "Example \"Wireless\" \\ Net", "client-ab", "bbr-vs-cubic", "bbr"};
  return r;
}

nlohmann::json line_of(const TransferRecord& r) {
  std::string out;
  append_transfer_json(r, &out);
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line, ending in a newline";
  EXPECT_EQ(out.rfind("{\"kind\":\"transfer\",", 0), 0u) << "kind comes first";
  return nlohmann::json::parse(out);
}

TEST(TransferJson, EverySpecFieldAndNothingElseButTheExtensions) {
  const auto j = line_of(sample());
  const std::set<std::string> spec = {
      "kind",     "flow_start_ns", "family",     "laddr",        "lport",           "raddr",
      "rport",    "dir",           "seq",        "direction",    "start_ns",        "end_ns",
      "xfer_us",  "wait_us",       "bytes",      "retrans_segs", "srtt_us",         "min_rtt_us",
      "busy_us",  "rwnd_limited_us", "sndbuf_limited_us", "cc",  "peer_class",      "asn",
      "as_org",   "cc_rule",       "experiment", "arm",          "service"};
  std::set<std::string> got;
  for (const auto& [key, value] : j.items()) got.insert(key);
  std::set<std::string> want = spec;
  want.insert("netns");
  want.insert("delimited_by");
  want.insert("sampling_rate");
  for (const char* owner : {"unit", "container_id", "pod_uid", "sock_cgroup_id"}) want.insert(owner);
  EXPECT_EQ(got, want);
}

TEST(TransferJson, Values) {
  const auto j = line_of(sample());
  EXPECT_EQ(j["kind"], "transfer");
  EXPECT_EQ(j["flow_start_ns"].get<int64_t>(), 1700000000000000000);
  EXPECT_EQ(j["family"], 6);
  EXPECT_EQ(j["laddr"], "198.18.0.1");
  EXPECT_EQ(j["raddr"], "fd00::2");
  EXPECT_EQ(j["lport"], 443);
  EXPECT_EQ(j["rport"], 51234);
  EXPECT_EQ(j["dir"], "passive");
  EXPECT_EQ(j["seq"], 2);
  EXPECT_EQ(j["direction"], "send");
  EXPECT_EQ(j["delimited_by"], "write");
  EXPECT_EQ(j["sampling_rate"], 16);
  EXPECT_EQ(j["start_ns"].get<int64_t>(), 1700000000123456789);
  EXPECT_EQ(j["end_ns"].get<int64_t>(), 1700000000373456789);
  EXPECT_EQ(j["xfer_us"], 250000);
  EXPECT_EQ(j["bytes"].get<uint64_t>(), 18446744073709551615ULL);
  EXPECT_EQ(j["retrans_segs"], 3);
  EXPECT_EQ(j["srtt_us"], 21000);
  EXPECT_EQ(j["min_rtt_us"], 20000);
  EXPECT_EQ(j["busy_us"], 250000);
  EXPECT_EQ(j["rwnd_limited_us"], 1000);
  EXPECT_EQ(j["sndbuf_limited_us"], 2000);
  EXPECT_EQ(j["cc"], "bbr");
  EXPECT_EQ(j["peer_class"], "pop-to-pop");
  EXPECT_EQ(j["asn"], 64501);
  EXPECT_EQ(j["as_org"], "Example \"Wireless\" \\ Net");
  EXPECT_EQ(j["cc_rule"], "client-ab");
  EXPECT_EQ(j["experiment"], "bbr-vs-cubic");
  EXPECT_EQ(j["arm"], "bbr");
  EXPECT_EQ(j["netns"].get<uint32_t>(), 4026531840u);
}

TEST(TransferJson, NoWaitAndNoRuleAreNull) {
  TransferRecord r = sample();
  r.wait_us.reset();
  r.enrichment.cc_rule.reset();
  r.enrichment.experiment.reset();
  r.enrichment.arm.reset();
  r.direction = TransferDirection::kRecv;
  auto j = line_of(r);
  ASSERT_TRUE(j.contains("wait_us"));
  EXPECT_TRUE(j["wait_us"].is_null());
  EXPECT_TRUE(j["cc_rule"].is_null());
  EXPECT_TRUE(j["experiment"].is_null());
  EXPECT_TRUE(j["arm"].is_null());
  EXPECT_EQ(j["direction"], "recv");
  r.wait_us = 0;
  j = line_of(r);
  EXPECT_EQ(j["wait_us"], 0);
  r.wait_us = 4294967294;
  EXPECT_EQ(line_of(r)["wait_us"].get<int64_t>(), 4294967294);
}

TEST(TransferJson, LinesAppend) { expect_one_line_each(append_transfer_json, sample()); }

}  // namespace
}  // namespace tcpscope
