// `tcpscope compare`: A/B comparison of two flow sets per group, from a flow
// log (--flows FILE, exact) or a running daemon (--server URL, sketches).
// Prints a table (or --json), optionally draws the CDFs (--plot FILE.svg).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tcpscope {

// Returns the exit code: 0 done, 1 the data could not be read (file,
// daemon), 2 bad usage.
int compare_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

extern const char* const kCompareUsage;

}  // namespace tcpscope
