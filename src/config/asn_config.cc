// `asn:` where AS numbers come from (docs/configuration.md "Peer classes and ASNs").
#include "config/config_sections.h"

namespace tcpscope {

namespace {
constexpr uint32_t kMaxTopN = 10000;
}  // namespace

const ConfigSection<AsnConfig>& asn_section() {
  static const ConfigSection<AsnConfig> kSection{{
      string_key("mmdb", &AsnConfig::mmdb,
                 "MaxMind DB file (GeoLite2-ASN, DB-IP ASN Lite or IPinfo ASN); \"\" = none"),
      string_key("prefix_file", &AsnConfig::prefix_file,
                 "prefix-to-AS table, CAIDA pfx2as or iptoasn TSV; \"\" = none. Either or both"),
      integer_key("top_n", &AsnConfig::top_n, 1, kMaxTopN,
                  "the N ASNs with the most bytes get their own label value, the rest are \"other\" "
                  "(bounds the Prometheus series)"),
  }};
  return kSection;
}

}  // namespace tcpscope
