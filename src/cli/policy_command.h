// `tcpscope policy show [--server URL] [--json]`: the congestion-control
// policy a running daemon has in force, with its assignment counts.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tcpscope {

int policy_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Renders the daemon's /api/v1/policy JSON as a terminal table.
std::string render_policy(const std::string& json_text);
// /api/v1/controller's document as text: per controller rule, its cohorts'
// state, winner, weights and evidence.
std::string render_controller(const std::string& json_text);

}  // namespace tcpscope
