// IP address -> autonomous system, from a MaxMind DB file and/or a
// prefix-to-AS text file (config `asn:`).
//
// Sources:
//  - MaxMind DB (GeoLite2-ASN, DB-IP ASN Lite, IPinfo ASN), read with
//    libmaxminddb. At load the whole search tree is walked and every network
//    is copied into a PrefixTrie, so lookups are trie lookups and
//    prefixes_of() can answer "which networks belong to AS X". Fields:
//    autonomous_system_number (uint) / autonomous_system_organization
//    (MaxMind, DB-IP) or asn ("AS13335" string) / as_name (IPinfo).
//  - Text, one network per line, format detected per line, optionally
//    gzip-compressed:
//      CAIDA RouteViews pfx2as: prefix<TAB>length<TAB>asn, where asn may be a
//        multi-origin "64500_64501" or an AS set "{64500,64501}" (the first
//        AS is used);
//      iptoasn: range_start<TAB>range_end<TAB>asn<TAB>country<TAB>org, each
//        range split into the minimal list of CIDRs; asn 0 ("Not routed") is
//        skipped.
//    Blank lines and lines starting with # are ignored.
//
// Precedence when both are configured: the longest matching prefix across
// both sources wins; at equal length the prefix file wins (it is the
// operator's own data).
//
// IPv4-mapped IPv6 addresses are folded to IPv4. The IPv6 ranges a MaxMind DB
// aliases to its IPv4 data (::ffff:0:0/96, 6to4 2002::/16, Teredo 2001::/32)
// are not copied a second time; lookups inside them are translated to the
// embedded IPv4 address the way libmaxminddb does.
//
// An AsnDatabase is immutable after load(), so lookups from any thread are
// safe; on SIGHUP the daemon loads a new one and swaps the shared_ptr.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "net/ip_addr.h"
#include "net/prefix_trie.h"

namespace tcpscope {

struct AsnInfo {
  uint32_t asn = 0;  // 0 = unknown
  std::string org;   // "" when unknown or when the source has no names (pfx2as)
};

// The minimal list of CIDR prefixes, in address order, covering exactly the
// inclusive range first..last. Empty if the families differ or first > last.
std::vector<Prefix> range_to_cidrs(const IpAddr& first, const IpAddr& last);

class AsnDatabase {
 public:
  // Loads the sources named in cfg (either may be ""; neither gives an empty
  // database). On failure returns nullptr and sets *error to one line naming
  // the file (as configured) and the problem, e.g.
  // "/etc/tcpscope/pfx2as.tsv:17: bad prefix length '40x'".
  static std::shared_ptr<const AsnDatabase> load(const AsnConfig& cfg, std::string* error);

  // The AS of the longest prefix containing addr; {0, ""} when none does.
  AsnInfo lookup(const IpAddr& addr) const;
  // Same without copying the organisation name.
  uint32_t lookup_asn(const IpAddr& addr) const;

  // The networks lookup() maps to `asn`, as a minimal sorted list of CIDRs
  // (IPv4 first, then IPv6). More specific prefixes of other ASes are cut out,
  // so "addr is in one of these" == "lookup_asn(addr) == asn" (IPv4-mapped and
  // MaxMind-aliased IPv6 forms aside: those are matched through their IPv4
  // address). Cost: a walk over the whole trie, O(prefixes); meant for
  // reload time, not per flow.
  std::vector<Prefix> prefixes_of(uint32_t asn) const;

  // Distinct prefixes held (after merging both sources).
  size_t prefix_count() const { return trie_.size(); }
  // e.g. "mmdb GeoLite2-ASN 2024-05-01: 523817 networks; prefix file: 1034220 prefixes"
  std::string describe() const;
  // Heap bytes held by the lookup structures.
  size_t memory_bytes() const;

 private:
  friend class AsnDatabaseBuilder;
  AsnDatabase() = default;

  // Index into records_ for addr, nullptr if unknown.
  const uint32_t* find(const IpAddr& addr) const;

  PrefixTrie<uint32_t> trie_;       // value: index into records_
  std::vector<AsnInfo> records_;    // distinct (asn, org) pairs
  std::vector<Prefix> v4_aliases_;  // IPv6 prefixes whose next 32 bits are an IPv4 address
  std::string mmdb_label_;          // "GeoLite2-ASN 2024-05-01"; "" = no mmdb
  size_t mmdb_networks_ = 0;
  bool has_prefix_file_ = false;
  size_t prefix_file_prefixes_ = 0;
};

}  // namespace tcpscope
