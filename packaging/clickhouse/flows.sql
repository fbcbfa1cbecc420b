-- tcpscope flow records, from Kafka into ClickHouse.
--
-- Creates (IF NOT EXISTS, so applying it again changes nothing):
--   database tcpscope
--   tcpscope.flows_kafka  Kafka engine table: consumer group 'tcpscope-clickhouse-flows' reading the
--                         topic 'tcpscope.flows' on the brokers 'kafka-1:9092', one JSONEachRow
--                         object per flow record (tcpscope's flow log line, "kind":"flow")
--   tcpscope.flows        MergeTree table holding the records: one partition per UTC day of
--                         start_ns, ordered by (peer_class, asn, cc, start_ns)
--   tcpscope.flows_mv     materialized view moving every row read from flows_kafka into flows
--
-- Apply:
--   clickhouse-client --multiquery < /usr/share/tcpscope/clickhouse/flows.sql
-- Other brokers, topic or consumer group: rewrite the quoted defaults, e.g.
--   sed -e "s/'kafka-1:9092'/'k1:9092,k2:9092'/" -e "s/'tcpscope.flows'/'prod.tcpscope.flows'/" \
--       -e "s/'tcpscope-clickhouse-flows'/'ch-eu1-flows'/" /usr/share/tcpscope/clickhouse/flows.sql \
--     | clickhouse-client --multiquery
--
-- ClickHouse 18.16's Kafka engine: a new consumer group starts at the end of the topic (what
-- was written before its first read is skipped) unless config.xml has
--   <kafka><auto_offset_reset>smallest</auto_offset_reset></kafka>
-- and it writes a block once it holds max_block_size rows (65536) or the topic goes quiet, so
-- at a few records per second rows appear minutes late; a smaller max_block_size in the
-- profile of the server's default user bounds that. Current ClickHouse, as its documentation
-- says (its Kafka engine is not tested here), starts at the beginning and flushes every
-- stream_flush_interval_ms (7.5 s).
--
-- Retention: ClickHouse 19.6 and later: apply ttl.sql (30 days) after this file. ClickHouse 18.16
-- (Debian 12's) has no TTL: drop old days instead, e.g.
--   ALTER TABLE tcpscope.flows DROP PARTITION '2026-10-01'
--
-- Tested on ClickHouse 18.16 (Debian 12's server, fed by a real Kafka broker) and on ClickHouse
-- 26.9 (chdb-core's engine, the Kafka table's engine swapped for Null and the rows inserted as
-- JSONEachRow): the tables, the view, the reading of tcpscope's lines and compare --clickhouse on
-- both, the Kafka engine itself on 18.16 only. What keeps the file to both: the Kafka engine takes
-- its four positional arguments only (later positions differ between versions), no TTL, no
-- LowCardinality, no Nullable column in the sorting key.
--
-- export.kafka.format: protobuf (tcpscope's default is json): the messages are
-- tcpscope.proto's FlowRecord, length-delimited, one or more records per Kafka message, and the Kafka
-- table reads them with kafka_format = 'Protobuf' and kafka_schema = 'tcpscope.proto:FlowRecord'
-- instead of 'JSONEachRow'; the columns, the MergeTree table and the view stay as they are:
--   sed -e "s/'JSONEachRow')/'Protobuf') SETTINGS kafka_schema = 'tcpscope.proto:FlowRecord'/" \
--       /usr/share/tcpscope/clickhouse/flows.sql | clickhouse-client --multiquery
-- with /usr/share/tcpscope/clickhouse/tcpscope.proto copied into the server's format_schema_path
-- (config.xml <format_schema_path>; ClickHouse's documentation gives
-- /var/lib/clickhouse/format_schemas/). A table made from JSONEachRow is dropped first (the view,
-- then the Kafka table; the MergeTree table keeps its rows). Protobuf needs a ClickHouse newer than
-- 18.16, which has no Protobuf format (tested: it refuses one); tested on ClickHouse 26.9 (chdb-core):
-- the daemon's messages, as a real Kafka broker holds them, read through the Protobuf format with
-- this schema and the Kafka table's columns, are the flow log's lines field by field in the
-- MergeTree table, and compare --clickhouse answers on them as on the same records from JSON. The
-- Kafka engine's own reading of Protobuf is not tested here (on 26.9 no Kafka engine is).

-- Types keep every value exact: UInt64 for counters, rates, byte counts and the kernel's
-- durations in µs; Int64 for the fields tcpscope writes from a signed 64-bit number (the
-- CLOCK_REALTIME ns times start_ns/end_ns, fct_us, duration_us); String for addresses (IPv4
-- dotted quad or IPv6 text, "" when unknown); Nullable(String) for the keys that may be null
-- (cc_rule, experiment, arm); UInt8 for the JSON booleans (true -> 1, false -> 0).
-- Strings arrive as JSON strings in UTF-8 and are stored as that text: a UTF-8 comm or as_org
-- as itself, each byte of an invalid sequence (a comm the kernel cut at 15 bytes
-- mid-character) as U+FFFD, control characters as they were.
--
-- Each Kafka table has a consumer group of its own (flows: tcpscope-clickhouse-flows, transfers:
-- tcpscope-clickhouse-transfers). Keep them apart: on ClickHouse 18.16 every read cycle of a
-- Kafka table subscribes and unsubscribes its consumer, so two tables in one group keep it
-- rebalancing and one of them may read nothing.
--
-- On 18.16 JSONEachRow rejects keys a table has no column for: before running a tcpscope that
-- writes more keys, add their columns (ALTER TABLE ... ADD COLUMN on the Kafka table, the
-- MergeTree table, and the view recreated). 26.9 skips such keys by default
-- (input_format_skip_unknown_fields = 1) and keeps the rest of the line; add the columns there
-- too to keep the new values.
--
-- ecn (UInt8) and delivered_ce (UInt64) came after the other keys, and the owner's columns
-- (service, unit, container_id, pod_uid: String; sock_cgroup_id: UInt64) after delivered_ce.
-- A MergeTree table made before them takes them with
--   ALTER TABLE tcpscope.flows ADD COLUMN ecn UInt8 AFTER ca_loss_us, ADD COLUMN delivered_ce UInt64 AFTER ecn
--   ALTER TABLE tcpscope.flows ADD COLUMN service String AFTER delivered_ce, ADD COLUMN unit String AFTER service, ADD COLUMN container_id String AFTER unit, ADD COLUMN pod_uid String AFTER container_id, ADD COLUMN sock_cgroup_id UInt64 AFTER pod_uid
-- A Kafka table cannot be altered (ClickHouse changes only its columns' comments): drop the
-- view and the Kafka table
--   DROP TABLE tcpscope.flows_mv; DROP TABLE tcpscope.flows_kafka
-- and apply this file again, which makes both anew in the same consumer group, so reading goes
-- on from the group's committed offsets.

CREATE DATABASE IF NOT EXISTS tcpscope;

CREATE TABLE IF NOT EXISTS tcpscope.flows_kafka
(
    kind String,
    start_ns Int64,
    end_ns Int64,
    fct_us Int64,
    duration_us Int64,
    family UInt8,
    laddr String,
    lport UInt16,
    raddr String,
    rport UInt16,
    dir String,
    outcome String,
    cc String,
    srtt_us UInt64,
    min_rtt_us UInt64,
    rttvar_us UInt64,
    cwnd UInt64,
    max_cwnd UInt64,
    ssthresh UInt64,
    mss UInt64,
    bytes_acked UInt64,
    bytes_received UInt64,
    bytes_retrans UInt64,
    segs_out UInt64,
    segs_in UInt64,
    retrans_segs UInt64,
    lost_segs UInt64,
    delivery_rate_bps UInt64,
    pacing_rate_bps UInt64,
    peer_class String,
    asn UInt32,
    as_org String,
    cc_rule Nullable(String),
    experiment Nullable(String),
    arm Nullable(String),
    app_set_cc UInt8,
    pid UInt32,
    comm String,
    cgroup_id UInt64,
    netns UInt32,
    partial UInt8,
    ca_open_us UInt64,
    ca_disorder_us UInt64,
    ca_cwr_us UInt64,
    ca_recovery_us UInt64,
    ca_loss_us UInt64,
    ecn UInt8,
    delivered_ce UInt64,
    service String,
    unit String,
    container_id String,
    pod_uid String,
    sock_cgroup_id UInt64
)
ENGINE = Kafka('kafka-1:9092', 'tcpscope.flows', 'tcpscope-clickhouse-flows', 'JSONEachRow');

-- Its columns are the Kafka table's.
CREATE TABLE IF NOT EXISTS tcpscope.flows AS tcpscope.flows_kafka
ENGINE = MergeTree
PARTITION BY toDate(toDateTime(intDiv(start_ns, 1000000000)), 'UTC')
ORDER BY (peer_class, asn, cc, start_ns)
SETTINGS index_granularity = 8192;

CREATE MATERIALIZED VIEW IF NOT EXISTS tcpscope.flows_mv TO tcpscope.flows AS
SELECT * FROM tcpscope.flows_kafka;
