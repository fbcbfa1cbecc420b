// The kernels CI boots in a VM (src/kernel/booted_kernels.tsv, which
// tests/real_kernels/run.py boots from): `tcpscope version` says whether the
// running kernel is of one of them.
#pragma once

#include <string>
#include <vector>

namespace tcpscope {

struct BootedKernel {
  std::string name;             // "debian12-6.1"
  std::string meta_package;     // whose dependency names the build CI boots
  std::string release_pattern;  // a regular expression over `uname -r`
  std::string about;
};

// The table as built into the binary.
std::vector<BootedKernel> booted_kernels();

// One line for `tcpscope version`: whether CI boots `release`'s series, and
// which it boots otherwise.
std::string booted_in_ci_line(const std::string& release);

}  // namespace tcpscope
