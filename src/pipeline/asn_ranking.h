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

// ByteRankingOptions with the config's asn.top_n (the routed Internet has
// about 80k ASNs: max_tracked's 100,000 holds them all).
struct AsnRankingOptions : ByteRankingOptions {
  static AsnRankingOptions from_config(const Config& config);
};

class AsnRanking : public ByteRanking<uint32_t> {
 public:
  explicit AsnRanking(const AsnRankingOptions& options) : ByteRanking(options) {}

  bool update_options(const AsnRankingOptions& options) { return ByteRanking::update_options(options); }
  // "0", "other" or the number.
  std::string label_text(uint32_t asn) const;
};

}  // namespace tcpscope
