#include "enrich/peer_classifier.h"

#include <utility>

namespace tcpscope {

PeerClassifier::PeerClassifier(const std::vector<PeerClassSpec>& classes,
                               std::string default_class) {
  for (const PeerClassSpec& spec : classes) {
    const uint32_t index = uint32_t(names_.size());
    names_.push_back(spec.name);
    for (const Prefix& configured : spec.prefixes) {
      const Prefix p = configured.unmapped();
      // First class to list a prefix keeps it, like the ASN rule below.
      if (prefixes_.find(p.addr, p.len) == nullptr) prefixes_.insert(p.addr, p.len, index);
    }
    for (uint32_t asn : spec.asns) {
      if (asn != 0) asns_.emplace(asn, index);  // emplace keeps the first
    }
  }
  default_index_ = uint32_t(names_.size());
  for (uint32_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == default_class) default_index_ = i;
  }
  if (default_index_ == names_.size()) names_.push_back(std::move(default_class));
  prefixes_.optimize();
}

const std::string& PeerClassifier::classify(const IpAddr& remote, uint32_t asn) const {
  const uint32_t* by_prefix = prefixes_.lookup(remote.is_v4_mapped() ? remote.unmapped() : remote);
  if (by_prefix != nullptr) return names_[*by_prefix];
  if (asn != 0) {
    auto it = asns_.find(asn);
    if (it != asns_.end()) return names_[it->second];
  }
  return names_[default_index_];
}

}  // namespace tcpscope
