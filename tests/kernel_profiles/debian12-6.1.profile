# tcpscope kernel profile debian12-6.1: Debian 12's own kernel (6.1).
# Derived by tests/kernel_profiles/derive.py debian12-6.1 from the BTF (btf_trace_* typedefs)
# of the kernel image package linux-image-6.1.0-57-cloud-amd64 6.1.192-3 (kernel 6.1.0-57-cloud-amd64,
# 693 tracepoints). One line per tracepoint tcpscope attaches to or could:
# 'has NAME' or 'lacks NAME'; the lacking ones are hidden from the daemon to run it as there.
has inet_sock_set_state
has tcp_destroy_sock
lacks sk_data_ready
lacks tcp_sendmsg_locked
has tcp_cong_state_set
has tcp_send_reset
has tcp_receive_reset
has tcp_probe
has tcp_retransmit_skb
lacks sock_send_length
lacks sock_recv_length
