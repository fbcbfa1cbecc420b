#include "pipeline/service_ranking.h"

#include <functional>

#include "config/config.h"

namespace tcpscope {

namespace {
// A host runs tens of services; pod churn makes thousands of names a day,
// which forgetting after the grace period keeps from accumulating.
constexpr size_t kMaxTrackedServices = 10000;
}  // namespace

uint64_t service_key(const std::string& name) {
  if (name.empty()) return 0;
  const uint64_t h = std::hash<std::string>{}(name);
  return h != 0 ? h : 1;
}

ByteRankingOptions ServiceRanking::options_from_config(const Config& config) {
  ByteRankingOptions o;
  o.top_n = config.services.top_n;
  o.max_tracked = kMaxTrackedServices;
  // A grace of 0 forgets a service at the first ranking that saw no record
  // of it (forget_after_s 0 would keep it).
  o.forget_after_s = config.services.grace_seconds > 0 ? config.services.grace_seconds : 1e-9;
  return o;
}

uint64_t ServiceRanking::key_of(const Enrichment& owner) {
  if (!owner.service) return 0;
  if (owner.service != last_owner_) {
    last_owner_ = owner.service;
    last_key_ = service_key(owner.service->name);
  }
  return last_key_;
}

ServiceRanking::Counted ServiceRanking::count(const Enrichment& owner, uint64_t bytes) {
  const uint64_t key = key_of(owner);
  const ByteRanking::Counted c = add(key, bytes);
  return Counted{{key, c.label}, c.reranked};
}

RankedService ServiceRanking::ranked(const Enrichment& owner) {
  const uint64_t key = key_of(owner);
  return {key, label(key)};
}

std::string ServiceRanking::label_text(const std::string& name) const {
  return label(service_key(name)) == RankedLabel::kOther ? kOtherLabel : name;
}

}  // namespace tcpscope
