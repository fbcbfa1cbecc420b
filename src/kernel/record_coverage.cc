#include "kernel/record_coverage.h"

#include <algorithm>

#include "kernel/flow_probe.h"

namespace tcpscope {

namespace {

bool lacks(const std::vector<std::string>& missing, const char* tracepoint) {
  return std::find(missing.begin(), missing.end(), tracepoint) != missing.end();
}

}  // namespace

std::optional<TransferDelimiter> send_transfer_delimiter(const std::vector<std::string>& missing) {
  if (!lacks(missing, tracepoints::kSendmsg)) return TransferDelimiter::kWrite;
  if (!lacks(missing, tracepoints::kProbe)) return TransferDelimiter::kDeparture;
  return std::nullopt;
}

std::vector<std::string> record_coverage(const std::vector<std::string>& missing) {
  // tcp_probe stands in for both per-call hooks: every segment a socket
  // receives shows the ACKs that end and the flights that begin a send
  // transfer, and the payload that arrives. It runs only in ESTABLISHED.
  const bool probe = !lacks(missing, tracepoints::kProbe);
  const bool sendmsg = !lacks(missing, tracepoints::kSendmsg);
  const bool data_ready = !lacks(missing, tracepoints::kDataReady);
  const bool sends = sendmsg || probe;
  const bool arrivals = data_ready || probe;
  std::vector<std::string> lines;

  std::vector<std::string> how;
  if (!sends)
    how.push_back(std::string("no send transfers: they need tcp_sendmsg_locked (Linux 6.16) or tcp_probe") +
                  (arrivals ? ", and without them a flow's received data is one receive transfer" : ""));
  else if (!sendmsg)
    how.push_back("a send transfer starts when its first segment leaves, seen at the next ACK (tcp_probe), not "
                  "when the application writes (no tcp_sendmsg_locked, Linux 6.16): delimited_by \"departure\"");
  if (!arrivals)
    how.push_back("no receive transfers: they need sk_data_ready (Linux 6.3) or tcp_probe");
  else if (!data_ready)
    how.push_back("arrivals are taken from tcp_probe (no sk_data_ready, Linux 6.3): data that arrives after this "
                  "side's FIN is not seen");
  std::string joined;
  for (const auto& h : how) joined += (joined.empty() ? "" : "; ") + h;
  if (!sends && !arrivals)
    lines.push_back("transfers: absent (" + joined + ")");
  else if (how.empty())
    lines.push_back("transfers: full");
  else
    lines.push_back("transfers: degraded (" + joined + ")");

  if (data_ready)
    lines.push_back("receive-side end: at the last arrival (sk_data_ready)");
  else if (probe)
    lines.push_back("receive-side end: at the last arrival (tcp_probe), but for data after this side's FIN");
  else
    lines.push_back("receive-side end: absent (neither sk_data_ready nor tcp_probe)");

  lines.push_back(lacks(missing, tracepoints::kCongState)
                      ? "congestion-state times: no (no tcp_cong_state_set, Linux 5.19)"
                      : "congestion-state times: yes");
  return lines;
}

}  // namespace tcpscope
