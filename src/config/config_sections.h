// The sections of the config file, a file each (config_table.h says how a
// section declares its keys). config.cc's top-level table puts them together.
#pragma once

#include "config/config.h"
#include "config/config_table.h"

namespace tcpscope {

const ConfigSection<Config>& top_level_section();            // config.cc
const ConfigSection<AsnConfig>& asn_section();               // asn_config.cc
ConfigKey<Config> peer_classes_key();                        // peer_class_config.cc
// Overlaps between classes and references to undefined ones, once the whole
// file is read (rules may come before the classes they name).
void check_peer_classes(ConfigReader& reader, const Config& config);
const ConfigSection<CcPolicy>& cc_policy_section();          // policy_config.cc
// A list of network namespaces, each "self" (the daemon's own), a name of
// /run/netns or an nsfs path; the number of items, none if it is no list.
std::optional<size_t> read_netns_list(ConfigReader& reader, const ConfigEntry& entry, const std::string& path,
                                      std::vector<std::string>* out);  // policy_config.cc
const ConfigSection<ServicesConfig>& services_section();  // service_config.cc
const ConfigSection<HttpConfig>& http_section();             // http_config.cc
const ConfigSection<ExportConfig>& export_section();         // kafka_config.cc

}  // namespace tcpscope
