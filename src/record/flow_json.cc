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
    p = put_field(p, ",\"start_ns\":", r.start_ns);
    p = put_field(p, ",\"end_ns\":", r.end_ns);
    p = put_field(p, ",\"fct_us\":", r.fct_us);
    p = put_field(p, ",\"duration_us\":", r.duration_us);
    p = put_endpoints(p, r);
    p = put_field(p, ",\"outcome\":", to_string(r.outcome));
    p = put_field(p, ",\"cc\":", r.cc);
    p = put_field(p, ",\"srtt_us\":", r.srtt_us);
    p = put_field(p, ",\"min_rtt_us\":", r.min_rtt_us);
    p = put_field(p, ",\"rttvar_us\":", r.rttvar_us);
    p = put_field(p, ",\"cwnd\":", r.cwnd);
    p = put_field(p, ",\"max_cwnd\":", r.max_cwnd);
    p = put_field(p, ",\"ssthresh\":", r.ssthresh);
    p = put_field(p, ",\"mss\":", r.mss);
    p = put_field(p, ",\"bytes_acked\":", r.bytes_acked);
    p = put_field(p, ",\"bytes_received\":", r.bytes_received);
    p = put_field(p, ",\"bytes_retrans\":", r.bytes_retrans);
    p = put_field(p, ",\"segs_out\":", r.segs_out);
    p = put_field(p, ",\"segs_in\":", r.segs_in);
    p = put_field(p, ",\"retrans_segs\":", r.retrans_segs);
    p = put_field(p, ",\"lost_segs\":", r.lost_segs);
    p = put_field(p, ",\"delivery_rate_bps\":", r.delivery_rate_bps);
    p = put_field(p, ",\"pacing_rate_bps\":", r.pacing_rate_bps);
    p = put_enrichment(p, r.enrichment);
    p = put_field(p, ",\"app_set_cc\":", r.app_set_cc);
    p = put_field(p, ",\"pid\":", r.pid);
    p = put_field(p, ",\"comm\":", r.comm);
    p = put_field(p, ",\"cgroup_id\":", r.cgroup_id);
    p = put_field(p, ",\"netns\":", r.netns);
    // Extensions beyond SPEC.md.
    p = put_field(p, ",\"partial\":", r.partial);
    p = put_field(p, ",\"ca_open_us\":", r.ca_state_us[0]);
    p = put_field(p, ",\"ca_disorder_us\":", r.ca_state_us[1]);
    p = put_field(p, ",\"ca_cwr_us\":", r.ca_state_us[2]);
    p = put_field(p, ",\"ca_recovery_us\":", r.ca_state_us[3]);
    return put_field(p, ",\"ca_loss_us\":", r.ca_state_us[4]);
  });
}

}  // namespace tcpscope
