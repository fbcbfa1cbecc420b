-- tcpscope transfer records, from Kafka into ClickHouse.
--
-- Creates (IF NOT EXISTS, so applying it again changes nothing):
--   database tcpscope
--   tcpscope.transfers_kafka  Kafka engine table: consumer group 'tcpscope-clickhouse-transfers' reading
--                             the topic 'tcpscope.transfers' on the brokers 'kafka-1:9092', one
--                             JSONEachRow object per transfer record ("kind":"transfer")
--   tcpscope.transfers        MergeTree table holding the records: one partition per UTC day of
--                             start_ns, ordered by (peer_class, asn, cc, start_ns)
--   tcpscope.transfers_mv     materialized view moving every row read from transfers_kafka
--                             into transfers
--
-- Apply:
--   clickhouse-client --multiquery < /usr/share/tcpscope/clickhouse/transfers.sql
-- Other brokers, topic or consumer group: rewrite the quoted defaults, e.g.
--   sed -e "s/'kafka-1:9092'/'k1:9092,k2:9092'/" -e "s/'tcpscope.transfers'/'prod.tcpscope.transfers'/" \
--       -e "s/'tcpscope-clickhouse-transfers'/'ch-eu1-transfers'/" /usr/share/tcpscope/clickhouse/transfers.sql \
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
--   ALTER TABLE tcpscope.transfers DROP PARTITION '2026-10-01'
--
-- Tested on ClickHouse 18.16 and 26.9 as flows.sql is: see flows.sql for what is tested where,
-- the syntax kept to, the choice of types and why the consumer group is not flows.sql's. Here: Int64 for flow_start_ns, start_ns, end_ns and
-- xfer_us (signed 64-bit in tcpscope), Nullable(Int64) for wait_us (null when no data came the
-- other way first), UInt64 for the counters and the kernel's µs counters.
-- sampling_rate (UInt32): the kernel followed the transfers of one flow in this many
-- (transfer_sampling_rate; 1 for a flow an experiment or controller assigned); compare
-- --clickhouse counts, of rows of several rates, only the flows the largest follows
-- (intHash64(bitOr(bitShiftLeft(toUInt64(least(lport, rport)), 16), toUInt64(greatest(lport, rport))))
-- a multiple of it). It came after the first keys, and the owner's columns (service, unit,
-- container_id, pod_uid: String; sock_cgroup_id: UInt64) after netns. A MergeTree table made
-- before them takes them with
--   ALTER TABLE tcpscope.transfers ADD COLUMN sampling_rate UInt32 DEFAULT 1 AFTER delimited_by
--   ALTER TABLE tcpscope.transfers ADD COLUMN service String AFTER netns, ADD COLUMN unit String AFTER service, ADD COLUMN container_id String AFTER unit, ADD COLUMN pod_uid String AFTER container_id, ADD COLUMN sock_cgroup_id UInt64 AFTER pod_uid
-- and the view and the Kafka table are dropped and made again, as flows.sql says.
--
-- export.kafka.format: protobuf: as flows.sql says, with tcpscope.proto's TransferRecord:
--   sed -e "s/'JSONEachRow')/'Protobuf') SETTINGS kafka_schema = 'tcpscope.proto:TransferRecord'/" \
--       /usr/share/tcpscope/clickhouse/transfers.sql | clickhouse-client --multiquery
-- The partition and sorting keys use the transfer's own start_ns; flow_start_ns joins a
-- transfer to its flow (with family, laddr, lport, raddr, rport, dir).

CREATE DATABASE IF NOT EXISTS tcpscope;

CREATE TABLE IF NOT EXISTS tcpscope.transfers_kafka
(
    kind String,
    flow_start_ns Int64,
    family UInt8,
    laddr String,
    lport UInt16,
    raddr String,
    rport UInt16,
    dir String,
    seq UInt64,
    direction String,
    delimited_by String,
    sampling_rate UInt32,
    start_ns Int64,
    end_ns Int64,
    xfer_us Int64,
    wait_us Nullable(Int64),
    bytes UInt64,
    retrans_segs UInt64,
    srtt_us UInt64,
    min_rtt_us UInt64,
    busy_us UInt64,
    rwnd_limited_us UInt64,
    sndbuf_limited_us UInt64,
    cc String,
    peer_class String,
    asn UInt32,
    as_org String,
    cc_rule Nullable(String),
    experiment Nullable(String),
    arm Nullable(String),
    netns UInt32,
    service String,
    unit String,
    container_id String,
    pod_uid String,
    sock_cgroup_id UInt64
)
ENGINE = Kafka('kafka-1:9092', 'tcpscope.transfers', 'tcpscope-clickhouse-transfers', 'JSONEachRow');

-- Its columns are the Kafka table's.
CREATE TABLE IF NOT EXISTS tcpscope.transfers AS tcpscope.transfers_kafka
ENGINE = MergeTree
PARTITION BY toDate(toDateTime(intDiv(start_ns, 1000000000)), 'UTC')
ORDER BY (peer_class, asn, cc, start_ns)
SETTINGS index_granularity = 8192;

CREATE MATERIALIZED VIEW IF NOT EXISTS tcpscope.transfers_mv TO tcpscope.transfers AS
SELECT * FROM tcpscope.transfers_kafka;
