// The in-place JSON writer the flow log's lines are built with (flow_json.cc,
// transfer_json.cc); the Kafka messages grow in place by its append_in_place
// too (export/kafka_protobuf.cc). Header-only, so every put is inlined into
// the writer of a line as it was when the writer was one file.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "net/ip_addr.h"
#include "record/enrichment.h"
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

// As IpAddr::to_string(), quoted: dotted quad, inet_ntop's IPv6 text, "" when unset.
inline char* put_addr(char* p, const IpAddr& a) {
  *p++ = '"';
  p = put_addr_text(p, a);
  *p++ = '"';
  return p;
}

// A value as the flow log writes it: a number, true or false, a JSON string,
// an address quoted (put_addr), an optional's value or null.
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
char* put_value(char* p, T v) {
  if constexpr (std::is_same_v<T, bool>)
    return put_bool(p, v);
  else
    return put_int(p, v);
}
inline char* put_value(char* p, std::string_view s) { return put_json_string(p, s); }
inline char* put_value(char* p, const IpAddr& a) { return put_addr(p, a); }
template <class T>
char* put_value(char* p, const std::optional<T>& v) {
  return v ? put_value(p, *v) : put(p, "null");
}

// A field after the line's first: `key` is the literal from its comma to its
// colon, as TCPSCOPE_JSON_FIELD writes it.
template <size_t N, class Value>
char* put_field(char* p, const char (&key)[N], const Value& v) {
  return put_value(put(p, key), v);
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

// One row of a record's table (record/record_fields.h) as a field of the
// line, where the table is expanded with `p` and the record `r` in scope.
#define TCPSCOPE_JSON_FIELD(key, number, proto_type, clickhouse_type, value) \
  p = ::tcpscope::json_writer::put_field(p, ",\"" #key "\":", value);

// The bytes a table's keys take in a line: each with its comma, quotes and colon.
template <class Field, size_t N>
constexpr size_t json_keys_bound(const Field (&fields)[N]) {
  size_t n = 0;
  for (const Field& f : fields) n += f.key.size() + 4;
  return n;
}

// The most bytes the enrichment's strings take in a line.
inline size_t enrichment_bound(const Enrichment& e) {
  size_t bound = json_string_bound(e.peer_class) + json_string_bound(e.as_org);
  for (const auto* o : {&e.cc_rule, &e.experiment, &e.arm})
    if (*o) bound += json_string_bound(**o);
  return bound;
}

}  // namespace tcpscope::json_writer
