// A load that stops before the kernel verifies any program says which of
// libbpf's steps failed, never "the kernel refused BPF program (unknown)".
// The real failure needs root; skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "kernel/flow_probe.h"
#include "kernel/load_log.h"

namespace tcpscope {
namespace {

TEST(LoadFailure, AMapTheKernelCannotCreateIsNamed) {
  if (geteuid() != 0) GTEST_SKIP() << "loading BPF programs needs root";
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) GTEST_SKIP() << "no kernel BTF";
  FlowProbeOptions opts;
  opts.ring_buffer_bytes = 1u << 20;
  opts.remote_trie_entries = 0;  // an LPM trie of no entries: the kernel refuses to create it
  std::string error, details;
  auto probe = FlowProbe::open_and_attach(opts, &error, &details);
  ASSERT_FALSE(probe);
  RecordProperty("error", error);
  EXPECT_EQ(error.find("(unknown)"), std::string::npos) << error;
  EXPECT_EQ(error.rfind("loading the BPF object failed before the kernel verified any program: libbpf: ", 0), 0u)
      << error;
  EXPECT_NE(error.find("map 'remote_gen"), std::string::npos) << error;
  EXPECT_NE(error.find("(errno 22)"), std::string::npos) << error;
  EXPECT_NE(details.find("failed to load object"), std::string::npos) << details;
}

TEST(LoadFailure, LibbpfsStepIsItsLastMessageButTheGenericOnes) {
  // What libbpf 1.1 printed on Debian's 6.1 with no kernel config to read.
  EXPECT_EQ(libbpf_failure("libbpf: failed to open system Kconfig\n"
                           "libbpf: failed to load object 'tcpscope_bpf'\n"
                           "libbpf: failed to load BPF skeleton 'tcpscope_bpf': -22\n"),
            "failed to open system Kconfig");
  EXPECT_EQ(libbpf_failure("libbpf: map 'events': failed to create: Cannot allocate memory(-12)\n"
                           "libbpf: failed to load object 'tcpscope_bpf'"),
            "map 'events': failed to create: Cannot allocate memory(-12)");
  EXPECT_EQ(libbpf_failure("libbpf: failed to load object 'tcpscope_bpf'\n"), "");
  EXPECT_EQ(libbpf_failure("not libbpf's\n"), "");
}

}  // namespace
}  // namespace tcpscope
