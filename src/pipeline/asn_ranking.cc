#include "pipeline/asn_ranking.h"

#include "config/config.h"

namespace tcpscope {

AsnRankingOptions AsnRankingOptions::from_config(const Config& config) {
  AsnRankingOptions o;
  o.top_n = config.asn.top_n;
  return o;
}

std::string AsnRanking::label_text(uint32_t asn) const {
  if (asn == 0) return "0";
  return label(asn) == AsnLabel::kOwn ? std::to_string(asn) : kOtherAsnLabel;
}

}  // namespace tcpscope
