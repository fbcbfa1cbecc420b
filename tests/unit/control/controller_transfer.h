// A send transfer of a socket of controller rule "auto", served on 443 in
// namespace `netns` to a client at 198.18.1.2: what the controller's state
// tests feed it. `connection` (its flow's start) tells connections apart.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"
#include "net/ip_addr.h"
#include "record/transfer_record.h"

namespace tcpscope {

inline TransferRecord controller_transfer(uint32_t netns, int64_t connection, const std::string& arm, uint32_t asn,
                                          uint64_t bytes, int64_t xfer_us, int64_t end_ns) {
  TransferRecord t;
  t.netns = netns;
  t.dir = Direction::kPassive;
  t.laddr = *IpAddr::parse("198.18.0.1");
  t.raddr = *IpAddr::parse("198.18.1.2");
  t.lport = 443;
  t.flow_start_ns = connection;
  t.end_ns = end_ns;
  t.direction = TransferDirection::kSend;
  t.bytes = bytes;
  t.xfer_us = xfer_us;
  t.srtt_us = 55000;
  t.min_rtt_us = 50000;
  t.enrichment.asn = asn;
  t.enrichment.peer_class = "client";
  t.enrichment.cc_rule = "auto";
  t.enrichment.experiment = kControllerExperiment;
  t.enrichment.arm = arm;
  t.cc = arm;
  return t;
}

}  // namespace tcpscope
