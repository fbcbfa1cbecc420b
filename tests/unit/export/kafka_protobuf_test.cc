// The Protobuf messages read back by protoc (Debian's protobuf-compiler)
// against the shipped schema, packaging/clickhouse/tcpscope.proto, and
// checked field by field against the flow log's JSON line of the same record.
#include "export/kafka_protobuf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "record/flow_json.h"
#include "record/transfer_json.h"

#include "../record_fixtures.h"

namespace tcpscope {
namespace {

// The varint in front of the message; the message must be all that follows.
std::string unframed(const std::string& framed) {
  uint64_t length = 0;
  size_t i = 0;
  for (int shift = 0; i < framed.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(framed[i++]);
    length |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  EXPECT_EQ(length, framed.size() - i) << "the length prefix is the message's length";
  return framed.substr(i);
}

// protoc's text format's C escapes undone.
std::string unescaped(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    if (c >= '0' && c <= '7') {
      int v = 0;
      for (int n = 0; n < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++n) v = v * 8 + (s[i++] - '0');
      --i;
      out += static_cast<char>(v);
    } else {
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
    }
  }
  return out;
}

// The message decoded by `protoc --decode=tcpscope.TYPE`: field name -> value
// (strings unquoted and unescaped).
std::map<std::string, std::string> protoc_decode(const std::string& type, const std::string& message) {
  char path[] = "/tmp/tcpscope-protobuf-test-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0) << "mkstemp: " << std::strerror(errno);
  EXPECT_EQ(write(fd, message.data(), message.size()), static_cast<ssize_t>(message.size()));
  close(fd);
  const std::string command = std::string("protoc -I") + TCPSCOPE_CLICKHOUSE_DIR + " --decode=tcpscope." + type +
                              " tcpscope.proto < " + path + " 2>&1";
  FILE* f = popen(command.c_str(), "r");
  EXPECT_TRUE(f) << command << ": " << std::strerror(errno);
  std::string text;
  char buf[4096];
  for (size_t n; f && (n = fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const int status = f ? pclose(f) : -1;
  unlink(path);
  EXPECT_EQ(status, 0) << command << " (protoc: Debian's protobuf-compiler, scripts/dev.sh installs it): " << text;
  std::map<std::string, std::string> fields;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(": ");
    EXPECT_NE(colon, std::string::npos) << line;
    std::string value = line.substr(colon + 2);
    if (value.size() >= 2 && value.front() == '"') value = unescaped(value.substr(1, value.size() - 2));
    EXPECT_TRUE(fields.emplace(line.substr(0, colon), value).second) << "twice: " << line;
  }
  return fields;
}

// Every key of the JSON line is the field of that name with the same value:
// left out when it is proto3's default and not nullable, present when the
// JSON has a value for a nullable key, absent when it has null; no field is
// not a key.
void expect_same_record(const std::string& json_line, const std::map<std::string, std::string>& fields,
                        const std::set<std::string>& nullable) {
  const auto j = nlohmann::ordered_json::parse(json_line);
  for (const auto& [key, value] : j.items()) {
    const auto it = fields.find(key);
    if (value.is_null()) {
      EXPECT_TRUE(nullable.count(key)) << key << " is null in the JSON but not optional in the schema";
      EXPECT_EQ(it, fields.end()) << key << ": null is an absent field";
      continue;
    }
    const std::string want = value.is_string() ? value.get<std::string>() : value.dump();
    const bool is_default = want == "0" || want.empty() || want == "false";
    if (is_default && !nullable.count(key)) {
      EXPECT_EQ(it, fields.end()) << key << " is proto3's default: left out";
      continue;
    }
    ASSERT_NE(it, fields.end()) << key << " (" << want << ") is not in the message";
    EXPECT_EQ(it->second, want) << key;
  }
  for (const auto& [name, value] : fields) EXPECT_TRUE(j.contains(name)) << name << " is not a key of the JSON line";
}

FlowRecord full_flow() {
  FlowRecord r;
  r.start_ns = 1700000000000000000;
  r.end_ns = 1700000000123456789;
  r.fct_us = 123456;
  r.duration_us = -5;  // signed: ten bytes as protobuf's int64
  set_passive_endpoints(&r, "fd00::2", 51234);
  r.outcome = Outcome::kReset;
  r.partial = true;
  r.app_set_cc = true;
  r.cc = "bbr";
  r.srtt_us = 21000, r.min_rtt_us = 20000, r.kernel.rttvar_us = 500;
  r.kernel.cwnd = 10, r.kernel.max_cwnd = 80, r.kernel.ssthresh = 2147483647, r.kernel.mss = 1448;
  r.bytes_acked = 18446744073709551615ULL;  // u64 max survives
  r.bytes_received = 1, r.kernel.bytes_retrans = 2;
  r.segs_out = 3, r.kernel.segs_in = 4, r.retrans_segs = 5, r.kernel.lost_segs = 6;
  r.kernel.delivery_rate_bps = 7, r.kernel.pacing_rate_bps = 8;
  r.ca_state_us = {9, 10, 11, 12, 13};
  // The arm present though empty: not null.
  r.enrichment = {"pop-to-pop", 4294967295u, "Example \"Wireless\" \\ Net \xE4\xB8\xAD\xE5\x9B\xBD", "wireless-bbr",
                  "bbr-vs-cubic", ""};
  r.pid = 4242;
  r.comm = "we\x01ird\xFF";  // a control character as it is, the invalid byte as U+FFFD
  r.socket.task_cgroup_id = 1ull << 40;
  r.socket.sock_cgroup_id = (1ull << 40) + 1;
  r.enrichment.service = std::make_shared<ServiceIdentity>(
      ServiceIdentity{"web/api-7c9f8d6b5-x2k4z", "cri-containerd-" + std::string(64, 'a') + ".scope",
                      std::string(64, 'a'), "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", (1ull << 40) + 1});
  r.netns = 4026531840u;
  return r;
}

TransferRecord full_transfer() {
  TransferRecord r;
  set_transfer_flow(&r, "198.19.255.254", 51234);
  r.netns = 4026531840u;
  r.seq = 2;
  r.direction = TransferDirection::kRecv;
  r.delimited_by = TransferDelimiter::kArrival;
  r.sampling_rate = 64;
  r.start_ns = 1700000000123456789;
  r.end_ns = 1700000000373456789;
  r.xfer_us = 250000;
  r.wait_us = 0;  // present though 0: not null
  r.bytes = 18446744073709551615ULL;
  r.retrans_segs = 3;
  r.srtt_us = 21000, r.min_rtt_us = 20000;
  set_chrono_us(&r, 250000, 1000, 2000);
  r.cc = "cubic";
  r.enrichment = {"client", 64501, "Telef\xC3\xB3nica", "client-ab", "bbr-vs-cubic", "cubic"};
  return r;
}

const std::set<std::string> kNullable = {"cc_rule", "experiment", "arm"};
const std::set<std::string> kTransferNullable = {"cc_rule", "experiment", "arm", "wait_us"};

template <class Record>
std::string message_of(const Record& r) {
  std::string out;
  append_protobuf(r, &out);
  return unframed(out);
}

// The record's message as protoc reads it, once expect_same_record has held
// it against the record's JSON line.
template <class Record>
std::map<std::string, std::string> decoded_as(const Record& r, const char* message,
                                              const std::set<std::string>& nullable) {
  std::string line;
  append_json(r, &line);
  const auto fields = protoc_decode(message, message_of(r));
  expect_same_record(line, fields, nullable);
  return fields;
}

std::map<std::string, std::string> decoded_as_its_json_line(const FlowRecord& r) {
  return decoded_as(r, "FlowRecord", kNullable);
}

std::map<std::string, std::string> decoded_as_its_json_line(const TransferRecord& r) {
  return decoded_as(r, "TransferRecord", kTransferNullable);
}

TEST(KafkaProtobuf, FlowEveryFieldAsTheJsonLineHasIt) {
  const auto fields = decoded_as_its_json_line(full_flow());
  EXPECT_EQ(fields.at("kind"), "flow");
  EXPECT_EQ(fields.at("arm"), "");
  EXPECT_EQ(fields.at("duration_us"), "-5");
  EXPECT_EQ(fields.at("comm"), "we\x01ird\xEF\xBF\xBD");
  EXPECT_EQ(fields.size(), 51u) << "every field of the schema was written";
}

TEST(KafkaProtobuf, FlowDefaultsLeftOutNullsAbsent) {
  // Everything 0, "", false, unset addresses, no enrichment.
  const auto fields = decoded_as_its_json_line(FlowRecord{});
  // What is left: the strings that are never empty.
  EXPECT_EQ(fields, (std::map<std::string, std::string>{{"kind", "flow"}, {"dir", "active"}, {"outcome", "ok"}}));
}

TEST(KafkaProtobuf, TransferEveryFieldAsTheJsonLineHasIt) {
  const auto fields = decoded_as_its_json_line(full_transfer());
  EXPECT_EQ(fields.at("wait_us"), "0");
  EXPECT_EQ(fields.at("sampling_rate"), "64");
  EXPECT_EQ(fields.size(), 31u) << "every field of the schema was written";
}

TEST(KafkaProtobuf, TransferNullWaitAndRuleAbsent) {
  TransferRecord r = full_transfer();
  r.wait_us.reset();
  r.enrichment.cc_rule.reset();
  const auto fields = decoded_as_its_json_line(r);
  EXPECT_FALSE(fields.count("wait_us"));
  EXPECT_FALSE(fields.count("cc_rule"));
}

// Messages append one after the other, each with its own length, as a Kafka
// message of ClickHouse's Protobuf format may hold several; a long string
// takes a two-byte length prefix.
TEST(KafkaProtobuf, MessagesAppendLengthDelimited) {
  FlowRecord big = full_flow();
  big.enrichment.as_org.assign(300, 'a');
  std::string out;
  append_protobuf(full_flow(), &out);
  const size_t first = out.size();
  append_protobuf(big, &out);
  EXPECT_EQ(unframed(out.substr(0, first)), message_of(full_flow()));
  const std::string second = out.substr(first);
  EXPECT_TRUE(static_cast<unsigned char>(second[0]) & 0x80) << "more than 127 bytes: a 2-byte varint";
  EXPECT_EQ(protoc_decode("FlowRecord", unframed(second)).at("as_org"), big.enrichment.as_org);
}

// Every string all invalid bytes (each becomes U+FFFD, three bytes), every
// signed number negative (ten-byte varints), IPv6 text: the most a record
// takes per byte of its strings, inside the bound the encoder reserves
// (under tests/sanitize.sh a write past it is a heap overflow).
TEST(KafkaProtobuf, LongestEncodingFitsAndDecodes) {
  const std::string invalid(200, '\xFF');
  std::string replaced;
  for (int i = 0; i < 200; ++i) replaced += "\xEF\xBF\xBD";
  FlowRecord f = full_flow();
  f.start_ns = f.end_ns = f.fct_us = f.duration_us = INT64_MIN;
  f.laddr = f.raddr = *IpAddr::parse("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe");
  for (std::string* s : {&f.cc, &f.enrichment.peer_class, &f.enrichment.as_org, &f.comm}) *s = invalid;
  f.enrichment.cc_rule = f.enrichment.experiment = f.enrichment.arm = invalid;
  const auto flow = protoc_decode("FlowRecord", message_of(f));
  for (const char* k : {"cc", "peer_class", "as_org", "comm", "cc_rule", "experiment", "arm"})
    EXPECT_EQ(flow.at(k), replaced) << k;
  EXPECT_EQ(flow.at("start_ns"), std::to_string(INT64_MIN));
  EXPECT_EQ(flow.at("laddr"), "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe");

  TransferRecord t = full_transfer();
  t.flow_start_ns = t.start_ns = t.end_ns = t.xfer_us = INT64_MIN;
  t.wait_us = INT64_MIN;
  for (std::string* s : {&t.cc, &t.enrichment.peer_class, &t.enrichment.as_org}) *s = invalid;
  t.enrichment.cc_rule = t.enrichment.experiment = t.enrichment.arm = invalid;
  const auto transfer = protoc_decode("TransferRecord", message_of(t));
  for (const char* k : {"cc", "peer_class", "as_org", "cc_rule", "experiment", "arm"})
    EXPECT_EQ(transfer.at(k), replaced) << k;
  EXPECT_EQ(transfer.at("wait_us"), std::to_string(INT64_MIN));
}

}  // namespace
}  // namespace tcpscope
