#include "kernel/kernel_tick.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <linux/bpf.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <vector>

#include "tcpscope.skel.h"

namespace tcpscope {

namespace {

// Every kconfig extern of the object must be in libbpf_kconfig(): one that
// is not sends libbpf to the system's config file, and the load fails
// where there is none.
using Kconfig = tcpscope_bpf::tcpscope_bpf__kconfig;
static_assert(sizeof(Kconfig) == sizeof(Kconfig::CONFIG_HZ),
              "a new __kconfig extern in bpf/: resolve it in libbpf_kconfig()");

constexpr auto kMeasureInterval = std::chrono::milliseconds(200);
constexpr size_t kMaxConfigBytes = 16u << 20;  // a config is ~300 KB

std::string errno_text(int err) { return std::string(strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// zlib reads gzip and plain files alike, as libbpf does these two.
KernelConfigFile read_config(const std::string& path) {
  KernelConfigFile f{path, "", ""};
  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) {
    f.error = errno_text(errno ? errno : ENOMEM);
    return f;
  }
  char buf[1 << 16];
  int n;
  while (f.text.size() < kMaxConfigBytes && (n = gzread(gz, buf, sizeof(buf))) > 0) f.text.append(buf, n);
  int zerr = Z_OK;
  const char* what = gzerror(gz, &zerr);
  if (zerr != Z_OK && zerr != Z_BUF_ERROR) f.error = std::string("read error (zlib: ") + what + ")";
  gzclose(gz);
  return f;
}

// A socket filter returning bpf_jiffies64(), run by BPF_PROG_TEST_RUN: its
// return value is the jiffies' low 32 bits.
class BpfJiffies {
 public:
  BpfJiffies() {
    const bpf_insn insns[] = {
        {BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_jiffies64},
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    fd_ = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "tcpscope_hz", "GPL", insns, 2, nullptr);
    if (fd_ < 0) error_ = "loading a socket filter that calls bpf_jiffies64: " + errno_text(errno);
  }
  ~BpfJiffies() {
    if (fd_ >= 0) close(fd_);
  }
  BpfJiffies(const BpfJiffies&) = delete;
  BpfJiffies& operator=(const BpfJiffies&) = delete;

  bool read(uint32_t* jiffies, std::string* error) const {
    if (fd_ < 0) {
      *error = error_;
      return false;
    }
    uint8_t packet[64] = {};  // an Ethernet header at least
    LIBBPF_OPTS(bpf_test_run_opts, run, .data_in = packet, .data_size_in = sizeof(packet));
    if (bpf_prog_test_run_opts(fd_, &run) != 0) {
      *error = "running the bpf_jiffies64 socket filter (BPF_PROG_TEST_RUN): " + errno_text(errno);
      return false;
    }
    *jiffies = run.retval;
    return true;
  }

 private:
  int fd_ = -1;
  std::string error_;
};

}  // namespace

KernelTick read_kernel_tick() {
  utsname u{};
  std::vector<KernelConfigFile> configs;
  if (uname(&u) == 0) configs.push_back(read_config(std::string("/boot/config-") + u.release));
  configs.push_back(read_config("/proc/config.gz"));
  return choose_kernel_tick(configs, [] {
    const BpfJiffies jiffies;
    return measure_tick_rate([&](uint32_t* j, std::string* error) { return jiffies.read(j, error); },
                             kMeasureInterval);
  });
}

std::string libbpf_kconfig(const KernelTick& tick) { return "CONFIG_HZ=" + std::to_string(tick.hz) + "\n"; }

}  // namespace tcpscope
