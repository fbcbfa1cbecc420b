-- tcpscope: keep 30 days of flow and transfer records in ClickHouse.
--
-- For ClickHouse 19.6 and later only (TTL came in 19.6; tested on 26.9; Debian 12's 18.16 rejects
-- this file with a syntax error: there, drop old days with ALTER TABLE ... DROP PARTITION 'YYYY-MM-DD').
-- Apply after flows.sql and transfers.sql:
--   clickhouse-client --multiquery < /usr/share/tcpscope/clickhouse/ttl.sql
-- Another retention: sed -e 's/INTERVAL 30 DAY/INTERVAL 90 DAY/' ttl.sql | clickhouse-client --multiquery
-- A row goes when its start time (start_ns) is that old, at the next merge of its part.

ALTER TABLE tcpscope.flows MODIFY TTL toDateTime(intDiv(start_ns, 1000000000)) + INTERVAL 30 DAY;

ALTER TABLE tcpscope.transfers MODIFY TTL toDateTime(intDiv(start_ns, 1000000000)) + INTERVAL 30 DAY;
