#include "record/flow_json.h"

#include "record/json_writer.h"
#include "record/record_fields.h"

namespace tcpscope {

using namespace json_writer;

void append_flow_json(const FlowRecord& r, std::string* out) {
  // Everything but the variable-length strings: the keys with their quotes,
  // colons and commas, at most 24 bytes per value, two addresses of at most
  // INET6_ADDRSTRLEN.
  constexpr size_t kFixedBound = json_keys_bound(kFlowFields) + 24 * std::size(kFlowFields) + 2 * 48;
  const size_t bound = kFixedBound + json_string_bound(r.cc) + json_string_bound(r.comm) + enrichment_bound(r.enrichment);
  append_json_line(out, "flow", bound, [&r](char* p) {
    TCPSCOPE_FLOW_FIELDS(TCPSCOPE_JSON_FIELD)
    return p;
  });
}

}  // namespace tcpscope
