// Which ASNs get a label of their own. Both outputs that split flows by ASN
// (the Prometheus series, aggregator.h, and the sketches behind
// /api/v1/distributions, flow_distributions.h) take a flow's label from
// here, so the two agree and neither ranks on its own.
//
// The ranking by bytes is byte_ranking.h's over AS numbers: an ASN among the
// top-N keeps its number, ASN 0 (unknown) is "0", every other ASN is
// "other". An ASN stays tracked while its bytes rank (no forgetting).
//
// Not thread-safe: the daemon's loop thread is its only user.
#pragma once

#include <cstdint>
#include <string>

#include "pipeline/byte_ranking.h"

namespace tcpscope {

struct Config;

// A flow's ASN label: its number ("0" for ASN 0) or "other".
using AsnLabel = RankedLabel;
constexpr const char* kOtherAsnLabel = kOtherLabel;

struct AsnRankingOptions {
  uint32_t top_n = 50;
  // At most this many ASNs are tracked (the routed Internet has ~80k);
  // ByteRankingOptions::max_tracked.
  size_t max_tracked_asns = 100000;
  // As ByteRankingOptions.
  double bytes_half_life_s = 3600;
  uint64_t warmup_recompute_flows = 10000;
  double warmup_seconds = 300;

  static AsnRankingOptions from_config(const Config& config);
  ByteRankingOptions ranking() const;
};

class AsnRanking : public ByteRanking<uint32_t> {
 public:
  explicit AsnRanking(const AsnRankingOptions& options) : ByteRanking(options.ranking()) {}

  bool update_options(const AsnRankingOptions& options) { return ByteRanking::update_options(options.ranking()); }
  // "0", "other" or the number.
  std::string label_text(uint32_t asn) const;
};

}  // namespace tcpscope
