// Maps a remote address (and its AS number) to a peer class name from the
// config's `peer_classes`.
//
// Precedence, in order:
//   1. The longest prefix, across all classes, that contains the address
//      (SPEC: "longest matching prefix wins"). A prefix listed by two classes
//      belongs to the first class that lists it.
//   2. Only when no prefix matches: the class that lists the AS number (the
//      first such class if several do). ASN 0 (unknown) never matches.
//   3. Otherwise the default class.
// IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) and prefixes inside
// ::ffff:0:0/96 are folded to IPv4, so one IPv4 prefix covers both forms.
//
// Immutable after construction; concurrent classify() calls are safe.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "net/ip_addr.h"
#include "net/prefix_trie.h"

namespace tcpscope {

class PeerClassifier {
 public:
  PeerClassifier(const std::vector<PeerClassSpec>& classes, std::string default_class);

  const std::string& classify(const IpAddr& remote, uint32_t asn) const;

  // Every class name that classify() can return: the configured classes in
  // config order, then the default class unless it is one of them.
  const std::vector<std::string>& class_names() const { return names_; }
  const std::string& default_class() const { return names_[default_index_]; }

 private:
  std::vector<std::string> names_;
  uint32_t default_index_ = 0;
  PrefixTrie<uint32_t> prefixes_;                // value: index into names_
  std::unordered_map<uint32_t, uint32_t> asns_;  // asn -> index into names_
};

}  // namespace tcpscope
