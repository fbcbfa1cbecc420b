#include "pipeline/service_ranking.h"

#include "config/config.h"

namespace tcpscope {

namespace {
// A host runs tens of services; pod churn makes thousands of names a day,
// which forgetting after the grace period keeps from accumulating.
constexpr size_t kMaxTrackedServices = 10000;
}  // namespace

ByteRankingOptions ServiceRanking::options_from_config(const Config& config) {
  ByteRankingOptions o;
  o.top_n = config.services.top_n;
  o.max_tracked = kMaxTrackedServices;
  // A grace of 0 forgets a service at the first ranking that saw no record
  // of it (forget_after_s 0 would keep it).
  o.forget_after_s = config.services.grace_seconds > 0 ? config.services.grace_seconds : 1e-9;
  return o;
}

ServiceRanking::Counted ServiceRanking::count(const Enrichment& owner, uint64_t bytes) {
  const uint64_t key = owner.owner().key;
  const ByteRanking::Counted c = add(key, bytes);
  return Counted{{key, c.label}, c.reranked};
}

RankedService ServiceRanking::ranked(const Enrichment& owner) {
  const uint64_t key = owner.owner().key;
  return {key, label(key)};
}

std::string ServiceRanking::label_text(const std::string& name) const {
  return label(service_key(name)) == RankedLabel::kOther ? kOtherLabel : name;
}

}  // namespace tcpscope
