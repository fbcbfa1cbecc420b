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

#include "record/flow_decoder.h"
#include "record/flow_identity.h"
#include "record/flow_record.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

class OpenFlowsView {
 public:
  // Records are decoded with `clock`: the one the caller decoded them with.
  explicit OpenFlowsView(MonotonicToRealtime clock = MonotonicToRealtime(0)) : clock_(clock) {}

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
