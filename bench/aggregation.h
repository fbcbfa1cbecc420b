// What the aggregation benchmarks (aggregate_bench.cc, pipeline_bench.cc)
// share: the daemon's aggregation step, its periodic re-ranking, and the
// series of the default cap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aggregate/aggregator.h"
#include "pipeline/asn_ranking.h"
#include "record/flow_record.h"

namespace tcpscope {
namespace bench {

inline const std::vector<std::string> kClasses{"client", "intra-pop", "pop-to-pop", "origin", "transit"};
inline const std::vector<std::string> kCcs{"cubic", "bbr"};

// The daemon's aggregation step: the ASN ranking labels the flow, the
// aggregator counts it under that label.
inline void rank_and_add(AsnRanking& ranking, Aggregator& agg, const FlowRecord& f) {
  agg.add(f, ranking.add(f.enrichment.asn, f.bytes_acked + f.bytes_received).label);
}

// A new ranking, as the daemon computes it each period, and the series of
// the ASNs it dropped retired.
inline void rerank(AsnRanking& ranking, Aggregator& agg) {
  ranking.recompute();
  agg.retire_series(ranking);
}

// Every label combination of the default cap: 5 classes x 52 asn values
// (50 top ASNs, "0", "other") x 2 CCs x 4 size classes x 2 dirs x 5
// outcomes x 5 congestion states, with every histogram populated. Each
// flow is `f` (its RTTs, FCT, segments) but for its labels and bytes;
// `ranking` is new, and labels them.
inline void fill_default_cap(AsnRanking& ranking, Aggregator* agg, FlowRecord f) {
  f.ca_state_us = {500000, 1000, 2000, 3000, 4000};
  f.enrichment.peer_class = kClasses[0];
  f.cc = kCcs[0];
  // Rank 50 ASNs into the top-N first.
  for (uint32_t a = 0; a < 50; ++a) {
    f.enrichment.asn = 64500 + a;
    f.bytes_acked = 1000000000ULL - a;
    rank_and_add(ranking, *agg, f);
  }
  rerank(ranking, *agg);
  std::vector<uint32_t> asns{0, 99999};  // "0" and one that folds into "other"
  for (uint32_t a = 0; a < 50; ++a) asns.push_back(64500 + a);
  const uint64_t sizes[] = {50000, 500000, 2000000, 5000000};
  for (const auto& c : kClasses)
    for (const auto& cc : kCcs)
      for (uint32_t a : asns)
        for (uint64_t sz : sizes)
          for (int k = 0; k < 10; ++k) {
            f.enrichment.peer_class = c;
            f.cc = cc;
            f.enrichment.asn = a;
            f.bytes_acked = sz;
            f.dir = k < 5 ? Direction::kActive : Direction::kPassive;
            f.outcome = static_cast<Outcome>(k % 5);
            rank_and_add(ranking, *agg, f);
          }
}

}  // namespace bench
}  // namespace tcpscope
