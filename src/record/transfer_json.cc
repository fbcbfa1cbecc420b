#include "record/transfer_json.h"

#include "record/json_writer.h"

namespace tcpscope {

using namespace json_writer;

void append_transfer_json(const TransferRecord& r, std::string* out) {
  // Everything but the variable-length strings: 31 keys (< 500 bytes with
  // their quotes, colons and commas), at most 20 digits per number, two
  // addresses of at most INET6_ADDRSTRLEN.
  constexpr size_t kFixedBound = 1024;
  const size_t bound = kFixedBound + json_string_bound(r.cc) + enrichment_bound(r.enrichment);
  append_json_line(out, "transfer", bound, [&r](char* p) {
    p = put_field(p, ",\"flow_start_ns\":", r.flow_start_ns);
    p = put_endpoints(p, r);
    p = put_field(p, ",\"seq\":", r.seq);
    p = put_field(p, ",\"direction\":", to_string(r.direction));
    p = put_field(p, ",\"delimited_by\":", to_string(r.delimited_by));
    p = put_field(p, ",\"sampling_rate\":", r.sampling_rate);
    p = put_field(p, ",\"start_ns\":", r.start_ns);
    p = put_field(p, ",\"end_ns\":", r.end_ns);
    p = put_field(p, ",\"xfer_us\":", r.xfer_us);
    p = put_field(p, ",\"wait_us\":", r.wait_us);
    p = put_field(p, ",\"bytes\":", r.bytes);
    p = put_field(p, ",\"retrans_segs\":", r.retrans_segs);
    p = put_field(p, ",\"srtt_us\":", r.srtt_us);
    p = put_field(p, ",\"min_rtt_us\":", r.min_rtt_us);
    p = put_field(p, ",\"busy_us\":", r.busy_us);
    p = put_field(p, ",\"rwnd_limited_us\":", r.rwnd_limited_us);
    p = put_field(p, ",\"sndbuf_limited_us\":", r.sndbuf_limited_us);
    p = put_field(p, ",\"cc\":", r.cc);
    p = put_enrichment(p, r.enrichment);
    // Extension beyond SPEC.md, as in the flow line: which namespace's flow it is.
    return put_field(p, ",\"netns\":", r.netns);
  });
}

}  // namespace tcpscope
