// `tcpscope flows`: the open flows of a running daemon (GET /api/v1/flows,
// refreshed every snapshot_interval_s), like `ss -ti` but with the peer
// class, ASN and congestion control tcpscope knows, as an aligned table or
// --json. `--watch SECONDS` fetches again every SECONDS (1 to 3600; the
// daemon's own list changes only at each snapshot) until interrupted or
// for --count refreshes; with --json each refresh is one line (NDJSON).
//
// An empty list says why it may be empty: the daemon fills it only from its
// periodic snapshot, which `snapshot_interval_s: 0` disables. The API
// serves only the list (no snapshot time, no interval), so the output
// names the possible causes instead of guessing which applies.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "measure/selection.h"

namespace tcpscope {

int flows_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

extern const char* const kFlowsUsage;

struct FlowsViewOptions {
  // "bytes" (acked + received), "age", "srtt", "cwnd", "retrans" (segments),
  // "rate" (delivery rate), or any record field; numbers sort largest
  // first, text A-Z. --reverse flips it.
  std::string sort = "bytes";
  bool reverse = false;
  size_t limit = 0;  // 0 = all
  std::optional<Selection> filter;
  int64_t now_ns = 0;  // CLOCK_REALTIME, for the age column
};

// Filters, sorts and limits the records (a JSON array as /api/v1/flows
// serves it). std::invalid_argument if `flows` is not an array.
nlohmann::json select_flows(const nlohmann::json& flows, const FlowsViewOptions& options);
// The table of already selected records, with a header and a summary line
// (and, when nothing is shown, why that may be).
std::string format_flows_table(const nlohmann::json& flows, const FlowsViewOptions& options, size_t total);
// Why no flow is shown: `total` open flows in the answer, none selected.
std::string empty_flows_note(const FlowsViewOptions& options, size_t total);

constexpr int kMinWatchSeconds = 1;
constexpr int kMaxWatchSeconds = 3600;

}  // namespace tcpscope
