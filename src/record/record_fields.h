// The records' fields, each written once: one table per record kind, whose
// rows the flow log's JSON writer (record/flow_json.cc, transfer_json.cc)
// and the Kafka protobuf writer (export/kafka_protobuf.cc) expand, and whose
// keys compare's readers use (record_key::). tests/unit/record/
// record_fields_test.cc holds packaging/clickhouse/tcpscope.proto, flows.sql
// and transfers.sql to these tables.
//
// A row is FIELD(key, number, proto_type, clickhouse_type, value):
//   key              the JSON key, the protobuf field's and the ClickHouse
//                    column's name;
//   number           the protobuf field number;
//   proto_type       its type in tcpscope.proto ("optional ..." for the
//                    JSON's nullable keys: absent is null);
//   clickhouse_type  the column's type in flows.sql / transfers.sql;
//   value            what is written, from the record named `r` where the
//                    table is expanded.
// Rows are in the line's order. Every line and message starts with "kind"
// (field 1, a String column), which is not a row.
//
// A value the kernel reports as it is goes in the event's `kernel` part
// (include/tcpscope/flow_event.h), which the decoder copies whole: such a
// field is named in the event header, the BPF code that fills it and here,
// read as r.kernel.NAME (tests/unit/record/kernel_part_test.cc counts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "net/ip_addr.h"
#include "record/flow_record.h"
#include "record/transfer_record.h"

// The flow's endpoints, as both record kinds have them, from field N on.
#define TCPSCOPE_ENDPOINT_FIELDS(FIELD, N)           \
  FIELD(family, N, "uint32", "UInt8", r.family())    \
  FIELD(laddr, N + 1, "string", "String", r.laddr)   \
  FIELD(lport, N + 2, "uint32", "UInt16", r.lport)   \
  FIELD(raddr, N + 3, "string", "String", r.raddr)   \
  FIELD(rport, N + 4, "uint32", "UInt16", r.rport)   \
  FIELD(dir, N + 5, "string", "String", to_string(r.dir))

// What the pipeline added (record/enrichment.h), from field N on.
#define TCPSCOPE_ENRICHMENT_FIELDS(FIELD, N)                                                  \
  FIELD(peer_class, N, "string", "String", r.enrichment.peer_class)                          \
  FIELD(asn, N + 1, "uint32", "UInt32", r.enrichment.asn)                                    \
  FIELD(as_org, N + 2, "string", "String", r.enrichment.as_org)                              \
  FIELD(cc_rule, N + 3, "optional string", "Nullable(String)", r.enrichment.cc_rule)         \
  FIELD(experiment, N + 4, "optional string", "Nullable(String)", r.enrichment.experiment)   \
  FIELD(arm, N + 5, "optional string", "Nullable(String)", r.enrichment.arm)

// The service that owns the socket (record/enrichment.h, ServiceIdentity)
// and the socket's cgroup it is named from, from field N on.
#define TCPSCOPE_SERVICE_FIELDS(FIELD, N)                                                    \
  FIELD(service, N, "string", "String", r.enrichment.owner().name)                          \
  FIELD(unit, N + 1, "string", "String", r.enrichment.owner().unit)                         \
  FIELD(container_id, N + 2, "string", "String", r.enrichment.owner().container_id)         \
  FIELD(pod_uid, N + 3, "string", "String", r.enrichment.owner().pod_uid)                   \
  FIELD(sock_cgroup_id, N + 4, "uint64", "UInt64", r.socket.sock_cgroup_id)

