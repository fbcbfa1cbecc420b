// Who a flow is, and the page cursor of GET /api/v1/flows built from it:
// the daemon sorts its open flows by identity and the CLI pages through
// them with the last identity it got.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "record/flow_decoder.h"
#include "record/flow_record.h"
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

// Orders a snapshot's flows by identity (the order OpenFlowsView::add wants).
void sort_by_flow_identity(std::vector<tcpscope_flow_event>* flows);

}  // namespace tcpscope
