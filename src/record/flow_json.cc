#include "record/flow_json.h"

#include "record/json_writer.h"

namespace tcpscope {

using namespace json_writer;

void append_flow_json(const FlowRecord& r, std::string* out) {
  // Everything but the variable-length strings: 47 keys (< 800 bytes with
  // their quotes, colons and commas), at most 20 digits per number, two
  // addresses of at most INET6_ADDRSTRLEN.
  constexpr size_t kFixedBound = 2048;
  const size_t bound = kFixedBound + json_string_bound(r.cc) + json_string_bound(r.comm) + enrichment_bound(r.enrichment);
  append_json_line(out, "flow", bound, [&r](char* p) {
    p = put(p, ",\"start_ns\":");
    p = put_int(p, r.start_ns);
    p = put(p, ",\"end_ns\":");
    p = put_int(p, r.end_ns);
    p = put(p, ",\"fct_us\":");
    p = put_int(p, r.fct_us);
    p = put(p, ",\"duration_us\":");
    p = put_int(p, r.duration_us);
    p = put_endpoints(p, r);
    p = put(p, ",\"outcome\":");
    p = put_json_string(p, to_string(r.outcome));
    p = put(p, ",\"cc\":");
    p = put_json_string(p, r.cc);
    p = put(p, ",\"srtt_us\":");
    p = put_int(p, r.srtt_us);
    p = put(p, ",\"min_rtt_us\":");
    p = put_int(p, r.min_rtt_us);
    p = put(p, ",\"rttvar_us\":");
    p = put_int(p, r.rttvar_us);
    p = put(p, ",\"cwnd\":");
    p = put_int(p, r.cwnd);
    p = put(p, ",\"max_cwnd\":");
    p = put_int(p, r.max_cwnd);
    p = put(p, ",\"ssthresh\":");
    p = put_int(p, r.ssthresh);
    p = put(p, ",\"mss\":");
    p = put_int(p, r.mss);
    p = put(p, ",\"bytes_acked\":");
    p = put_int(p, r.bytes_acked);
    p = put(p, ",\"bytes_received\":");
    p = put_int(p, r.bytes_received);
    p = put(p, ",\"bytes_retrans\":");
    p = put_int(p, r.bytes_retrans);
    p = put(p, ",\"segs_out\":");
    p = put_int(p, r.segs_out);
    p = put(p, ",\"segs_in\":");
    p = put_int(p, r.segs_in);
    p = put(p, ",\"retrans_segs\":");
    p = put_int(p, r.retrans_segs);
    p = put(p, ",\"lost_segs\":");
    p = put_int(p, r.lost_segs);
    p = put(p, ",\"delivery_rate_bps\":");
    p = put_int(p, r.delivery_rate_bps);
    p = put(p, ",\"pacing_rate_bps\":");
    p = put_int(p, r.pacing_rate_bps);
    p = put_enrichment(p, r.enrichment);
    p = put(p, ",\"app_set_cc\":");
    p = put_bool(p, r.app_set_cc);
    p = put(p, ",\"pid\":");
    p = put_int(p, r.pid);
    p = put(p, ",\"comm\":");
    p = put_json_string(p, r.comm);
    p = put(p, ",\"cgroup_id\":");
    p = put_int(p, r.cgroup_id);
    p = put(p, ",\"netns\":");
    p = put_int(p, r.netns);
    // Extensions beyond SPEC.md.
    p = put(p, ",\"partial\":");
    p = put_bool(p, r.partial);
    p = put(p, ",\"ca_open_us\":");
    p = put_int(p, r.ca_state_us[0]);
    p = put(p, ",\"ca_disorder_us\":");
    p = put_int(p, r.ca_state_us[1]);
    p = put(p, ",\"ca_cwr_us\":");
    p = put_int(p, r.ca_state_us[2]);
    p = put(p, ",\"ca_recovery_us\":");
    p = put_int(p, r.ca_state_us[3]);
    p = put(p, ",\"ca_loss_us\":");
    return put_int(p, r.ca_state_us[4]);
  });
}

}  // namespace tcpscope
