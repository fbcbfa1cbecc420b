#include "record/kernel_capabilities.h"

#include <algorithm>

namespace tcpscope {

std::vector<std::string> record_capabilities(const std::vector<std::string>& missing) {
  auto lacks = [&](const char* tracepoint) {
    return std::find(missing.begin(), missing.end(), tracepoint) != missing.end();
  };
  const bool arrival = !lacks("sk_data_ready");
  const bool last_read = !lacks("tcp_rcv_space_adjust");
  std::vector<std::string> lines;

  // A send transfer starts in tcp_sendmsg_locked (6.16) or, without it, at
  // the first ACK after its first segment left (tcp_probe): then its start
  // is that departure, not the write. A receive transfer ends where a send
  // transfer (a request) came between two arrivals, so without send
  // transfers a flow's received data is one transfer.
  const bool sendmsg = !lacks("tcp_sendmsg_locked");
  const bool send = sendmsg || !lacks("tcp_probe");
  std::string receive;
  if (!arrival && !last_read)
    receive = "receive transfers absent: they need sk_data_ready or tcp_rcv_space_adjust";
  else if (!send)
    receive = std::string("the received data is one receive transfer per flow") +
              (arrival ? "" : ", ending at the application's last read");
  else if (!arrival)
    receive = "a receive transfer ends at the application's last read of it, not its last arrival "
              "(no sk_data_ready, Linux 6.3)";
  if (send && !sendmsg)
    receive = "a send transfer starts when its first segment leaves, seen at the next ACK (tcp_probe), not when "
              "the application writes (no tcp_sendmsg_locked, Linux 6.16)" +
              (receive.empty() ? std::string() : "; " + receive);
  if (send && receive.empty())
    lines.push_back("transfers: full");
  else if (!send && !arrival && !last_read)
    lines.push_back("transfers: absent (send transfers start in tcp_sendmsg_locked, Linux 6.16, or tcp_probe; " +
                    receive + ")");
  else if (!send)
    lines.push_back("transfers: degraded (send transfers absent: they start in tcp_sendmsg_locked, Linux 6.16, "
                    "or tcp_probe; " + receive + ")");
  else
    lines.push_back("transfers: degraded (" + receive + ")");

  if (arrival)
    lines.push_back("receive-side end: at the last arrival (sk_data_ready)");
  else if (last_read)
    lines.push_back("receive-side end: at the application's last read (tcp_rcv_space_adjust)");
  else
    lines.push_back("receive-side end: absent (neither sk_data_ready nor tcp_rcv_space_adjust)");

  lines.push_back(lacks("tcp_cong_state_set") ? "congestion-state times: no (no tcp_cong_state_set, Linux 5.19)"
                                              : "congestion-state times: yes");
  return lines;
}

}  // namespace tcpscope
