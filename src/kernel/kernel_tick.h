// The running kernel's tick rate for the BPF programs' CONFIG_HZ
// (bpf/transfer.h), decided here rather than by libbpf: libbpf refuses the
// whole object when it finds no kernel config to read, and many hosts have
// none (os/tick_rate.h).
#pragma once

#include <string>

#include "os/tick_rate.h"

namespace tcpscope {

// From the kernel's config where libbpf would read it (/boot/config-RELEASE,
// then /proc/config.gz), else measured from the jiffies as a BPF program
// reads them (bpf_jiffies64, which every kernel tcpscope loads on has).
// Takes 200 ms when measuring.
KernelTick read_kernel_tick();

// libbpf's kconfig text (bpf_object_open_opts.kconfig) resolving every
// kconfig extern of the BPF object: "CONFIG_HZ=250\n".
std::string libbpf_kconfig(const KernelTick& tick);

}  // namespace tcpscope
