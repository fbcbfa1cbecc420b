// libFuzzer target: the config loader. Any bytes must give either a Config or
// a list of FILE:LINE errors: no crash, no exception, no sanitizer report,
// error lines inside the text, bounded messages; and a config without errors
// must satisfy what the rest of the daemon relies on.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "config_fuzz: %s\n", why.c_str());
  std::abort();
}

void check_valid(const tcpscope::Config& c, const std::vector<std::string>& ccs) {
  std::string why;
  if (!tcpscope::parse_listen_address(c.listen, &why)) fail("accepted listen " + c.listen + ": " + why);
  if (c.ring_buffer_bytes == 0 || (c.ring_buffer_bytes & (c.ring_buffer_bytes - 1)))
    fail("accepted ring_buffer_bytes " + std::to_string(c.ring_buffer_bytes));
  if (c.size_classes_bytes.empty()) fail("accepted no size classes");
  if (!std::is_sorted(c.size_classes_bytes.begin(), c.size_classes_bytes.end()) ||
      std::adjacent_find(c.size_classes_bytes.begin(), c.size_classes_bytes.end()) != c.size_classes_bytes.end())
    fail("accepted size classes that do not increase");
  if (c.asn.top_n == 0) fail("accepted top_n 0");
  for (const auto& cc : tcpscope::referenced_congestion_controls(c))
    if (std::find(ccs.begin(), ccs.end(), cc) == ccs.end()) fail("accepted unknown cc " + cc);
  for (const auto& rule : c.cc_policy.rules) {
    if (rule.name.empty()) fail("accepted a rule without a name");
    if (int{rule.cc.has_value()} + int{rule.experiment.has_value()} + int{rule.controller.has_value()} != 1)
      fail("accepted a rule without exactly one of cc/experiment/controller");
    if (rule.experiment && rule.experiment->name == tcpscope::kControllerExperiment)
      fail("accepted an experiment named like the controller's");
    if (rule.controller) {
      const auto& k = *rule.controller;
      if (k.arms.size() < 2 || k.arms.size() > tcpscope::kMaxControllerArms)
        fail("accepted a controller with " + std::to_string(k.arms.size()) + " arms");
      if (k.control_percent < 1 || k.control_percent > 100 || k.min_transfers < 2 || k.interval_s < 1 ||
          !(k.fdr > 0 && k.fdr <= 0.5) || k.ramp_step_percent < 1 || k.ramp_step_percent > 100 ||
          !(k.retrans_share_increase >= 0 && k.retrans_share_increase <= 1) ||
          !(k.rtt_inflation_increase >= 0 && k.rtt_inflation_increase <= 100))
        fail("accepted controller settings out of range");
    }
    if (rule.experiment) {
      uint32_t sum = 0;
      for (const auto& arm : rule.experiment->arms) sum += arm.second;
      if (sum != 100) fail("accepted experiment weights summing to " + std::to_string(sum));
    }
  }
  for (const auto& pc : c.peer_classes) {
    if (pc.name.empty()) fail("accepted a peer class without a name");
    for (const auto& p : pc.prefixes) {
      if (!tcpscope::Prefix::parse(p.to_string())) fail("accepted a prefix that does not print back: " + p.to_string());
    }
  }
  if (c.http.basic_auth() && c.http.basic_auth_password_sha256.size() != 64) fail("accepted a bad digest");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> kCc = {"cubic", "bbr", "reno"};
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<tcpscope::ConfigError> errors;
  tcpscope::Config c;
  try {
    c = tcpscope::parse_config(text, "fuzz.yaml", kCc, &errors);
  } catch (const std::exception& e) {
    fail(std::string("parse_config threw: ") + e.what());
  }
  const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (const auto& e : errors) {
    if (e.line < 0 || e.line > lines) fail("error line " + std::to_string(e.line) + " outside 1.." + std::to_string(lines) + ": " + e.message);
    if (e.message.empty()) fail("empty error message");
    // Echoed values are clipped; a message is a line, not a copy of the input.
    if (e.message.size() > 1000) fail("error message of " + std::to_string(e.message.size()) + " bytes");
    if (e.file != "fuzz.yaml") fail("error names file " + e.file);
  }
  if (errors.empty()) check_valid(c, kCc);
  return 0;
}
