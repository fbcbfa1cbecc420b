// What the pipeline adds to a record that the kernel cannot know: the
// peer's class, AS number and organisation (the enricher) and the names of
// the rule that chose its congestion control (the rule names). A flow's
// record and its transfers' records carry the same part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tcpscope {

struct Enrichment {
  std::string peer_class;
  uint32_t asn = 0;
  std::string as_org;
  std::optional<std::string> cc_rule;
  std::optional<std::string> experiment;
  std::optional<std::string> arm;
};

}  // namespace tcpscope
