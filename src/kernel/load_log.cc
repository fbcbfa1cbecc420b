#include "kernel/load_log.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string_view>
#include <vector>

namespace tcpscope {

namespace {

LibbpfLogCapture* g_capture = nullptr;

// Formats into a buffer as large as the message: libbpf hands the whole
// verifier log to one call ("%s"), often megabytes.
void append_formatted(std::string* out, const char* fmt, va_list args) {
  va_list again;
  va_copy(again, args);
  char small[1024];
  const int n = vsnprintf(small, sizeof(small), fmt, args);
  if (n >= 0 && static_cast<size_t>(n) < sizeof(small)) {
    out->append(small, static_cast<size_t>(n));
  } else if (n > 0) {
    std::vector<char> big(static_cast<size_t>(n) + 1);
    vsnprintf(big.data(), big.size(), fmt, again);
    out->append(big.data(), static_cast<size_t>(n));
  }
  va_end(again);
}

bool is_verifier_statistics(const std::string& line) {
  static const std::regex stats(R"(^(processed \d+ insns|verification time \d+|stack depth ))");
  return std::regex_search(line, stats);
}

}  // namespace

// libbpf prints from the thread that loads, the capture's own.
struct LibbpfPrinter {
  static int print(enum libbpf_print_level level, const char* fmt, va_list args) {
    if (level == LIBBPF_DEBUG || !g_capture) return 0;
    const size_t before = g_capture->text_.size();
    append_formatted(&g_capture->text_, fmt, args);
    return static_cast<int>(g_capture->text_.size() - before);
  }
};

LibbpfLogCapture::LibbpfLogCapture() : previous_(g_capture) {
  g_capture = this;
  libbpf_set_print(LibbpfPrinter::print);
}

LibbpfLogCapture::~LibbpfLogCapture() { g_capture = previous_; }

std::string LibbpfLogCapture::take() {
  std::string out;
  out.swap(text_);
  return out;
}

std::string refused_program(const std::string& log) {
  static const std::regex re("prog '([A-Za-z0-9_]+)': failed to load");
  std::smatch m;
  std::string name;
  for (auto it = log.cbegin(); std::regex_search(it, log.cend(), m, re); it = m.suffix().first) name = m[1];
  return name;
}

std::string libbpf_failure(const std::string& log) {
  static const std::regex generic("^failed to load (object|BPF skeleton) ");
  constexpr std::string_view kPrefix = "libbpf: ";
  std::string last;
  for (size_t at = 0; at < log.size();) {
    size_t end = log.find('\n', at);
    if (end == std::string::npos) end = log.size();
    const std::string_view line(log.data() + at, end - at);
    at = end + 1;
    if (line.substr(0, kPrefix.size()) != kPrefix) continue;
    std::string message(line.substr(kPrefix.size()));
    if (!message.empty() && !std::regex_search(message, generic)) last = std::move(message);
  }
  return last;
}

std::string verifier_reason(const std::string& log, const std::string& program) {
  const std::string begin = "prog '" + program + "': -- BEGIN PROG LOAD LOG --\n";
  const size_t from = log.rfind(begin);
  if (from == std::string::npos) return "";
  const size_t body = from + begin.size();
  size_t end = log.find("-- END PROG LOAD LOG --", body);
  if (end == std::string::npos) end = log.size();
  // Walk back from the end over blank lines and the verifier's statistics.
  size_t line_end = end;
  while (line_end > body) {
    size_t line_start = log.rfind('\n', line_end - 1);
    line_start = (line_start == std::string::npos || line_start < body) ? body : line_start + 1;
    std::string line = log.substr(line_start, line_end - line_start);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && !is_verifier_statistics(line)) return line;
    if (line_start == body) break;
    line_end = line_start - 1;
  }
  return "";
}

std::string save_load_log(const std::string& log) {
  std::string dir = "/tmp";
  for (const char* var : {"LOGS_DIRECTORY", "TMPDIR"}) {
    const char* v = getenv(var);
    if (v && *v) {
      dir = std::string(v).substr(0, std::string(v).find(':'));
      break;
    }
  }
  std::string path = dir + "/tcpscope-load-XXXXXX.log";
  const int fd = mkstemps(path.data(), 4);  // O_EXCL, mode 0600
  if (fd < 0) return std::string("libbpf/verifier log not saved: ") + dir + ": " + strerror(errno);
  FILE* f = fdopen(fd, "w");
  bool ok = f && std::fputs(log.c_str(), f) >= 0 && (log.empty() || log.back() == '\n' || std::fputc('\n', f) != EOF);
  if (f ? std::fclose(f) != 0 : close(fd) != 0) ok = false;
  if (!ok) return "libbpf/verifier log not saved: " + path + ": " + strerror(errno);
  return "full libbpf/verifier log in " + path;
}

}  // namespace tcpscope
