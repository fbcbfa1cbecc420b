#include "export/kafka_protobuf.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "record/json_writer.h"
#include "text/utf8_text.h"

namespace tcpscope {

namespace {

// Built in place as the flow log's JSON is (json_writer::append_in_place):
// the output grows once by an upper bound, fields go through a char pointer,
// then the string is cut to what was written.

constexpr uint32_t kVarint = 0, kLengthDelimited = 2;
// The length prefix is written after the message, at most 5 bytes (a
// message is far below 4 GiB); the message moves down if it took fewer.
constexpr size_t kMaxPrefix = 5;
// A field's tag (2 bytes up to field 2047) and a 64-bit varint (10 bytes),
// or a tag, a string's length (5 bytes) and an address (INET6_ADDRSTRLEN);
// the strings' own bytes are added by bound(), 3 for each (U+FFFD).
constexpr size_t kMaxField = 2 + 10 + 46;
constexpr size_t kMaxBytesPerByte = 3;

char* put_varint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

char* put_tag(char* p, uint32_t field, uint32_t wire_type) { return put_varint(p, field << 3 | wire_type); }

// uint32/uint64/bool, and int64 as its two's complement (ten bytes when
// negative, as protobuf's int64 is).
char* put_uint(char* p, uint32_t field, uint64_t v) { return v ? put_varint(put_tag(p, field, kVarint), v) : p; }
char* put_int(char* p, uint32_t field, int64_t v) { return put_uint(p, field, static_cast<uint64_t>(v)); }

// An `optional` field: written whenever it holds a value, 0 included.
char* put_present(char* p, uint32_t field, int64_t v) {
  return put_varint(put_tag(p, field, kVarint), static_cast<uint64_t>(v));
}

char* put_bytes(char* p, uint32_t field, std::string_view s) {
  p = put_varint(put_tag(p, field, kLengthDelimited), s.size());
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

// `s` with each byte of an invalid UTF-8 sequence replaced by U+FFFD.
std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_sequence_at(s, i, &cp);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

bool ascii(std::string_view s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Proto3 strings are UTF-8, and the JSON line's strings are the same text:
// each byte of an invalid sequence (a comm the kernel cut at 15 bytes
// mid-character) is U+FFFD in both (text/json_text.h).
char* put_present(char* p, uint32_t field, std::string_view s) {
  if (ascii(s) || valid_utf8(s)) return put_bytes(p, field, s);
  return put_bytes(p, field, replace_invalid_utf8(s));
}

char* put_string(char* p, uint32_t field, std::string_view s) { return s.empty() ? p : put_present(p, field, s); }

char* put_optional(char* p, uint32_t field, const std::optional<std::string>& s) {
  return s ? put_present(p, field, *s) : p;
}

// The address's text, as the JSON line has it; an unset address is "".
char* put_addr(char* p, uint32_t field, const IpAddr& a) {
  if (a.family != 4 && a.family != 6) return p;
  // The text is at most 45 bytes: its length is the one byte after the tag.
  char* const tag_end = put_tag(p, field, kLengthDelimited);
  char* const end = put_addr_text(tag_end + 1, a);
  *tag_end = static_cast<char>(end - tag_end - 1);
  return end;
}

// The fields the two messages share, numbered as each has them.
template <class Record>
char* put_endpoints(char* p, const Record& r, uint32_t family, uint32_t laddr, uint32_t lport, uint32_t raddr,
                    uint32_t rport, uint32_t dir) {
  p = put_uint(p, family, static_cast<uint64_t>(r.family()));
  p = put_addr(p, laddr, r.laddr);
  p = put_uint(p, lport, r.lport);
  p = put_addr(p, raddr, r.raddr);
  p = put_uint(p, rport, r.rport);
  return put_string(p, dir, to_string(r.dir));
}

// peer_class, asn, as_org, cc_rule, experiment, arm at `first` and after.
char* put_enrichment(char* p, const Enrichment& e, uint32_t first) {
  p = put_string(p, first, e.peer_class);
  p = put_uint(p, first + 1, e.asn);
  p = put_string(p, first + 2, e.as_org);
  p = put_optional(p, first + 3, e.cc_rule);
  p = put_optional(p, first + 4, e.experiment);
  return put_optional(p, first + 5, e.arm);
}

size_t bound(const Enrichment& e, size_t fields, std::initializer_list<const std::string*> strings) {
  size_t b = e.peer_class.size() + e.as_org.size();
  for (const std::string* s : strings) b += s->size();
  for (const auto* o : {&e.cc_rule, &e.experiment, &e.arm})
    if (*o) b += (*o)->size();
  return kMaxPrefix + fields * kMaxField + kMaxBytesPerByte * b;
}

// Writes the message through `body` at out's end, then its length in front.
template <class Body>
void append_delimited(std::string* out, size_t bound, Body body) {
  json_writer::append_in_place(out, bound, [&body](char* begin) {
    char* const message = begin + kMaxPrefix;
    const size_t length = static_cast<size_t>(body(message) - message);
    char prefix[kMaxPrefix];
    const size_t prefix_length = static_cast<size_t>(put_varint(prefix, length) - prefix);
    std::memmove(begin + prefix_length, message, length);
    std::memcpy(begin, prefix, prefix_length);
    return begin + prefix_length + length;
  });
}

}  // namespace

void append_protobuf(const FlowRecord& r, std::string* out) {
  append_delimited(out, bound(r.enrichment, 46, {&r.cc, &r.comm}), [&r](char* p) {
    p = put_string(p, 1, "flow");
    p = put_int(p, 2, r.start_ns);
    p = put_int(p, 3, r.end_ns);
    p = put_int(p, 4, r.fct_us);
    p = put_int(p, 5, r.duration_us);
    p = put_endpoints(p, r, 6, 7, 8, 9, 10, 11);
    p = put_string(p, 12, to_string(r.outcome));
    p = put_string(p, 13, r.cc);
    p = put_uint(p, 14, r.srtt_us);
    p = put_uint(p, 15, r.min_rtt_us);
    p = put_uint(p, 16, r.rttvar_us);
    p = put_uint(p, 17, r.cwnd);
    p = put_uint(p, 18, r.max_cwnd);
    p = put_uint(p, 19, r.ssthresh);
    p = put_uint(p, 20, r.mss);
    p = put_uint(p, 21, r.bytes_acked);
    p = put_uint(p, 22, r.bytes_received);
    p = put_uint(p, 23, r.bytes_retrans);
    p = put_uint(p, 24, r.segs_out);
    p = put_uint(p, 25, r.segs_in);
    p = put_uint(p, 26, r.retrans_segs);
    p = put_uint(p, 27, r.lost_segs);
    p = put_uint(p, 28, r.delivery_rate_bps);
    p = put_uint(p, 29, r.pacing_rate_bps);
    p = put_enrichment(p, r.enrichment, 30);
    p = put_uint(p, 36, r.app_set_cc);
    p = put_uint(p, 37, r.pid);
    p = put_string(p, 38, r.comm);
    p = put_uint(p, 39, r.cgroup_id);
    p = put_uint(p, 40, r.netns);
    p = put_uint(p, 41, r.partial);
    for (uint32_t i = 0; i < TCPSCOPE_CA_STATES; ++i) p = put_uint(p, 42 + i, r.ca_state_us[i]);
    return p;
  });
}

void append_protobuf(const TransferRecord& r, std::string* out) {
  append_delimited(out, bound(r.enrichment, 31, {&r.cc}), [&r](char* p) {
    p = put_string(p, 1, "transfer");
    p = put_int(p, 2, r.flow_start_ns);
    p = put_endpoints(p, r, 3, 4, 5, 6, 7, 8);
    p = put_uint(p, 9, r.seq);
    p = put_string(p, 10, to_string(r.direction));
    p = put_string(p, 11, to_string(r.delimited_by));
    p = put_uint(p, 12, r.sampling_rate);
    p = put_int(p, 13, r.start_ns);
    p = put_int(p, 14, r.end_ns);
    p = put_int(p, 15, r.xfer_us);
    if (r.wait_us) p = put_present(p, 16, *r.wait_us);
    p = put_uint(p, 17, r.bytes);
    p = put_uint(p, 18, r.retrans_segs);
    p = put_uint(p, 19, r.srtt_us);
    p = put_uint(p, 20, r.min_rtt_us);
    p = put_uint(p, 21, r.busy_us);
    p = put_uint(p, 22, r.rwnd_limited_us);
    p = put_uint(p, 23, r.sndbuf_limited_us);
    p = put_string(p, 24, r.cc);
    p = put_enrichment(p, r.enrichment, 25);
    return put_uint(p, 31, r.netns);
  });
}

}  // namespace tcpscope