// SPEC.md's flow record, then the extensions the README lists.
#define TCPSCOPE_FLOW_FIELDS(FIELD)                                                       \
  FIELD(start_ns, 2, "int64", "Int64", r.start_ns)                                       \
  FIELD(end_ns, 3, "int64", "Int64", r.end_ns)                                           \
  FIELD(fct_us, 4, "int64", "Int64", r.fct_us)                                           \
  FIELD(duration_us, 5, "int64", "Int64", r.duration_us)                                 \
  TCPSCOPE_ENDPOINT_FIELDS(FIELD, 6)                                                      \
  FIELD(outcome, 12, "string", "String", to_string(r.outcome))                           \
  FIELD(cc, 13, "string", "String", r.cc)                                                \
  FIELD(srtt_us, 14, "uint64", "UInt64", r.srtt_us)                                      \
  FIELD(min_rtt_us, 15, "uint64", "UInt64", r.min_rtt_us)                                \
  FIELD(rttvar_us, 16, "uint64", "UInt64", r.kernel.rttvar_us)                           \
  FIELD(cwnd, 17, "uint64", "UInt64", r.kernel.cwnd)                                     \
  FIELD(max_cwnd, 18, "uint64", "UInt64", r.kernel.max_cwnd)                             \
  FIELD(ssthresh, 19, "uint64", "UInt64", r.kernel.ssthresh)                             \
  FIELD(mss, 20, "uint64", "UInt64", r.kernel.mss)                                       \
  FIELD(bytes_acked, 21, "uint64", "UInt64", r.bytes_acked)                              \
  FIELD(bytes_received, 22, "uint64", "UInt64", r.bytes_received)                        \
  FIELD(bytes_retrans, 23, "uint64", "UInt64", r.kernel.bytes_retrans)                   \
  FIELD(segs_out, 24, "uint64", "UInt64", r.segs_out)                                    \
  FIELD(segs_in, 25, "uint64", "UInt64", r.kernel.segs_in)                               \
  FIELD(retrans_segs, 26, "uint64", "UInt64", r.retrans_segs)                            \
  FIELD(lost_segs, 27, "uint64", "UInt64", r.kernel.lost_segs)                           \
  FIELD(delivery_rate_bps, 28, "uint64", "UInt64", r.kernel.delivery_rate_bps)           \
  FIELD(pacing_rate_bps, 29, "uint64", "UInt64", r.kernel.pacing_rate_bps)               \
  TCPSCOPE_ENRICHMENT_FIELDS(FIELD, 30)                                                   \
  FIELD(app_set_cc, 36, "bool", "UInt8", r.app_set_cc)                                   \
  FIELD(pid, 37, "uint32", "UInt32", r.pid)                                              \
  FIELD(comm, 38, "string", "String", r.comm)                                            \
  FIELD(cgroup_id, 39, "uint64", "UInt64", r.socket.task_cgroup_id)                     \
  FIELD(netns, 40, "uint32", "UInt32", r.netns)                                          \
  FIELD(partial, 41, "bool", "UInt8", r.partial)                                         \
  FIELD(ca_open_us, 42, "uint64", "UInt64", r.ca_state_us[0])                            \
  FIELD(ca_disorder_us, 43, "uint64", "UInt64", r.ca_state_us[1])                        \
  FIELD(ca_cwr_us, 44, "uint64", "UInt64", r.ca_state_us[2])                             \
  FIELD(ca_recovery_us, 45, "uint64", "UInt64", r.ca_state_us[3])                        \
  FIELD(ca_loss_us, 46, "uint64", "UInt64", r.ca_state_us[4])                            \
  FIELD(ecn, 47, "bool", "UInt8", r.kernel.ecn != 0)                                     \
  FIELD(delivered_ce, 48, "uint64", "UInt64", r.kernel.delivered_ce)                     \
  TCPSCOPE_SERVICE_FIELDS(FIELD, 49)

