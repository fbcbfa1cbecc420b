// Which services (the socket owner's name, record/enrichment.h) get a label
// of their own: byte_ranking.h's ranking over a 64-bit key per name. A
// service among the top-N by bytes keeps its name, the unknown service keeps
// "" (a value of its own, as ASN 0 is "0"), every other service is "other".
// A service with no record for `services.grace_seconds` is forgotten: it
// leaves the top-N and its series go (Aggregator::retire_service_series).
//
// Keys: ServiceIdentity::key (record/enrichment.h), hashed with the name
// once, so the sinks key their series by it without keeping names of their
// own.
//
// Not thread-safe: the daemon's loop thread is its only user.
#pragma once

#include <cstdint>
#include <string>

#include "pipeline/byte_ranking.h"
#include "record/enrichment.h"

namespace tcpscope {

struct Config;

// A record's service as the sinks key and label it.
struct RankedService {
  uint64_t key = 0;                       // service_key(name); 0: unknown (label "")
  RankedLabel label = RankedLabel::kOwn;  // kOwn: the name ("" when unknown); kOther: "other"
  // The key of its label, what a sink keys its state by: its own, or
  // kOtherServiceKey for every service folded into "other".
  uint64_t label_key() const { return label == RankedLabel::kOther ? kOtherServiceKey : key; }
};

class ServiceRanking : public ByteRanking<uint64_t> {
 public:
  // services.top_n, and grace_seconds as the time a service is kept without records.
  static ByteRankingOptions options_from_config(const Config& config);

  explicit ServiceRanking(ByteRankingOptions options) : ByteRanking(options) {}

  struct Counted {
    RankedService service;  // labelled by the ranking in force before the flow
    bool reranked;          // as ByteRanking::Counted
  };
  // Counts a finished flow's payload bytes for its owner.
  Counted count(const Enrichment& owner, uint64_t bytes);
  // A transfer's service as the ranking stands (its bytes are its flow's).
  RankedService ranked(const Enrichment& owner);

  // The label a record of service `name` gets now: "", "other" or the name.
  std::string label_text(const std::string& name) const;
};

// The text of a service label: "other", or the record's owner's name.
inline const std::string& service_label_text(RankedLabel label, const ServiceIdentity& owner) {
  static const std::string other = kOtherLabel;
  return label == RankedLabel::kOther ? other : owner.name;
}

}  // namespace tcpscope
