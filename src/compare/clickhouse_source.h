// `tcpscope compare --clickhouse URL`: the samples of a whole fleet, from the
// ClickHouse tables that export.kafka fills (packaging/clickhouse/*.sql).
//
// ClickHouse does the scan and the grouping over its HTTP interface: per
// group, size class and arm it returns the counts of the metric in the
// buckets of the daemon's sketches (flow_sketch.h: 1 % relative accuracy),
// and the exact smallest and largest value of each. tcpscope turns them into
// sketches and computes the statistics as for every other source. The
// population is the one measure/measure.h defines, written as SQL, so the
// counts equal `--flows` on the same records exactly and the quantiles agree
// within the sketches' 1 %.
//
// The SQL keeps to what ClickHouse has had since 2018: no window functions,
// no Bool type, no new-analyzer-only syntax. The tests run it on 18.16
// (Debian 12's server) and on 26.9 (chdb-core's engine).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "compare/compare.h"
#include "compare/compare_source.h"
#include "measure/selection.h"

namespace tcpscope {

struct ClickHouseQuery {
  std::string url;       // http://[USER:PASSWORD@]HOST:8123
  std::string database = "tcpscope";
  std::string table;     // "": flows or transfers, by the compared unit
  std::optional<Selection> where;  // must hold in both arms
  // end_ns (when the record was written) in [since_ns, until_ns); 0 = open.
  int64_t since_ns = 0, until_ns = 0;
  int timeout_ms = 60000;
};

// A column of the table, as DESCRIBE TABLE names it.
struct ClickHouseColumn {
  std::string name, type;
};

// The SQL that returns one arm's buckets: rows (group, size class index,
// bucket, count, min, max) in JSONCompact. `columns` is the table's (so a
// field the table lacks reads as absent, as in a flow log), `arm` the arm's
// selection, `keep_rate` the sampling rate whose flows count (1: every
// record; record/transfer_sampling.h).
std::string clickhouse_arm_sql(const ClickHouseQuery& q, const std::string& table,
                               const std::vector<ClickHouseColumn>& columns, const CompareOptions& options,
                               const Selection& arm, double inv_log_gamma, uint32_t keep_rate);
// The smallest and largest sampling_rate of the transfers either arm counts:
// one row, nulls when there are none.
std::string clickhouse_sampling_sql(const ClickHouseQuery& q, const std::string& table,
                                    const std::vector<ClickHouseColumn>& columns, const CompareOptions& options,
                                    const Selection& a, const Selection& b);

class ClickHouseSource : public CompareSource {
 public:
  ClickHouseSource(ClickHouseQuery query, MetricOptions metric_options);
  std::string description() const override;
  bool collect(const CompareOptions& options, const Selection& a, const Selection& b, CompareSamples* out,
               std::string* error) override;

 private:
  std::string table_for(SampleUnit unit) const;
  // GETs `sql` (a SELECT or DESCRIBE ... FORMAT JSONCompact) and returns the
  // "data" rows of the answer.
  bool run(const std::string& sql, nlohmann::json* rows, std::string* error) const;

  ClickHouseQuery query_;
  MetricOptions metric_options_;
};

}  // namespace tcpscope
