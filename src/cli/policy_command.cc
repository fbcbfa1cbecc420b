#include "cli/policy_command.h"

#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "net/http_client.h"
#include "text/json_text.h"
#include "text/utf8_text.h"

namespace tcpscope {

namespace {

// Rule, experiment, cohort and cgroup names are anyone's choice: shown, never
// obeyed by the terminal, padded to `columns` by what the terminal draws.
std::string cell(const std::string& s, size_t columns = 0) {
  std::string out = printable_text(s);
  const size_t width = display_width(out);
  if (width < columns) out.append(columns - width, ' ');
  return out;
}

std::string match_text(const nlohmann::json& m) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  if (m.contains("peer_class")) add("peer_class=" + m["peer_class"].get<std::string>());
  auto list = [](const nlohmann::json& a) {
    std::string s;
    for (const auto& v : a) s += (s.empty() ? "" : ",") + (v.is_string() ? v.get<std::string>() : v.dump());
    return s;
  };
  if (m.contains("asns")) add("asns=" + list(m["asns"]));
  if (m.contains("prefixes")) add("prefixes=" + list(m["prefixes"]));
  if (m.contains("lports")) add("lports=" + list(m["lports"]));
  if (m.contains("services")) add("services=" + list(m["services"]));
  return out.empty() ? "(all)" : out;
}

}  // namespace

std::string render_policy(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text);
  std::ostringstream o;
  o << "cgroup: " << cell(j.value("cgroup", "")) << "\n"
    << "app_override: " << cell(j.value("app_override", "")) << "   sysctl_guard: "
    << cell(j.value("sysctl_guard", "")) << "\n";
  const auto& rules = j["rules"];
  if (rules.empty()) {
    o << "no rules: every flow keeps the system default congestion control\n";
  } else {
    o << "\n" << std::left << std::setw(4) << "#" << std::setw(20) << "RULE" << std::setw(40) << "MATCH"
      << std::setw(28) << "CC / EXPERIMENT" << "ASSIGNED\n";
    int i = 1;
    for (const auto& r : rules) {
      std::string what = r.contains("cc")           ? r["cc"].get<std::string>()
                         : r.contains("controller") ? "controller (cohort " + r["controller"].value("cohort", "") + ")"
                                                    : "experiment " + r["experiment"]["name"].get<std::string>();
      o << std::setw(4) << i++ << cell(r.value("name", ""), 20) << cell(match_text(r["match"]), 40) << cell(what, 28)
        << r.value("assigned", 0) << "\n";
      const char* arms_of = r.contains("controller") ? "controller" : "experiment";
      if (r.contains(arms_of))
        for (const auto& a : r[arms_of]["arms"])
          o << std::setw(64) << "" << "  arm " << cell(a.value("cc", ""), 8) << std::setw(5)
            << (std::to_string(a.value("weight", 0)) + "%") << "     " << a.value("assigned", 0) << "\n";
    }
    o << "first match wins; flows no rule matches keep the system default\n";
  }
  if (!j["app_cc_setsockopt"].empty()) {
    o << "\napplications setting TCP_CONGESTION:\n";
    for (const auto& a : j["app_cc_setsockopt"])
      o << "  " << cell(a.value("cc", ""), 10) << cell(a.value("action", ""), 12) << a.value("calls", 0) << "\n";
  }
  o << "\nsysctl writes:\n";
  for (const auto& [name, v] : j["sysctl_writes"].items())
    o << "  " << cell(name, 42) << "observed " << v.value("observed", 0) << "  denied "
      << v.value("denied", 0) << "  in other network namespaces " << v.value("observed_other_netns", 0) << "\n";
  return o.str();
}

