# tcpscope kernel profile linux-6.12: Debian 13's kernel (6.12), as Debian 12 also ships it.
# Derived by tests/kernel_profiles/derive.py linux-6.12 from the BTF (btf_trace_* typedefs)
# of the kernel image package linux-image-6.12.118+deb12-cloud-amd64 6.12.118-1~deb12u1 (kernel 6.12.118+deb12-cloud-amd64,
# 830 tracepoints). One line per tracepoint tcpscope attaches to or could:
# 'has NAME' or 'lacks NAME'; the lacking ones are hidden from the daemon to run it as there.
# tcp_sendmsg_locked is later than 6.12: added by 0f08335ade71 ("trace: tcp: Add tracepoint
# for tcp_sendmsg_locked()"), in net-next in May 2025 (merged there as 8127837aae8f), so
# first released in v6.16. sk_data_ready and sock_{send,recv}_length came between 6.1 and
# 6.12 (this kernel has them, debian12-6.1 does not).
has inet_sock_set_state
has tcp_destroy_sock
has sk_data_ready
lacks tcp_sendmsg_locked
has tcp_cong_state_set
has tcp_send_reset
has tcp_receive_reset
has tcp_probe
has tcp_retransmit_skb
has sock_send_length
has sock_recv_length
