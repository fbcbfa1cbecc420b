// A refused program's log is kept whole: the real verifier refuses
// tests/kernel/refused.bpf.c after a long walk, and the capture the daemon
// loads under (kernel/load_log.h) must hold all of it, the reason last.
// Needs root; skipped otherwise.
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "kernel/load_log.h"
#include "temp_dir.h"

namespace tcpscope {
namespace {

TEST(LoadLog, ARefusalsVerifierLogIsWholeAndItsReasonIsItsLastLine) {
  if (geteuid() != 0) GTEST_SKIP() << "loading BPF programs needs root";
  LibbpfLogCapture capture;
  bpf_object* obj = bpf_object__open_file(TCPSCOPE_REFUSED_BPF_OBJECT, nullptr);
  ASSERT_TRUE(obj) << TCPSCOPE_REFUSED_BPF_OBJECT << ": " << capture.text();
  EXPECT_NE(bpf_object__load(obj), 0);
  bpf_object__close(obj);
  const std::string log = capture.take();

  EXPECT_EQ(refused_program(log), "refused_after_a_long_walk") << log.substr(0, 2000);
  // Whole: from the first instruction to the end marker, far beyond the 4 KiB
  // a fixed buffer once kept.
  EXPECT_GT(log.size(), 16u << 10);
  EXPECT_NE(log.find("BEGIN PROG LOAD LOG --\n0: "), std::string::npos) << log.substr(0, 2000);
  EXPECT_NE(log.find("-- END PROG LOAD LOG --"), std::string::npos) << log.substr(log.size() - 2000);
  const std::string reason = verifier_reason(log, "refused_after_a_long_walk");
  EXPECT_TRUE(std::regex_search(reason, std::regex("invalid mem access"))) << reason;
  // It is the line before the verifier's statistics.
  EXPECT_NE(log.find(reason + "\nprocessed "), std::string::npos) << log.substr(log.size() - 2000);

  TempDir dir;
  setenv("TMPDIR", dir.path().c_str(), 1);
  unsetenv("LOGS_DIRECTORY");
  const std::string saved = save_load_log(log);
  unsetenv("TMPDIR");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(saved, m, std::regex("^full libbpf/verifier log in (\\S+)$"))) << saved;
  std::ifstream in(m[1].str());
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(file.str(), log.back() == '\n' ? log : log + "\n");
}

TEST(LoadLog, NoReasonWithoutTheProgramsLog) {
  EXPECT_EQ(verifier_reason("libbpf: prog 'a': failed to load: -22\n", "a"), "");
  EXPECT_EQ(refused_program("nothing refused\n"), "");
  const std::string log =
      "libbpf: prog 'a': -- BEGIN PROG LOAD LOG --\n0: (b7) r0 = 0\nR1 !read_ok\n"
      "processed 2 insns (limit 1000000) max_states_per_insn 0\n-- END PROG LOAD LOG --\n"
      "libbpf: prog 'a': failed to load: -13\n";
  EXPECT_EQ(verifier_reason(log, "a"), "R1 !read_ok");
  EXPECT_EQ(verifier_reason(log, "b"), "");
  EXPECT_EQ(refused_program(log), "a");
}

}  // namespace
}  // namespace tcpscope
