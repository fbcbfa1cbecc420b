// One finished TCP flow, decoded from the kernel event and ready for the
// enricher, the aggregator and the flow log. Field names follow SPEC.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "net/ip_addr.h"
#include "record/enrichment.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

enum class Direction : uint8_t { kActive, kPassive };
enum class Outcome : uint8_t { kOk, kReset, kRefused, kTimeout, kError };

const char* to_string(Direction d);
const char* to_string(Outcome o);

// Who owns a record's socket: its user, as its namespace judges it (what the
// controller's evidence gate, control/evidence_gate.h, tells a service's
// sockets from another user's by), and its cgroups.
struct SocketOwner {
  uint32_t uid = 0;  // sk_uid: who accepted (passive) or created (active) it, in the initial user namespace
  // The socket's namespace's net.ipv4.ip_unprivileged_port_start when the
  // record was made: ports below it need CAP_NET_BIND_SERVICE to listen on.
  uint16_t unprivileged_port_start = 1024;
  // The socket's cgroup v2 (an accepted socket's is its listener's) and its
  // owning task's (0 until one is seen): the service is named from these
  // (enrich/service_names.h). The flow record's `cgroup_id` is the task's.
  uint64_t sock_cgroup_id = 0;
  uint64_t task_cgroup_id = 0;
};

struct FlowRecord {
  // CLOCK_REALTIME nanoseconds.
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t fct_us = 0;
  int64_t duration_us = 0;

  IpAddr laddr, raddr;       // IPv4-mapped peers already folded to IPv4
  uint16_t lport = 0, rport = 0;
  Direction dir = Direction::kActive;
  Outcome outcome = Outcome::kOk;
  bool partial = false;      // opened before the daemon attached: start is unknown
  bool app_set_cc = false;

  std::string cc;
  uint32_t srtt_us = 0, min_rtt_us = 0;
  uint64_t bytes_acked = 0, bytes_received = 0;
  uint32_t segs_out = 0, retrans_segs = 0;
  // Microseconds spent in each congestion-avoidance state, in the kernel's
  // order: Open, Disorder, CWR, Recovery, Loss.
  std::array<uint64_t, TCPSCOPE_CA_STATES> ca_state_us{};
  // What the kernel reports as it is (the event's part of that name, its
  // fields named for the outputs only in record/record_fields.h).
  tcpscope_flow_kernel kernel{};

  // Filled in by the pipeline (empty / 0 / nullopt until then).
  Enrichment enrichment;

  uint32_t pid = 0;
  std::string comm;
  uint32_t netns = 0;
  SocketOwner socket;

  int family() const { return raddr.family; }
};

}  // namespace tcpscope
