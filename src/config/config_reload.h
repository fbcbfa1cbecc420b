// What a SIGHUP does with each config key: applied to the running daemon, or
// only at the next start (what was bound, mapped or attached at start). It is
// a column of the keys' tables (config_table.h), so no key is copied by hand
// or forgotten: a unit test checks that the rules cover every key the parser
// knows (config_top_level_keys()), and the reload logs every next-start key
// whose value changed instead of saying "reloaded" over it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"

namespace tcpscope {

template <class T>
struct ConfigReloadRule {
  std::string key;  // a top-level key, or "key.field" where a key's fields differ in effect
  // Applied: copies the key's value from the fresh config into the running one.
  std::function<void(T& running, const T& fresh)> apply;
  // Next start (apply is null): whether the two configs differ in it.
  std::function<bool(const T& running, const T& fresh)> differs;
};

using ReloadRule = ConfigReloadRule<Config>;

const std::vector<ReloadRule>& reload_rules();

// The running config with every applied key taken from `fresh`; the keys in
// *next_start (if given) are those kept that `fresh` changes.
Config merge_reload(const Config& running, const Config& fresh, std::vector<std::string>* next_start);

}  // namespace tcpscope
