// The NDJSON transfer record of SPEC.md ("Transfer record"): one object per
// line in the flow log beside the flow lines, fields in a fixed order, the
// first "kind": "transfer".
#pragma once

#include <string>

#include "record/transfer_record.h"

namespace tcpscope {

// Appends the transfer as one JSON object followed by '\n'; wait_us is null
// when no data went the other way first.
void append_transfer_json(const TransferRecord& r, std::string* out);
inline void append_json(const TransferRecord& r, std::string* out) { append_transfer_json(r, out); }

}  // namespace tcpscope
