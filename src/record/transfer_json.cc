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
    p = put(p, ",\"flow_start_ns\":");
    p = put_int(p, r.flow_start_ns);
    p = put_endpoints(p, r);
    p = put(p, ",\"seq\":");
    p = put_int(p, r.seq);
    p = put(p, ",\"direction\":");
    p = put_json_string(p, to_string(r.direction));
    p = put(p, ",\"delimited_by\":");
    p = put_json_string(p, to_string(r.delimited_by));
    p = put(p, ",\"sampling_rate\":");
    p = put_int(p, r.sampling_rate);
    p = put(p, ",\"start_ns\":");
    p = put_int(p, r.start_ns);
    p = put(p, ",\"end_ns\":");
    p = put_int(p, r.end_ns);
    p = put(p, ",\"xfer_us\":");
    p = put_int(p, r.xfer_us);
    p = put(p, ",\"wait_us\":");
    p = r.wait_us ? put_int(p, *r.wait_us) : put(p, "null");
    p = put(p, ",\"bytes\":");
    p = put_int(p, r.bytes);
    p = put(p, ",\"retrans_segs\":");
    p = put_int(p, r.retrans_segs);
    p = put(p, ",\"srtt_us\":");
    p = put_int(p, r.srtt_us);
    p = put(p, ",\"min_rtt_us\":");
    p = put_int(p, r.min_rtt_us);
    p = put(p, ",\"busy_us\":");
    p = put_int(p, r.busy_us);
    p = put(p, ",\"rwnd_limited_us\":");
    p = put_int(p, r.rwnd_limited_us);
    p = put(p, ",\"sndbuf_limited_us\":");
    p = put_int(p, r.sndbuf_limited_us);
    p = put(p, ",\"cc\":");
    p = put_json_string(p, r.cc);
    p = put_enrichment(p, r.enrichment);
    // Extension beyond SPEC.md, as in the flow line: which namespace's flow it is.
    p = put(p, ",\"netns\":");
    return put_int(p, r.netns);
  });
}

}  // namespace tcpscope
