// `tcpscope run`: the daemon's life from start-up checks to a clean exit.
#pragma once

#include <optional>
#include <string>

namespace tcpscope {

struct RunOptions {
  std::string config_path;               // "" = embedded default
  std::optional<std::string> listen;     // flags override the config file
  std::optional<std::string> flow_log;
  std::optional<std::string> cgroup;
  std::optional<std::string> transfer_sampling_rate;
};

// Returns the process exit code: 0 after SIGTERM/SIGINT, 1 when it cannot
// start (one line on stderr says why), 2 for a bad config.
int run_daemon(const RunOptions& options);

}  // namespace tcpscope
