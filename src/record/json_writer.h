// The in-place JSON writer the flow log's lines are built with (flow_json.cc,
// transfer_json.cc). Header-only, so every put is inlined into the writer of
// a line as it was when the writer was one file.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "net/ip_addr.h"
#include "record/enrichment.h"
#include "record/flow_record.h"
#include "text/json_text.h"

namespace tcpscope::json_writer {

// The flow log's writer is on the ring reader's path for every record, so a
// line is built in place: the output grows once by an upper bound of the
// line's length, fields are written through a char pointer (keys are
// literals of known length, numbers go through to_chars, IPv4 addresses are
// formatted here rather than by inet_ntop's printf), then the string is cut
// to the length written. Measured by bench/pipeline_bench.cc
// (BM_PipelineFlowJson); the previous append-per-token version spent most
// of its time in std::string::append and vfprintf.

// Appends what `write` puts in place: *out grows once by `bound`, `write`
// gets the first free byte and returns the end of what it wrote, and *out is
// cut there.
template <class Write>
void append_in_place(std::string* out, size_t bound, Write write) {
  const size_t old = out->size();
  out->resize(old + bound);
  char* const begin = out->data() + old;
  out->resize(old + static_cast<size_t>(write(begin) - begin));
}

template <size_t N>
char* put(char* p, const char (&literal)[N]) {
  std::memcpy(p, literal, N - 1);
  return p + N - 1;
}

inline char* put(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

template <class Int>
char* put_int(char* p, Int v) {
  return std::to_chars(p, p + 24, v).ptr;
}

inline char* put_bool(char* p, bool v) { return v ? put(p, "true") : put(p, "false"); }

inline char* put_opt(char* p, const std::optional<std::string>& v) { return v ? put_json_string(p, *v) : put(p, "null"); }

// As IpAddr::to_string(), quoted: dotted quad, inet_ntop's IPv6 text, "" when unset.
inline char* put_addr(char* p, const IpAddr& a) {
  *p++ = '"';
  p = put_addr_text(p, a);
  *p++ = '"';
  return p;
}

// One line of the flow log: {"kind":"KIND", the fields `write` puts (each
// with its leading comma), }\n. `bound`: the most bytes the line can take.
template <size_t N, class Write>
void append_json_line(std::string* out, const char (&kind)[N], size_t bound, Write write) {
  append_in_place(out, bound, [&](char* p) {
    p = put(p, "{\"kind\":\"");
    p = put(p, kind);
    p = write(put(p, "\""));
    return put(p, "}\n");
  });
}

// The field groups the flow line and the transfer line share, in SPEC.md's
// order; `Record` is a FlowRecord or a TransferRecord.

// The flow's endpoints: family, laddr, lport, raddr, rport, dir.
template <class Record>
char* put_endpoints(char* p, const Record& r) {
  p = put(p, ",\"family\":");
  p = put_int(p, r.family());
  p = put(p, ",\"laddr\":");
  p = put_addr(p, r.laddr);
  p = put(p, ",\"lport\":");
  p = put_int(p, r.lport);
  p = put(p, ",\"raddr\":");
  p = put_addr(p, r.raddr);
  p = put(p, ",\"rport\":");
  p = put_int(p, r.rport);
  p = put(p, ",\"dir\":");
  return put_json_string(p, to_string(r.dir));
}

// What the pipeline added: peer_class, asn, as_org, cc_rule, experiment, arm.
inline char* put_enrichment(char* p, const Enrichment& e) {
  p = put(p, ",\"peer_class\":");
  p = put_json_string(p, e.peer_class);
  p = put(p, ",\"asn\":");
  p = put_int(p, e.asn);
  p = put(p, ",\"as_org\":");
  p = put_json_string(p, e.as_org);
  p = put(p, ",\"cc_rule\":");
  p = put_opt(p, e.cc_rule);
  p = put(p, ",\"experiment\":");
  p = put_opt(p, e.experiment);
  p = put(p, ",\"arm\":");
  return put_opt(p, e.arm);
}

// The most bytes put_enrichment's strings take.
inline size_t enrichment_bound(const Enrichment& e) {
  size_t bound = json_string_bound(e.peer_class) + json_string_bound(e.as_org);
  for (const auto* o : {&e.cc_rule, &e.experiment, &e.arm})
    if (*o) bound += json_string_bound(**o);
  return bound;
}

}  // namespace tcpscope::json_writer
