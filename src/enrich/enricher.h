// Adds what the kernel cannot know to a flow: the remote's AS number and
// organisation and its peer class. The lookup tables are immutable and held
// by shared_ptr, so SIGHUP swaps them in one step and readers never see a
// half-loaded database.
#pragma once

#include <atomic>
#include <memory>

#include "enrich/asn_db.h"
#include "enrich/peer_classifier.h"
#include "record/flow_record.h"

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

  // Fills asn, as_org and peer_class; returns the number of lookups made.
  int enrich(FlowRecord* flow) const {
    auto t = tables();
    int lookups = 0;
    if (t->asn_db) {
      AsnInfo info = t->asn_db->lookup(flow->raddr);
      flow->asn = info.asn;
      flow->as_org = std::move(info.org);
      ++lookups;
    }
    flow->peer_class = t->classifier->classify(flow->raddr, flow->asn);
    return lookups + 1;
  }

 private:
  std::shared_ptr<const EnrichmentTables> tables_;
};

}  // namespace tcpscope
