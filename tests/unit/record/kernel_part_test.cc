// The values a record reports as the kernel had them are written once: each
// field of the events' kernel parts (tcpscope_flow_kernel,
// tcpscope_transfer_kernel in include/tcpscope/flow_event.h) is named in at
// most four hand-written files of bpf/, include/ and src/: the event
// header, the BPF code that fills it (and the per-socket state, if the
// kernel tracks it), and record/record_fields.h, the output table. The
// decoders copy the parts whole and the records hold them whole, so a
// fifth file naming one is a copy of it (or a consumer, which then belongs
// with the fields the daemon computes with). Reads the source tree.
//
// "Named" is in code: comments and string literals (a help text, a log
// line, a JSON key read back from the daemon's output) do not count.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace tcpscope {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = TCPSCOPE_SOURCE_DIR;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool starts(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// The text with its comments and string and character literals (raw ones
// too) blanked out, lines kept.
std::string code_only(std::string_view text) {
  std::string out(text);
  auto blank = [&](size_t from, size_t to) {
    for (size_t i = from; i < to && i < out.size(); ++i)
      if (out[i] != '\n') out[i] = ' ';
  };
  size_t i = 0;
  while (i < text.size()) {
    const std::string_view rest = text.substr(i);
    size_t end;
    if (starts(rest, "//")) {
      end = text.find('\n', i);
    } else if (starts(rest, "/*")) {
      end = text.find("*/", i + 2);
      if (end != std::string_view::npos) end += 2;
    } else if (starts(rest, "R\"") && (i == 0 || !isalnum(static_cast<unsigned char>(text[i - 1])))) {
      const size_t open = text.find('(', i);
      const std::string close = ")" + std::string(text.substr(i + 2, open - i - 2)) + "\"";
      end = open == std::string_view::npos ? open : text.find(close, open);
      if (end != std::string_view::npos) end += close.size();
    } else if (rest[0] == '"' || (rest[0] == '\'' && !(i > 0 && isdigit(static_cast<unsigned char>(text[i - 1]))))) {
      // (a quote after a digit is not a literal's: 1'000)
      end = i + 1;
      while (end < text.size() && text[end] != rest[0] && text[end] != '\n') end += text[end] == '\\' ? 2 : 1;
      if (end < text.size()) ++end;
    } else {
      ++i;
      continue;
    }
    if (end == std::string_view::npos) end = text.size();
    blank(i, end);
    i = end;
  }
  return out;
}

// The identifiers a text's code names.
std::set<std::string> identifiers(std::string_view text) {
  const std::string code = code_only(text);
  std::set<std::string> out;
  auto word = [](char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t i = 0; i < code.size();) {
    if (!word(code[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < code.size() && word(code[end])) ++end;
    out.insert(code.substr(i, end - i));
    i = end;
  }
  return out;
}

bool names(std::string_view text, const std::string& field) { return identifiers(text).count(field) > 0; }

// The members of `struct NAME { ... };` in the header, padding left out.
std::vector<std::string> struct_fields(const std::string& header, const std::string& name) {
  const std::string code = code_only(header);
  const size_t open = code.find("struct " + name + " {");
  if (open == std::string::npos) return {};
  const size_t close = code.find("\n};", open);
  std::istringstream body(code.substr(open, close - open));
  static const std::regex member(R"(^\s*(?:__[us]\d+|char)\s+(\w+)(?:\[\w+\])?;)");
  std::vector<std::string> out;
  for (std::string line; std::getline(body, line);) {
    std::smatch m;
    if (std::regex_search(line, m, member) && m[1] != "pad") out.push_back(m[1]);
  }
  return out;
}

// Each hand-written source file of bpf/, include/ and src/ (bpf/vmlinux/ is
// generated), by its path from the tree's root, with what its code names.
std::vector<std::pair<std::string, std::set<std::string>>> source_files() {
  std::vector<std::pair<std::string, std::set<std::string>>> out;
  for (const char* dir : {"bpf", "include", "src"})
    for (const auto& e : fs::recursive_directory_iterator(kSourceDir / dir)) {
      const fs::path rel = fs::relative(e.path(), kSourceDir);
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || starts(rel.string(), "bpf/vmlinux/")) continue;
      if (ext == ".h" || ext == ".c" || ext == ".cc") out.emplace_back(rel.string(), identifiers(read_text(e.path())));
    }
  return out;
}

TEST(KernelPart, CodeOnlyLeavesOutCommentsAndStrings) {
  EXPECT_TRUE(names("k->max_cwnd = cwnd; /* max_cwnd */", "max_cwnd"));
  EXPECT_TRUE(names("FIELD(cwnd, 17, \"uint64\", \"UInt64\", r.kernel.cwnd)", "cwnd"));
  EXPECT_FALSE(names("// the cwnd\n/* cwnd\n cwnd */ x = \"cwnd \\\" cwnd\";", "cwnd"));
  EXPECT_FALSE(names("q = R\"sql(SELECT cwnd \" FROM t)sql\"; c = 'c';", "cwnd"));
  EXPECT_FALSE(names("k->max_cwnd = 1;", "cwnd")) << "a longer name is not this one";
  EXPECT_TRUE(names("s = \"a\"; t = r.cwnd; u = \"b\";", "cwnd"));
  EXPECT_TRUE(names("n = 1'000; t = r.cwnd;", "cwnd"));
}

TEST(KernelPart, EachValueIsNamedInAtMostFourFiles) {
  const std::string header = read_text(kSourceDir / "include/tcpscope/flow_event.h");
  const std::vector<std::string> flow = struct_fields(header, "tcpscope_flow_kernel");
  const std::vector<std::string> transfer = struct_fields(header, "tcpscope_transfer_kernel");
  // The parse found the parts: fields known to be there are among them.
  ASSERT_GE(flow.size(), 11u);
  ASSERT_GE(transfer.size(), 2u);
  EXPECT_NE(std::find(flow.begin(), flow.end(), "max_cwnd"), flow.end());
  EXPECT_NE(std::find(transfer.begin(), transfer.end(), "busy_us"), transfer.end());

  const auto files = source_files();
  ASSERT_GT(files.size(), 50u);
  std::vector<std::string> fields = flow;
  fields.insert(fields.end(), transfer.begin(), transfer.end());
  for (const std::string& field : fields) {
    std::set<std::string> naming;
    for (const auto& [path, named] : files)
      if (named.count(field)) naming.insert(path);
    std::string list;
    for (const auto& path : naming) list += " " + path;
    EXPECT_LE(naming.size(), 4u) << field << " is named in" << list;
    // Declared, reported and filled: a field none of them names is dead.
    EXPECT_TRUE(naming.count("include/tcpscope/flow_event.h")) << field << ":" << list;
    EXPECT_TRUE(naming.count("src/record/record_fields.h")) << field << " is not reported:" << list;
    EXPECT_TRUE(std::any_of(naming.begin(), naming.end(), [](const std::string& p) { return starts(p, "bpf/"); }))
        << field << " is not filled by BPF:" << list;
  }
}

}  // namespace
}  // namespace tcpscope
