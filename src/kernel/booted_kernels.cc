#include "kernel/booted_kernels.h"

#include <regex>
#include <sstream>

namespace tcpscope {

extern const char kBootedKernelsTsv[];  // src/kernel/booted_kernels.tsv, embedded at build time

std::vector<BootedKernel> booted_kernels() {
  std::vector<BootedKernel> out;
  std::istringstream in(kBootedKernelsTsv);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::istringstream fields(line);
    for (std::string col; std::getline(fields, col, '\t');) cols.push_back(col);
    if (cols.size() == 4) out.push_back({cols[0], cols[1], cols[2], cols[3]});
  }
  return out;
}

std::string booted_in_ci_line(const std::string& release) {
  const auto kernels = booted_kernels();
  for (const auto& k : kernels)
    if (std::regex_match(release, std::regex(k.release_pattern)))
      return "booted in CI: yes, as " + k.name + " (" + k.about + "; CI boots the current build of " +
             k.meta_package + ")";
  std::string which;
  for (const auto& k : kernels) which += (which.empty() ? "" : ", ") + k.name + " (" + k.about + ")";
  return "booted in CI: no (CI boots " + which + ", and runs on its own machine's kernel)";
}

}  // namespace tcpscope
