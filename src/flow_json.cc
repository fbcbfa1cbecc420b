#include "flow_json.h"

#include <charconv>

namespace tcpscope {

namespace {

template <class Int>
void append_int(Int v, std::string* out) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, res.ptr);
}

class ObjectWriter {
 public:
  explicit ObjectWriter(std::string* out) : out_(out) { out_->push_back('{'); }
  void finish() { out_->append("}\n"); }

  template <class Int>
  void num(const char* key, Int v) {
    this->key(key);
    append_int(v, out_);
  }
  void str(const char* key, std::string_view v) {
    this->key(key);
    append_json_string(v, out_);
  }
  void opt_str(const char* key, const std::optional<std::string>& v) {
    if (v) return str(key, *v);
    this->key(key);
    out_->append("null");
  }
  void boolean(const char* key, bool v) {
    this->key(key);
    out_->append(v ? "true" : "false");
  }

 private:
  void key(const char* k) {
    if (!first_) out_->push_back(',');
    first_ = false;
    out_->push_back('"');
    out_->append(k);
    out_->append("\":");
  }
  std::string* out_;
  bool first_ = true;
};

}  // namespace

void append_json_string(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\t': out->append("\\t"); break;
      case '\r': out->append("\\r"); break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void append_flow_json(const FlowRecord& r, std::string* out) {
  ObjectWriter w(out);
  w.num("start_ns", r.start_ns);
  w.num("end_ns", r.end_ns);
  w.num("fct_us", r.fct_us);
  w.num("duration_us", r.duration_us);
  w.num("family", r.family());
  w.str("laddr", r.laddr.to_string());
  w.num("lport", r.lport);
  w.str("raddr", r.raddr.to_string());
  w.num("rport", r.rport);
  w.str("dir", to_string(r.dir));
  w.str("outcome", to_string(r.outcome));
  w.str("cc", r.cc);
  w.num("srtt_us", r.srtt_us);
  w.num("min_rtt_us", r.min_rtt_us);
  w.num("rttvar_us", r.rttvar_us);
  w.num("cwnd", r.cwnd);
  w.num("max_cwnd", r.max_cwnd);
  w.num("ssthresh", r.ssthresh);
  w.num("mss", r.mss);
  w.num("bytes_acked", r.bytes_acked);
  w.num("bytes_received", r.bytes_received);
  w.num("bytes_retrans", r.bytes_retrans);
  w.num("segs_out", r.segs_out);
  w.num("segs_in", r.segs_in);
  w.num("retrans_segs", r.retrans_segs);
  w.num("lost_segs", r.lost_segs);
  w.num("delivery_rate_bps", r.delivery_rate_bps);
  w.num("pacing_rate_bps", r.pacing_rate_bps);
  w.str("peer_class", r.peer_class);
  w.num("asn", r.asn);
  w.str("as_org", r.as_org);
  w.opt_str("cc_rule", r.cc_rule);
  w.opt_str("experiment", r.experiment);
  w.opt_str("arm", r.arm);
  w.boolean("app_set_cc", r.app_set_cc);
  w.num("pid", r.pid);
  w.str("comm", r.comm);
  w.num("cgroup_id", r.cgroup_id);
  w.num("netns", r.netns);
  // Extensions beyond SPEC.md.
  w.boolean("partial", r.partial);
  static const char* kStateKeys[] = {"ca_open_us", "ca_disorder_us", "ca_cwr_us", "ca_recovery_us",
                                     "ca_loss_us"};
  for (size_t i = 0; i < r.ca_state_us.size(); ++i) w.num(kStateKeys[i], r.ca_state_us[i]);
  w.finish();
}

}  // namespace tcpscope
