#include "aggregate/open_flows_view.h"

#include <algorithm>

#include "record/flow_json.h"

namespace tcpscope {

OpenFlowsView::StringId OpenFlowsView::intern(const std::string& s) {
  auto [it, inserted] = ids_.try_emplace(s, static_cast<StringId>(strings_.size()));
  if (inserted) strings_.push_back(s);
  return it->second;
}

void OpenFlowsView::add(const tcpscope_flow_event& ev, const FlowRecord& flow) {
  // An optional's id is the string's id + 1, so that 0 stays nullopt.
  const Enrichment& e = flow.enrichment;
  entries_.push_back(Entry{ev, e.asn, intern(e.peer_class), intern(e.as_org), intern(e.cc_rule),
                           intern(e.experiment), intern(e.arm)});
}

FlowRecord OpenFlowsView::record(size_t i) const {
  const Entry& e = entries_.at(i);
  FlowRecord r = decode_flow_event(e.ev, clock_);
  r.enrichment = {text(e.peer_class), e.asn, text(e.as_org), optional_text(e.cc_rule),
                  optional_text(e.experiment), optional_text(e.arm)};
  return r;
}

std::string OpenFlowsView::to_json(const FlowsPage& page) const {
  auto first = entries_.begin();
  if (page.after)
    first = std::upper_bound(entries_.begin(), entries_.end(), *page.after,
                             [](const FlowIdentity& id, const Entry& e) { return id < identity_of(e.ev); });
  const size_t begin = static_cast<size_t>(first - entries_.begin());
  const size_t end = begin + std::min(page.limit, entries_.size() - begin);
  std::string out = "[";
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += ",";
    append_flow_json(record(i), &out);
    out.pop_back();  // the record's newline
  }
  out += "]\n";
  return out;
}

}  // namespace tcpscope
