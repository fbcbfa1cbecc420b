// The fixture every test of the real BPF programs starts from: the programs
// loaded and attached with a ring and remote trie a test fills in seconds,
// following every flow's transfers.
// Needs root and a BTF kernel; the test is skipped otherwise.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "kernel/flow_probe.h"

namespace tcpscope {

class AttachedProbe : public ::testing::Test {
 protected:
  // A subclass's SetUp calls this first and returns when the probe is not
  // there: IsSkipped() or HasFatalFailure().
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF programs needs root";
    if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) GTEST_SKIP() << "no kernel BTF";
    FlowProbeOptions opts;
    opts.ring_buffer_bytes = ring_buffer_bytes();
    opts.remote_trie_entries = 1024;
    opts.transfer_sampling_rate = 1;  // every flow's transfers: the tests check each
    std::string error, details;
    probe_ = FlowProbe::open_and_attach(opts, &error, &details);
    ASSERT_TRUE(probe_) << error << "\n" << details;
  }

  // A ring a test fills in seconds; a test that leaves it unread longer asks
  // for more.
  virtual uint32_t ring_buffer_bytes() const { return 4u << 20; }

  std::unique_ptr<FlowProbe> probe_;
};

}  // namespace tcpscope
