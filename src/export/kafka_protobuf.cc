#include "export/kafka_protobuf.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <type_traits>

#include "record/json_writer.h"
#include "record/record_fields.h"
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
// Every field: its tag (2 bytes up to field 2047) and a 64-bit varint (10
// bytes) or a string's length (5 bytes). Beyond that, the two addresses'
// text (INET6_ADDRSTRLEN each), the names of enum values ("departure",
// "passive": 16 bytes each for the four a message can have) and the
// strings' own bytes, added by bound(), 3 for each (U+FFFD). Tight, as the
// output is zero-filled to the bound first.
constexpr size_t kMaxField = 2 + 10;
constexpr size_t kMaxFixedText = 2 * 46 + 4 * 16;
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

// A row's value as its field: by the value's C++ type, which the row's
// proto type must fit (checked where the table is expanded).
template <class T>
char* put_value(char* p, uint32_t field, const T& v) {
  if constexpr (std::is_same_v<T, bool>)
    return put_uint(p, field, v);
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8)
    return put_int(p, field, v);
  else if constexpr (std::is_integral_v<T>)
    return put_uint(p, field, static_cast<uint64_t>(v));
  else if constexpr (std::is_same_v<T, IpAddr>)
    return put_addr(p, field, v);
  else if constexpr (std::is_same_v<T, std::optional<std::string>>)
    return put_optional(p, field, v);
  else if constexpr (std::is_same_v<T, std::optional<int64_t>>)
    return v ? put_present(p, field, *v) : p;
  else
    return put_string(p, field, std::string_view(v));
}

// One row of a record's table (record/record_fields.h) as a field of the
// message, where the table is expanded with `p` and the record `r` in scope.
#define TCPSCOPE_PROTO_FIELD(key, number, proto_type, clickhouse_type, value)                               \
  static_assert(proto_type_fits<std::decay_t<decltype(value)>>(proto_type), #key ": not a " proto_type); \
  p = put_value(p, number, value);

size_t bound(const Enrichment& e, size_t fields, std::initializer_list<const std::string*> strings) {
  size_t b = e.peer_class.size() + e.as_org.size();
  for (const std::string* s : strings) b += s->size();
  for (const auto* o : {&e.cc_rule, &e.experiment, &e.arm})
    if (*o) b += (*o)->size();
  return kMaxPrefix + fields * kMaxField + kMaxFixedText + kMaxBytesPerByte * b;
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
  append_delimited(out, bound(r.enrichment, std::size(kFlowFields), {&r.cc, &r.comm}), [&r](char* p) {
    p = put_string(p, 1, "flow");
    TCPSCOPE_FLOW_FIELDS(TCPSCOPE_PROTO_FIELD)
    return p;
  });
}

void append_protobuf(const TransferRecord& r, std::string* out) {
  append_delimited(out, bound(r.enrichment, std::size(kTransferFields), {&r.cc}), [&r](char* p) {
    p = put_string(p, 1, "transfer");
    TCPSCOPE_TRANSFER_FIELDS(TCPSCOPE_PROTO_FIELD)
    return p;
  });
}

}  // namespace tcpscope
