// The NDJSON flow record of SPEC.md: one object per line, fields in a fixed
// order, the first "kind": "flow" (the flow log also holds transfer lines,
// transfer_json.h).
#pragma once

#include <string>

#include "record/flow_record.h"

namespace tcpscope {

// Appends the record as one JSON object followed by '\n'. Hand-written
// (no DOM): the ring reader calls this for every flow.
void append_flow_json(const FlowRecord& r, std::string* out);

// JSON string escaping; bytes that are not printable ASCII become \u00XX so
// the output stays valid UTF-8 whatever a process put in its comm.
void append_json_string(std::string_view s, std::string* out);

}  // namespace tcpscope
