#include "record/flow_identity.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "text/url_query.h"

namespace tcpscope {

bool FlowIdentity::operator<(const FlowIdentity& o) const {
  return std::tie(netns, dir, laddr.family, laddr.bytes, lport, raddr.family, raddr.bytes, rport) <
         std::tie(o.netns, o.dir, o.laddr.family, o.laddr.bytes, o.lport, o.raddr.family, o.raddr.bytes, o.rport);
}

FlowIdentity identity_of(const tcpscope_flow_event& ev) {
  const tcpscope_flow_identity& id = ev.id;
  return FlowIdentity{id.netns, event_direction(id.dir), event_address(id.saddr, id.family), id.sport,
                      event_address(id.daddr, id.family), id.dport};
}

std::string identity_text(const FlowIdentity& id) {
  return std::to_string(id.netns) + "," + to_string(id.dir) + "," + id.laddr.to_string() + "," +
         std::to_string(id.lport) + "," + id.raddr.to_string() + "," + std::to_string(id.rport);
}

std::optional<FlowIdentity> parse_identity(const std::string& text) {
  std::vector<std::string> f;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1)
    f.push_back(text.substr(start, comma - start));
  f.push_back(text.substr(start));
  auto number = [](const std::string& s, uint64_t max) -> std::optional<uint64_t> {
    if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const uint64_t n = std::stoull(s);
    return n <= max ? std::optional<uint64_t>(n) : std::nullopt;
  };
  if (f.size() != 6 || (f[1] != "active" && f[1] != "passive")) return std::nullopt;
  const auto netns = number(f[0], UINT32_MAX), lport = number(f[3], UINT16_MAX), rport = number(f[5], UINT16_MAX);
  const auto laddr = IpAddr::parse(f[2]), raddr = IpAddr::parse(f[4]);
  if (!netns || !lport || !rport || !laddr || !raddr) return std::nullopt;
  return FlowIdentity{static_cast<uint32_t>(*netns), f[1] == "passive" ? Direction::kPassive : Direction::kActive,
                      laddr->unmapped(), static_cast<uint16_t>(*lport), raddr->unmapped(), static_cast<uint16_t>(*rport)};
}

void sort_by_flow_identity(std::vector<tcpscope_flow_event>* flows) {
  std::sort(flows->begin(), flows->end(),
            [](const tcpscope_flow_event& a, const tcpscope_flow_event& b) { return identity_of(a) < identity_of(b); });
}

FlowsPage parse_flows_query(const std::string& query) {
  FlowsPage page;
  for (const auto& [name, value] : parse_query_string(query)) {
    if (name == "after") {
      page.after = parse_identity(value);
      if (!page.after)
        throw std::invalid_argument("after must be NETNS,DIR,LADDR,LPORT,RADDR,RPORT of a flow, got \"" +
                                    value.substr(0, 80) + "\"");
    } else if (name == "limit") {
      const bool digits = !value.empty() && value.size() <= 9 && value.find_first_not_of("0123456789") == std::string::npos;
      const size_t n = digits ? std::stoul(value) : 0;
      if (n < 1 || n > kMaxFlowsPage)
        throw std::invalid_argument("limit must be 1 to " + std::to_string(kMaxFlowsPage) + ", got \"" +
                                    value.substr(0, 20) + "\"");
      page.limit = n;
    } else {
      throw std::invalid_argument("unknown query parameter \"" + name + "\" (after, limit)");
    }
  }
  return page;
}

}  // namespace tcpscope
