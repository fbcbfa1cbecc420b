// libbpf's messages while BPF programs load, kept whole, and what a user
// needs of them: which program the kernel refused and the verifier's reason.
// A refused program's verifier log runs to thousands of lines and ends with
// the reason; a log cut anywhere before its end says nothing.
#pragma once

#include <string>

namespace tcpscope {

// While alive, every message libbpf prints above debug level (the verifier's
// log of a refused program among them) is appended, whole, to text().
// libbpf has one print callback per process: one capture at a time.
class LibbpfLogCapture {
 public:
  LibbpfLogCapture();
  ~LibbpfLogCapture();
  LibbpfLogCapture(const LibbpfLogCapture&) = delete;
  LibbpfLogCapture& operator=(const LibbpfLogCapture&) = delete;

  const std::string& text() const { return text_; }
  // What was captured, leaving the capture empty for the next attempt.
  std::string take();

 private:
  friend struct LibbpfPrinter;  // libbpf's print callback, which appends
  std::string text_;
  LibbpfLogCapture* previous_;
};

// The program whose load libbpf reported failed in `log`, "" if none.
std::string refused_program(const std::string& log);

// What libbpf says failed when a load stopped before the kernel verified
// any program (no refused_program()): its last message but the generic
// "failed to load object" ones, without the "libbpf: " prefix; "" if none.
// Say, "failed to open system Kconfig", or "map 'events': failed to create:
// Cannot allocate memory(-12)".
std::string libbpf_failure(const std::string& log);

// The verifier's reason for refusing `program`: the last line of its load log
// (libbpf's "-- BEGIN PROG LOAD LOG --" block) before the statistics the
// verifier appends ("processed N insns", "verification time", "stack
// depth"). "" when the log holds no such block.
std::string verifier_reason(const std::string& log, const std::string& program);

// Writes `log` to a new file (mode 0600) in the logs directory systemd made
// ($LOGS_DIRECTORY), else $TMPDIR, else /tmp. Returns "full libbpf/verifier
// log in PATH", or a clause saying why it was not saved.
std::string save_load_log(const std::string& log);

}  // namespace tcpscope
