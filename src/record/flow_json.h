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
// For code written once for both kinds of record.
inline void append_json(const FlowRecord& r, std::string* out) { append_flow_json(r, out); }

}  // namespace tcpscope
