// The flow and transfer records as the Protobuf messages of
// packaging/clickhouse/tcpscope.proto (export.kafka.format: protobuf), each
// preceded by its length as a varint: one message of ClickHouse's
// length-delimited `Protobuf` format, which its Kafka engine reads.
#pragma once

#include <string>

#include "record/flow_record.h"
#include "record/transfer_record.h"

namespace tcpscope {

// Appends the record's length and message. Hand-written wire encoding (no
// libprotobuf): the daemon's loop calls this for every record it exports.
// Fields at their proto3 default are left out, the nullable ones are written
// whenever they hold a value.
void append_protobuf(const FlowRecord& r, std::string* out);
void append_protobuf(const TransferRecord& r, std::string* out);

}  // namespace tcpscope
