// `tcpscope check-config FILE`: validate a config file without running.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tcpscope {

// Prints every problem as "FILE:LINE: message" to `err` and returns 2 if there
// is any; otherwise prints "FILE: ok" and a one-line summary to `out` and
// returns 0. CC names are checked against kernel_congestion_controls().
int check_config_command(const std::string& path, std::ostream& out, std::ostream& err);

// The same with an explicit set of available congestion controls (for tests,
// or to check a config for another machine).
int check_config_command(const std::string& path, const std::vector<std::string>& available_cc,
                         std::ostream& out, std::ostream& err);

// ... and the subset of them loaded in the kernel: a valid config naming one
// that is only a module on disk gets a warning on `err` (the packaged unit's
// ProtectKernelModules=yes hides the modules from the daemon); still 0.
int check_config_command(const std::string& path, const std::vector<std::string>& available_cc,
                         const std::vector<std::string>& loaded_cc, std::ostream& out, std::ostream& err);

}  // namespace tcpscope