// SPEC.md's transfer record, then netns and the owner.
#define TCPSCOPE_TRANSFER_FIELDS(FIELD)                                                   \
  FIELD(flow_start_ns, 2, "int64", "Int64", r.flow_start_ns)                             \
  TCPSCOPE_ENDPOINT_FIELDS(FIELD, 3)                                                      \
  FIELD(seq, 9, "uint64", "UInt64", r.seq)                                               \
  FIELD(direction, 10, "string", "String", to_string(r.direction))                       \
  FIELD(delimited_by, 11, "string", "String", to_string(r.delimited_by))                 \
  FIELD(sampling_rate, 12, "uint32", "UInt32", r.sampling_rate)                          \
  FIELD(start_ns, 13, "int64", "Int64", r.start_ns)                                      \
  FIELD(end_ns, 14, "int64", "Int64", r.end_ns)                                          \
  FIELD(xfer_us, 15, "int64", "Int64", r.xfer_us)                                        \
  FIELD(wait_us, 16, "optional int64", "Nullable(Int64)", r.wait_us)                     \
  FIELD(bytes, 17, "uint64", "UInt64", r.bytes)                                          \
  FIELD(retrans_segs, 18, "uint64", "UInt64", r.retrans_segs)                            \
  FIELD(srtt_us, 19, "uint64", "UInt64", r.srtt_us)                                      \
  FIELD(min_rtt_us, 20, "uint64", "UInt64", r.min_rtt_us)                                \
  FIELD(busy_us, 21, "uint64", "UInt64", r.kernel.busy_us)                               \
  FIELD(rwnd_limited_us, 22, "uint64", "UInt64", r.rwnd_limited_us)                      \
  FIELD(sndbuf_limited_us, 23, "uint64", "UInt64", r.kernel.sndbuf_limited_us)           \
  FIELD(cc, 24, "string", "String", r.cc)                                                \
  TCPSCOPE_ENRICHMENT_FIELDS(FIELD, 25)                                                   \
  FIELD(netns, 31, "uint32", "UInt32", r.netns)                                          \
  TCPSCOPE_SERVICE_FIELDS(FIELD, 32)

namespace tcpscope {

// One row of a table, for what reads the schema at run time (the tests that
// hold the .proto and the SQL to it; compare's column checks).
struct RecordField {
  std::string_view key;
  uint32_t number;
  std::string_view proto_type;
  std::string_view clickhouse_type;
};

#define TCPSCOPE_RECORD_FIELD_ROW(key, number, proto_type, clickhouse_type, value) \
  RecordField{#key, number, proto_type, clickhouse_type},
inline constexpr RecordField kFlowFields[] = {TCPSCOPE_FLOW_FIELDS(TCPSCOPE_RECORD_FIELD_ROW)};
inline constexpr RecordField kTransferFields[] = {TCPSCOPE_TRANSFER_FIELDS(TCPSCOPE_RECORD_FIELD_ROW)};
#undef TCPSCOPE_RECORD_FIELD_ROW

// The keys, by name: record_key::flow::fct_us is "fct_us". A reader that
// names a field through these cannot name one the records do not have.
#define TCPSCOPE_RECORD_KEY(key, number, proto_type, clickhouse_type, value) inline constexpr char key[] = #key;
namespace record_key {
inline constexpr char kind[] = "kind";  // every line's first key, field 1: "flow" or "transfer"
}  // namespace record_key
namespace record_key::flow {
TCPSCOPE_FLOW_FIELDS(TCPSCOPE_RECORD_KEY)
}  // namespace record_key::flow
namespace record_key::transfer {
TCPSCOPE_TRANSFER_FIELDS(TCPSCOPE_RECORD_KEY)
}  // namespace record_key::transfer
#undef TCPSCOPE_RECORD_KEY

// Whether a value of C++ type T is written as `proto_type` says: the
// writers check every row with it at compile time.
template <class T>
constexpr bool proto_type_fits(std::string_view proto_type) {
  if constexpr (std::is_same_v<T, bool>)
    return proto_type == "bool";
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8)
    return proto_type == "int64";
  else if constexpr (std::is_integral_v<T> && sizeof(T) == 8)
    return proto_type == "uint64";
  else if constexpr (std::is_integral_v<T>)
    return proto_type == "uint32" || proto_type == "uint64";
  else if constexpr (std::is_same_v<T, std::optional<int64_t>>)
    return proto_type == "optional int64";
  else if constexpr (std::is_same_v<T, std::optional<std::string>>)
    return proto_type == "optional string";
  else
    return proto_type == "string" &&
           (std::is_same_v<T, IpAddr> || std::is_convertible_v<const T&, std::string_view>);
}

}  // namespace tcpscope
