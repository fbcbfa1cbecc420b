// Adds what the kernel cannot know to a record's Enrichment (a flow's or a
// transfer's): the remote's AS number and organisation and its peer class.
// The lookup tables are immutable and held by shared_ptr, so SIGHUP swaps them in one
// step and readers never see a half-loaded database.
#pragma once

#include <atomic>
#include <memory>

#include "enrich/asn_db.h"
#include "enrich/peer_classifier.h"
#include "net/ip_addr.h"
#include "record/enrichment.h"

namespace tcpscope {

struct EnrichmentTables {
  std::shared_ptr<const PeerClassifier> classifier;
  std::shared_ptr<const AsnDatabase> asn_db;  // may be null: no ASN data configured
};

class Enricher {
 public:
  explicit Enricher(EnrichmentTables tables) { replace(std::move(tables)); }

  void replace(EnrichmentTables tables) {
    std::atomic_store(&tables_, std::make_shared<const EnrichmentTables>(std::move(tables)));
  }
  std::shared_ptr<const EnrichmentTables> tables() const { return std::atomic_load(&tables_); }

  // Fills asn, as_org and peer_class of a record whose peer is `raddr`;
  // returns the number of lookups made.
  int enrich(const IpAddr& raddr, Enrichment* enrichment) const {
    auto t = tables();
    int lookups = 0;
    if (t->asn_db) {
      AsnInfo info = t->asn_db->lookup(raddr);
      enrichment->asn = info.asn;
      enrichment->as_org = std::move(info.org);
      ++lookups;
    }
    enrichment->peer_class = t->classifier->classify(raddr, enrichment->asn);
    return lookups + 1;
  }

 private:
  std::shared_ptr<const EnrichmentTables> tables_;
};

}  // namespace tcpscope
