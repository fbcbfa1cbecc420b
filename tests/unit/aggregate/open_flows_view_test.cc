#include "aggregate/open_flows_view.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <random>
#include <stdexcept>

#include "record/flow_json.h"

namespace tcpscope {
namespace {

// A kernel record with every field set from `rng`, IPv4 or IPv6.
tcpscope_flow_event random_event(std::mt19937_64& rng) {
  tcpscope_flow_event ev{};
  auto* bytes = reinterpret_cast<unsigned char*>(&ev);
  for (size_t i = 0; i < sizeof(ev); ++i) bytes[i] = static_cast<unsigned char>(rng());
  ev.id.family = (rng() & 1) ? 4 : 6;
  ev.id.dir = (rng() & 1) ? TCPSCOPE_DIR_ACTIVE : TCPSCOPE_DIR_PASSIVE;
  ev.outcome = static_cast<uint8_t>(rng() % 5);
  ev.id.start_ns = 1'000'000'000 + rng() % 1'000'000'000;
  ev.established_ns = (rng() & 3) ? ev.id.start_ns + rng() % 1'000'000 : 0;
  ev.end_ns = ev.id.start_ns + rng() % 10'000'000'000;
  ev.data_end_ns = (rng() & 3) ? ev.id.start_ns + rng() % (ev.end_ns - ev.id.start_ns + 1) : 0;
  std::strcpy(ev.cc, (rng() & 1) ? "bbr" : "cubic");
  std::strcpy(ev.comm, "nginx");
  return ev;
}

TEST(OpenFlowsView, GivesBackEveryFlowAsAdded) {
  std::mt19937_64 rng(7);
  const MonotonicToRealtime clock(1'700'000'000'000'000'000);
  OpenFlowsView table(clock);
  std::vector<FlowRecord> added;
  const std::vector<std::string> classes = {"client", "pop-to-pop", ""};
  const std::vector<std::optional<std::string>> names = {std::nullopt, "", "bbr-wireless", "ab"};
  for (int i = 0; i < 500; ++i) {
    const tcpscope_flow_event ev = random_event(rng);
    FlowRecord f = decode_flow_event(ev, clock);
    f.enrichment.asn = static_cast<uint32_t>(rng() % 4);
    f.enrichment.as_org = f.enrichment.asn ? "Org " + std::to_string(f.enrichment.asn) : "";
    f.enrichment.peer_class = classes[rng() % classes.size()];
    // nullopt and "" must stay apart: the JSON prints null for one.
    f.enrichment.cc_rule = names[rng() % names.size()];
    f.enrichment.experiment = names[rng() % names.size()];
    f.enrichment.arm = names[rng() % names.size()];
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
    EXPECT_EQ(table.record(i).enrichment.cc_rule, added[i].enrichment.cc_rule);
    want += (i ? "," : "") + want_line.substr(0, want_line.size() - 1);
  }
  EXPECT_EQ(table.to_json(), want + "]\n");
}

TEST(OpenFlowsView, EmptyIsAnEmptyArray) { EXPECT_EQ(OpenFlowsView().to_json(), "[]\n"); }

// The table as the daemon fills it: flows in identity order.
OpenFlowsView sorted_table(std::vector<tcpscope_flow_event> events, const MonotonicToRealtime& clock) {
  sort_by_flow_identity(&events);
  OpenFlowsView table(clock);
  for (const auto& ev : events) table.add(ev, decode_flow_event(ev, clock));
  return table;
}

// The cursor a client makes of a page's last flow, from its JSON fields.
std::string cursor_of(const nlohmann::json& flow) {
  return std::to_string(flow["netns"].get<uint32_t>()) + "," + flow["dir"].get<std::string>() + "," +
         flow["laddr"].get<std::string>() + "," + std::to_string(flow["lport"].get<int>()) + "," +
         flow["raddr"].get<std::string>() + "," + std::to_string(flow["rport"].get<int>());
}

TEST(OpenFlowsView, PagesJoinIntoTheWholeList) {
  std::mt19937_64 rng(11);
  const MonotonicToRealtime clock(1'700'000'000'000'000'000);
  std::vector<tcpscope_flow_event> events;
  for (int i = 0; i < 25; ++i) events.push_back(random_event(rng));
  const OpenFlowsView table = sorted_table(events, clock);
  const nlohmann::json whole = nlohmann::json::parse(table.to_json());
  nlohmann::json joined = nlohmann::json::array();
  FlowsPage page{std::nullopt, 10};
  for (int n = 0; n < 10; ++n) {
    const nlohmann::json part = nlohmann::json::parse(table.to_json(page));
    for (const auto& f : part) joined.push_back(f);
    if (part.size() < page.limit) break;
    page.after = parse_identity(cursor_of(part.back()));
    ASSERT_TRUE(page.after) << cursor_of(part.back());
  }
  EXPECT_EQ(joined, whole);

  // The cursor's flow closed before the next snapshot: the next page starts
  // at the first flow after it all the same, nothing repeated or skipped.
  const std::string cursor = cursor_of(whole[9]);
  std::vector<tcpscope_flow_event> later;
  for (const auto& ev : events)
    if (identity_text(identity_of(ev)) != cursor) later.push_back(ev);
  ASSERT_EQ(later.size(), events.size() - 1);
  const nlohmann::json next =
      nlohmann::json::parse(sorted_table(later, clock).to_json(FlowsPage{parse_identity(cursor), 10}));
  ASSERT_EQ(next.size(), 10u);
  EXPECT_EQ(next[0], whole[10]);
}

TEST(OpenFlowsView, QueryIsAfterAndLimitOnly) {
  EXPECT_EQ(parse_flows_query("").limit, kMaxFlowsPage);
  EXPECT_FALSE(parse_flows_query("").after);
  const FlowsPage p = parse_flows_query("after=4026531840%2Cpassive%2Cfd00%3A%3A1%2C443%2C198.18.0.2%2C50000&limit=5");
  ASSERT_TRUE(p.after);
  EXPECT_EQ(identity_text(*p.after), "4026531840,passive,fd00::1,443,198.18.0.2,50000");
  EXPECT_EQ(p.limit, 5u);
  for (const char* bad : {"limit=0", "limit=10001", "limit=", "offset=20", "peer_class=client", "after=1,2,3",
                          "after=1%2Csideways%2C1.2.3.4%2C1%2C1.2.3.4%2C2", "after=1%2Cactive%2Cx%2C1%2C1.2.3.4%2C2",
                          "after=1%2Cactive%2C1.2.3.4%2C70000%2C1.2.3.4%2C2"})
    EXPECT_THROW(parse_flows_query(bad), std::invalid_argument) << bad;
}

}  // namespace
}  // namespace tcpscope
