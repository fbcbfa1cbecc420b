#include "record/transfer_json.h"

#include "record/json_writer.h"
#include "record/record_fields.h"

namespace tcpscope {

using namespace json_writer;

void append_transfer_json(const TransferRecord& r, std::string* out) {
  // As a flow line's bound (flow_json.cc).
  constexpr size_t kFixedBound = json_keys_bound(kTransferFields) + 24 * std::size(kTransferFields) + 2 * 48;
  const size_t bound = kFixedBound + json_string_bound(r.cc) + enrichment_bound(r.enrichment);
  append_json_line(out, "transfer", bound, [&r](char* p) {
    TCPSCOPE_TRANSFER_FIELDS(TCPSCOPE_JSON_FIELD)
    return p;
  });
}

}  // namespace tcpscope
