#include "open_flows.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>

#include "flow_json.h"

namespace tcpscope {
namespace {

// A kernel record with every field set from `rng`, IPv4 or IPv6.
tcpscope_flow_event random_event(std::mt19937_64& rng) {
  tcpscope_flow_event ev{};
  auto* bytes = reinterpret_cast<unsigned char*>(&ev);
  for (size_t i = 0; i < sizeof(ev); ++i) bytes[i] = static_cast<unsigned char>(rng());
  ev.family = (rng() & 1) ? 4 : 6;
  ev.dir = (rng() & 1) ? TCPSCOPE_DIR_ACTIVE : TCPSCOPE_DIR_PASSIVE;
  ev.outcome = static_cast<uint8_t>(rng() % 5);
  ev.start_ns = 1'000'000'000 + rng() % 1'000'000'000;
  ev.established_ns = (rng() & 3) ? ev.start_ns + rng() % 1'000'000 : 0;
  ev.end_ns = ev.start_ns + rng() % 10'000'000'000;
  ev.data_end_ns = (rng() & 3) ? ev.start_ns + rng() % (ev.end_ns - ev.start_ns + 1) : 0;
  std::strcpy(ev.cc, (rng() & 1) ? "bbr" : "cubic");
  std::strcpy(ev.comm, "nginx");
  return ev;
}

TEST(OpenFlows, GivesBackEveryFlowAsAdded) {
  std::mt19937_64 rng(7);
  const MonotonicToRealtime clock(1'700'000'000'000'000'000);
  OpenFlows table(clock);
  std::vector<FlowRecord> added;
  const std::vector<std::string> classes = {"client", "pop-to-pop", ""};
  const std::vector<std::optional<std::string>> names = {std::nullopt, "", "bbr-wireless", "ab"};
  for (int i = 0; i < 500; ++i) {
    const tcpscope_flow_event ev = random_event(rng);
    FlowRecord f = decode_flow_event(ev, clock);
    f.asn = static_cast<uint32_t>(rng() % 4);
    f.as_org = f.asn ? "Org " + std::to_string(f.asn) : "";
    f.peer_class = classes[rng() % classes.size()];
    // nullopt and "" must stay apart: the JSON prints null for one.
    f.cc_rule = names[rng() % names.size()];
    f.experiment = names[rng() % names.size()];
    f.arm = names[rng() % names.size()];
    table.add(ev, f);
    added.push_back(f);
  }
  ASSERT_EQ(table.size(), added.size());
  std::string want = "[";
  for (size_t i = 0; i < added.size(); ++i) {
    std::string got_line, want_line;
    append_flow_json(table.record(i), &got_line);
    append_flow_json(added[i], &want_line);
    ASSERT_EQ(got_line, want_line) << "flow " << i;
    EXPECT_EQ(table.record(i).cc_rule, added[i].cc_rule);
    want += (i ? "," : "") + want_line.substr(0, want_line.size() - 1);
  }
  EXPECT_EQ(table.to_json(), want + "]\n");
}

TEST(OpenFlows, EmptyIsAnEmptyArray) { EXPECT_EQ(OpenFlows().to_json(), "[]\n"); }

TEST(OpenFlows, PagesJoinIntoTheWholeList) {
  std::mt19937_64 rng(11);
  const MonotonicToRealtime clock(1'700'000'000'000'000'000);
  OpenFlows table(clock);
  for (int i = 0; i < 25; ++i) {
    const tcpscope_flow_event ev = random_event(rng);
    table.add(ev, decode_flow_event(ev, clock));
  }
  const std::string whole = table.to_json();
  std::string joined = "[";
  for (size_t offset = 0; offset < 30; offset += 10) {
    std::string page = table.to_json(offset, 10);
    page = page.substr(1, page.size() - 3);  // without [ and ]\n
    if (page.empty()) continue;
    joined += (offset ? "," : "") + page;
  }
  EXPECT_EQ(joined + "]\n", whole);
  EXPECT_EQ(table.to_json(25, 10), "[]\n");
  EXPECT_EQ(table.to_json(1000, 10), "[]\n");
}

TEST(OpenFlows, QueryIsOffsetAndLimitOnly) {
  EXPECT_EQ(parse_flows_query("").limit, kMaxFlowsPage);
  const FlowsPage p = parse_flows_query("offset=20&limit=5");
  EXPECT_EQ(p.offset, 20u);
  EXPECT_EQ(p.limit, 5u);
  for (const char* bad : {"limit=0", "limit=10001", "offset=-1", "offset=1e3", "limit=", "peer_class=client",
                          "offset=99999999999"})
    EXPECT_THROW(parse_flows_query(bad), std::invalid_argument) << bad;
}

}  // namespace
}  // namespace tcpscope