std::string render_controller(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text);
  std::ostringstream o;
  for (const auto& r : j["rules"]) {
    o << "\ncontroller of rule " << cell(r.value("rule", "")) << ": cohort " << cell(r.value("cohort", "")) << ", control "
      << r.value("control_percent", 0) << "%, min_transfers " << r.value("min_transfers", 0) << " from "
      << r.value("min_connections", 0) << " connections per arm, every "
      << r.value("interval_s", 0) << " s, FDR " << r.value("fdr", 0.0) << "; " << r.value("decisions", 0)
      << " decisions, " << r.value("reverts", 0) << " reverts, " << r.value("pooled_asns", 0)
      << " pooled ASNs followed\n";
    if (r["cohorts"].empty()) {
      o << "  no cohort has transfers yet\n";
      continue;
    }
    o << "  " << std::left << std::setw(14) << "COHORT" << std::setw(11) << "STATE" << std::setw(9) << "WINNER"
      << std::setw(24) << "WEIGHTS" << "EVIDENCE\n";
    for (const auto& c : r["cohorts"]) {
      std::string weights;
      for (const auto& [arm, w] : c["weights"].items()) weights += (weights.empty() ? "" : " ") + arm + "=" + w.dump();
      std::string evidence;
      // Per arm: transfers (fct/throughput) from connections (fct/throughput).
      for (const auto& [arm, a] : c["evidence"]["arms"].items())
        evidence += (evidence.empty() ? "" : ", ") + arm + " n=" + std::to_string(a.value("n_fct", 0)) + "/" +
                    std::to_string(a.value("n_throughput", 0)) + " from " +
                    std::to_string(a.value("connections_fct", 0)) + "/" +
                    std::to_string(a.value("connections_throughput", 0)) + " conns";
      const auto& t = c["evidence"]["test"];
      if (t.contains("change")) {
        // A confidence-sequence end no difference could reach yet is null.
        auto end = [](const nlohmann::json& v) {
          char b[32];
          if (!v.is_number()) return std::string("unbounded");
          std::snprintf(b, sizeof(b), "%+.1f%%", v.get<double>() * 100);
          return std::string(b);
        };
        char buf[160];
        std::snprintf(buf, sizeof(buf), "; %s %s vs %s %+.1f%% [%s, %s] e=%.3g", t.value("objective", "").c_str(),
                      t.value("arm", "").c_str(), t.value("against", "").c_str(), t.value("change", 0.0) * 100,
                      end(t["ci"][0]).c_str(), end(t["ci"][1]).c_str(), t.value("e_value", 1.0));
        evidence += buf;
      } else if (t.contains("waiting_for")) {
        evidence += "; waiting for " + t["waiting_for"].get<std::string>();
      }
      o << "  " << cell((c.value("kind", "") == "asn" ? "AS" : "") + c.value("cohort", ""), 14)
        << cell(c.value("state", ""), 11) << cell(c["winner"].is_string() ? c["winner"].get<std::string>() : "-", 9)
        << cell(weights, 24) << cell(evidence) << "\n";
    }
  }
  return o.str();
}

int policy_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string server = "http://127.0.0.1:9810";
  bool json = false;
  if (args.empty() || args[0] != "show") {
    err << "usage: tcpscope policy show [--server URL] [--json]\n";
    return 2;
  }
  CommandLine cl;
  cl.flag("--json", &json).option("--server", &server).on_missing_value(CommandLine::unknown_option_text);
  if (const auto error = cl.parse(args, 1)) {
    err << "tcpscope policy show: " << error->message << "\n";
    return 2;
  }
  HttpResponse resp;
  std::string error;
  if (!http_get(join_url(server, "/api/v1/policy"), 10000, &resp, &error)) {
    err << "tcpscope: " << error << " (is the daemon running?)\n";
    return 1;
  }
  if (resp.status != 200) {
    err << "tcpscope: " << server << "/api/v1/policy: HTTP " << resp.status << "\n";
    return 1;
  }
  HttpResponse controller;
  if (!http_get(join_url(server, "/api/v1/controller"), 10000, &controller, &error)) {
    err << "tcpscope: " << error << " (is the daemon running?)\n";
    return 1;
  }
  // 404: a daemon from before controllers.
  if (controller.status != 200 && controller.status != 404) {
    err << "tcpscope: " << server << "/api/v1/controller: HTTP " << controller.status << "\n";
    return 1;
  }
  const bool has_controller = controller.status == 200;
  try {
    if (json) {
      auto doc = nlohmann::json::parse(resp.body);
      if (has_controller) doc["controller"] = nlohmann::json::parse(controller.body);
      out << json_text(doc, 2) << "\n";
    } else {
      out << render_policy(resp.body) << (has_controller ? render_controller(controller.body) : "");
    }
  } catch (const std::exception& e) {
    err << "tcpscope: unreadable policy from " << server << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace tcpscope
