// What a SIGHUP does with each config key: applied to the running daemon, or
// only at the next start (what was bound, mapped or attached at start). One
// table, one row per key, so that no key is copied by hand or forgotten: a
// unit test checks that the rows cover every key the parser knows
// (config_top_level_keys()), and the reload logs every next-start key whose
// value changed instead of saying "reloaded" over it.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace tcpscope {

struct ReloadRule {
  // A top-level key, or "key.field" where a key's fields differ in effect.
  const char* key;
  // Applied: copies the key's value from the fresh config into the running one.
  void (*apply)(Config& running, const Config& fresh);
  // Next start (apply is null): whether the two configs differ in it.
  bool (*differs)(const Config& running, const Config& fresh);
};

const std::vector<ReloadRule>& reload_rules();

// The running config with every applied key taken from `fresh`; the keys in
// *next_start (if given) are those kept that `fresh` changes.
Config merge_reload(const Config& running, const Config& fresh, std::vector<std::string>* next_start);

}  // namespace tcpscope
