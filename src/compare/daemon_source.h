// `tcpscope compare --server URL`: the samples from a running daemon's
// sketches (GET /api/v1/distributions, see flow_distributions.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compare/compare.h"
#include "compare/compare_source.h"

namespace tcpscope {

constexpr const char* kDistributionsPath = "/api/v1/distributions";

struct ServerScan {
  // kDistributionsFormatVersion, or older: 1 is a daemon whose throughput
  // sketches hold bit/s (parse_distributions_response converts them).
  int format_version = kDistributionsFormatVersion;
  SampleUnit unit = SampleUnit::kFlow;  // what the daemon answered for
  std::vector<GroupSamples> groups;
  double relative_accuracy = 0;
  double window_s = 0;
  double covers_s = 0;  // how far back the merged sketches reach
  std::vector<std::string> size_classes;
  std::vector<uint64_t> size_classes_bytes;
  uint64_t throughput_min_bytes = 0;
  uint64_t dropped = 0;  // records of the unit the daemon could not keep (key table full)
  uint64_t folded = 0;   // counted under asn "other" (the daemon's key table was full)
};

// The request path and query for these options: metric, unit (only when
// transfer: flow is the endpoint's default, so a flow query stays answerable
// by a daemon from before transfers), by, a, b.
std::string distributions_target(const CompareOptions& options);

// GETs the distributions from the daemon at base_url. False and *error
// naming the URL and the reason (unreachable, 404 = a daemon without the
// endpoint, 400 = the daemon's reason, malformed answer).
bool query_server(const std::string& base_url, const CompareOptions& options, int timeout_ms, ServerScan* out,
                  std::string* error);

// The response body -> groups of sketched samples, in metric_unit(). An
// answer in a format newer than kDistributionsFormatVersion is an error
// naming both versions.
bool parse_distributions_response(const std::string& body, ServerScan* out, std::string* error);

// A running daemon as a compare source: query_server, the daemon's size
// classes and throughput threshold, its sketches' coverage and the flows it
// could not keep apart as notes.
// Its description is "server URL", without credentials.
class DaemonSource : public FunctionSource {
 public:
  DaemonSource(const std::string& base_url, int timeout_ms);
};

}  // namespace tcpscope
