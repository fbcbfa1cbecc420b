#pragma once
// The open flows of the last snapshot, served by /api/v1/flows (and so by
// `tcpscope flows`). Each is kept as the kernel's 256-byte record plus what
// enrichment and the policy added, as ids into one table of strings; it is
// decoded again only when asked for. A decoded FlowRecord costs ~650 bytes
// of heap, which at 1M open flows was the daemon's largest memory term
// (bench/README.md, "Memory").
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "flow_decoder.h"
#include "flow_record.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

// Who a flow is, as its record says (netns, dir, laddr, lport, raddr,
// rport); the open-flow list is kept in this order.
struct FlowIdentity {
  uint32_t netns = 0;
  Direction dir = Direction::kActive;
  IpAddr laddr;
  uint16_t lport = 0;
  IpAddr raddr;
  uint16_t rport = 0;
  bool operator<(const FlowIdentity& o) const;
};
FlowIdentity identity_of(const tcpscope_flow_event& ev);
// "NETNS,DIR,LADDR,LPORT,RADDR,RPORT", e.g. "4026531840,passive,198.18.0.1,443,198.18.0.2,50000":
// the fields of a flow-log record, for a page cursor.
std::string identity_text(const FlowIdentity& id);
std::optional<FlowIdentity> parse_identity(const std::string& text);

// GET /api/v1/flows?after=IDENTITY&limit=M pages through the list: at most
// kMaxFlowsPage flows an answer (about 10 MB), so that a million open flows
// do not become a gigabyte per request; the next page starts after the last
// flow of this one (its identity_text), so flows that open or close between
// pages neither repeat nor hide others. Throws std::invalid_argument (400)
// on any other parameter or a bad value.
constexpr size_t kMaxFlowsPage = 10000;
struct FlowsPage {
  std::optional<FlowIdentity> after;  // none: from the first flow
  size_t limit = kMaxFlowsPage;
};
FlowsPage parse_flows_query(const std::string& query);

// Orders a snapshot's flows by identity (the order OpenFlows::add wants).
void sort_by_flow_identity(std::vector<tcpscope_flow_event>* flows);

class OpenFlows {
 public:
  // Records are decoded with `clock`: the one the caller decoded them with.
  explicit OpenFlows(MonotonicToRealtime clock = MonotonicToRealtime(0)) : clock_(clock) {}

  void reserve(size_t n) { entries_.reserve(n); }
  // `flow` is `ev` decoded with this table's clock, then enriched and named:
  // only those added fields are taken from it. Flows come in identity order
  // (sort_by_flow_identity), which paging relies on.
  void add(const tcpscope_flow_event& ev, const FlowRecord& flow);

  size_t size() const { return entries_.size(); }
  // The i-th flow exactly as it was added.
  FlowRecord record(size_t i) const;
  // The JSON array of /api/v1/flows: one flow-log object per open flow, at
  // most page.limit of them, those after page.after.
  std::string to_json(const FlowsPage& page = FlowsPage{std::nullopt, SIZE_MAX}) const;

 private:
  // 0 is "no value" (an empty string or nullopt).
  using StringId = uint32_t;
  struct Entry {
    tcpscope_flow_event ev;
    uint32_t asn;
    StringId peer_class, as_org, cc_rule, experiment, arm;
  };

  StringId intern(const std::string& s);
  StringId intern(const std::optional<std::string>& s) { return s ? intern(*s) + 1 : 0; }
  const std::string& text(StringId id) const { return strings_[id]; }
  std::optional<std::string> optional_text(StringId id) const {
    return id ? std::optional<std::string>(strings_[id - 1]) : std::nullopt;
  }

  MonotonicToRealtime clock_;
  std::vector<Entry> entries_;
  std::vector<std::string> strings_{std::string()};  // id 0 is ""
  std::unordered_map<std::string, StringId> ids_{{std::string(), 0}};
};

}  // namespace tcpscope
