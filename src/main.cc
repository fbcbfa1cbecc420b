// tcpscope: one executable, subcommands as in SPEC.md.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/check_config_command.h"
#include "cli/command_line.h"
#include "cli/compare_command.h"
#include "cli/flows_command.h"
#include "cli/policy_command.h"
#include "daemon/daemon.h"
#include "kernel/booted_kernels.h"
#include "kernel/flow_probe.h"
#include "kernel/record_coverage.h"

namespace {

constexpr const char* kUsage =
    "usage: tcpscope <command> [options]\n"
    "\n"
    "  run [--config FILE] [--listen HOST:PORT] [--flow-log FILE|-] [--cgroup DIR]\n"
    "      [--transfer-sampling-rate N]\n"
    "                       the daemon (embedded default config without --config)\n"
    "  check-config FILE    validate a config file; exit 2 with FILE:LINE: message per problem\n"
    "  flows [--server URL] [--json] [--sort FIELD]\n"
    "                       open flows of a running daemon, enriched (class, ASN, CC, srtt, cwnd, ...)\n"
    "  compare (--flows FILE | --server URL | --prometheus URL | --clickhouse URL)\n"
    "          --a SEL --b SEL [--by FIELD] [--metric fct|throughput|rtt|retrans]\n"
    "          [--json] [--plot FILE.svg]\n"
    "                       A/B comparison per group (e.g. --a cc=cubic --b cc=bbr --by asn)\n"
    "  policy show [--server URL] [--json]\n"
    "                       the congestion-control policy in force: rules, experiments, counts\n"
    "  version              version, libbpf version, kernel features found\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "tcpscope: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

int cmd_run(const std::vector<std::string>& args) {
  tcpscope::RunOptions opts;
  tcpscope::CommandLine cl;
  auto incomplete = [](const std::string& arg) { return "run: unknown or incomplete option '" + arg + "'"; };
  cl.option("--config", &opts.config_path)
      .option("--listen", &opts.listen)
      .option("--flow-log", &opts.flow_log)
      .option("--cgroup", &opts.cgroup)
      .option("--transfer-sampling-rate", &opts.transfer_sampling_rate)
      .on_unknown(incomplete)
      .on_missing_value(incomplete);
  if (const auto error = cl.parse(args)) return usage_error(error->message);
  return tcpscope::run_daemon(opts);
}

int cmd_version() {
  auto f = tcpscope::probe_kernel_features();
  std::printf("tcpscope %s\n", TCPSCOPE_VERSION);
  std::printf("libbpf %s\n", tcpscope::libbpf_version_string().c_str());
  std::printf("kernel %s\n", f.kernel_release.c_str());
  std::printf("  %s\n", tcpscope::booted_in_ci_line(f.kernel_release).c_str());
  std::printf("  btf: %s\n", f.btf ? "yes (/sys/kernel/btf/vmlinux)" : "no");
  std::printf("  ringbuf: %s\n", f.ringbuf ? "yes" : "no (or not permitted to probe)");
  std::printf("  sk_storage: %s\n", f.sk_storage ? "yes" : "no (or not permitted to probe)");
  std::string have, missing;
  for (const auto& t : f.tracepoints) have += " " + t;
  for (const auto& t : f.missing_tracepoints) missing += " " + t;
  std::printf("  tracepoints:%s\n", have.empty() ? " none" : have.c_str());
  if (!missing.empty()) std::printf("  missing tracepoints:%s\n", missing.c_str());
  for (const auto& c : tcpscope::record_coverage(f.missing_tracepoints)) std::printf("  %s\n", c.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage_error("no command");
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "run") return cmd_run(args);
  if (cmd == "check-config") {
    if (args.size() != 1) return usage_error("check-config takes one FILE");
    return tcpscope::check_config_command(args[0], std::cout, std::cerr);
  }
  if (cmd == "flows") return tcpscope::flows_command(args, std::cout, std::cerr);
  if (cmd == "compare") return tcpscope::compare_command(args, std::cout, std::cerr);
  if (cmd == "policy") return tcpscope::policy_command(args, std::cout, std::cerr);
  if (cmd == "version" || cmd == "--version") return cmd_version();
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  return usage_error("unknown command '" + cmd + "'");
}
