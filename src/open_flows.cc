#include "open_flows.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <stdexcept>

#include "flow_json.h"
#include "url_query.h"

namespace tcpscope {

OpenFlows::StringId OpenFlows::intern(const std::string& s) {
  auto [it, inserted] = ids_.try_emplace(s, static_cast<StringId>(strings_.size()));
  if (inserted) strings_.push_back(s);
  return it->second;
}

void OpenFlows::add(const tcpscope_flow_event& ev, const FlowRecord& flow) {
  // An optional's id is the string's id + 1, so that 0 stays nullopt.
  entries_.push_back(Entry{ev, flow.asn, intern(flow.peer_class), intern(flow.as_org), intern(flow.cc_rule),
                           intern(flow.experiment), intern(flow.arm)});
}

FlowRecord OpenFlows::record(size_t i) const {
  const Entry& e = entries_.at(i);
  FlowRecord r = decode_flow_event(e.ev, clock_);
  r.asn = e.asn;
  r.peer_class = text(e.peer_class);
  r.as_org = text(e.as_org);
  r.cc_rule = optional_text(e.cc_rule);
  r.experiment = optional_text(e.experiment);
  r.arm = optional_text(e.arm);
  return r;
}

void sort_by_flow_identity(std::vector<tcpscope_flow_event>* flows) {
  auto key = [](const tcpscope_flow_event& e) { return std::tie(e.netns, e.dir, e.family, e.sport, e.dport); };
  std::sort(flows->begin(), flows->end(), [&](const tcpscope_flow_event& a, const tcpscope_flow_event& b) {
    if (key(a) != key(b)) return key(a) < key(b);
    if (const int c = std::memcmp(a.saddr, b.saddr, sizeof(a.saddr))) return c < 0;
    return std::memcmp(a.daddr, b.daddr, sizeof(a.daddr)) < 0;
  });
}

FlowsPage parse_flows_query(const std::string& query) {
  FlowsPage page;
  for (const auto& [name, value] : parse_query_string(query)) {
    const bool digits = !value.empty() && value.size() <= 9 && value.find_first_not_of("0123456789") == std::string::npos;
    if (name != "offset" && name != "limit")
      throw std::invalid_argument("unknown query parameter \"" + name + "\" (offset, limit)");
    if (!digits) throw std::invalid_argument(name + " must be a number, got \"" + value.substr(0, 20) + "\"");
    const size_t n = std::stoul(value);
    if (name == "offset") page.offset = n;
    if (name == "limit") {
      if (n < 1 || n > kMaxFlowsPage)
        throw std::invalid_argument("limit must be 1 to " + std::to_string(kMaxFlowsPage));
      page.limit = n;
    }
  }
  return page;
}

std::string OpenFlows::to_json(size_t offset, size_t limit) const {
  std::string out = "[";
  const size_t end = offset + std::min(limit, entries_.size() - std::min(offset, entries_.size()));
  for (size_t i = offset; i < end; ++i) {
    if (i > offset) out += ",";
    append_flow_json(record(i), &out);
    out.pop_back();  // the record's newline
  }
  out += "]\n";
  return out;
}

}  // namespace tcpscope
