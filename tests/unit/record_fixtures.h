// Pieces the record tests (decoders, JSON lines, protobuf messages, compare's
// transfers) build their records and events from, so that each test writes
// only the values it checks.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "net/ip_addr.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace tcpscope {

// The server side of a connection: 198.18.0.1:443, accepted from raddr:rport.
template <class Record>
void set_passive_endpoints(Record* r, const char* raddr, uint16_t rport) {
  r->laddr = *IpAddr::parse("198.18.0.1");
  r->raddr = *IpAddr::parse(raddr);
  r->lport = 443;
  r->rport = rport;
  r->dir = Direction::kPassive;
}

// A client's flow as the aggregator and compare sort it (cc, ASN) and
// measure it (bytes acked, completion time); nothing received.
inline FlowRecord client_flow(const std::string& cc, uint32_t asn, uint64_t bytes_acked, int64_t fct_us) {
  FlowRecord f;
  f.enrichment.peer_class = "client";
  f.cc = cc;
  f.enrichment.asn = asn;
  f.bytes_acked = bytes_acked;
  f.bytes_received = 0;
  f.fct_us = fct_us;
  return f;
}

// One of a client's transfers, as client_flow is one of its flows.
inline TransferRecord client_transfer(const std::string& cc, uint32_t asn, TransferDirection direction, uint64_t bytes,
                                      int64_t xfer_us) {
  TransferRecord t;
  t.enrichment.peer_class = "client";
  t.cc = cc;
  t.enrichment.asn = asn;
  t.direction = direction;
  t.bytes = bytes;
  t.xfer_us = xfer_us;
  return t;
}

// A transfer of a flow that began at 1700000000 s, that flow as above.
inline void set_transfer_flow(TransferRecord* t, const char* raddr, uint16_t rport) {
  t->flow_start_ns = 1700000000000000000;
  set_passive_endpoints(t, raddr, rport);
}

// A kernel event's connection id: IPv4 198.18.0.1:sport -> daddr:dport.
template <class Id>
void set_ipv4_id(Id* id, uint8_t dir, const char* daddr, uint16_t sport, uint16_t dport, uint64_t start_ns) {
  id->family = 4;
  id->dir = dir;
  inet_pton(AF_INET, "198.18.0.1", id->saddr);
  ASSERT_EQ(inet_pton(AF_INET, daddr, id->daddr), 1) << daddr;
  id->sport = sport;
  id->dport = dport;
  id->start_ns = start_ns;
}

// The id's addresses as IPv6 ones (an IPv4-mapped one among them).
template <class Id>
void set_ipv6_addrs(Id* id, const char* saddr, const char* daddr) {
  id->family = 6;
  ASSERT_EQ(inet_pton(AF_INET6, saddr, id->saddr), 1) << saddr;
  ASSERT_EQ(inet_pton(AF_INET6, daddr, id->daddr), 1) << daddr;
}

// The three times the kernel's chrono counts (tcp_info's busy, rwnd- and
// sndbuf-limited), on an event or a record alike.
template <class Transfer>
void set_chrono_us(Transfer* t, uint32_t busy, uint32_t rwnd_limited, uint32_t sndbuf_limited) {
  t->kernel.busy_us = busy;
  t->rwnd_limited_us = rwnd_limited;
  t->kernel.sndbuf_limited_us = sndbuf_limited;
}

// Each record appended is a line of its own: two records, two newlines.
template <class Record, class Append>
void expect_one_line_each(Append append, const Record& r) {
  std::string out;
  append(r, &out);
  append(r, &out);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);
}

}  // namespace tcpscope
