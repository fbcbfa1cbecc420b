// libFuzzer target: the JSON text rule (src/text/json_text.h) on any bytes.
// What put_json_string() writes fits json_string_bound() (the buffer is
// exactly that large, so ASan stops a write past it), is UTF-8 with no raw
// control character, and parses as one JSON string: the input with each byte
// that is not part of a valid UTF-8 sequence as U+FFFD. json_text() writes a
// document holding the bytes as key and value without throwing, and it reads
// back as the same text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/json_text.h"
#include "text/utf8_text.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "json_text_fuzz: %s\n", why.c_str());
  std::abort();
}

// The input as the rule reads it: valid sequences kept, one U+FFFD per other byte.
std::string replaced(std::string_view in) {
  std::string text;
  uint32_t cp;
  for (size_t i = 0; i < in.size();) {
    const size_t n = tcpscope::utf8_sequence_at(in, i, &cp);
    text.append(n ? in.substr(i, n) : std::string_view("\xEF\xBF\xBD"));
    i += n ? n : 1;
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<char> buffer(tcpscope::json_string_bound(in));
  const std::string out(buffer.data(), tcpscope::put_json_string(buffer.data(), in) - buffer.data());
  if (!tcpscope::valid_utf8(out)) fail("the JSON text is not UTF-8");
  for (unsigned char c : out)
    if (c < 0x20 || c == 0x7f) fail("a raw control character in the JSON text");
  const auto parsed = nlohmann::json::parse(out, nullptr, false);
  if (!parsed.is_string()) fail("the JSON text is not one string: " + out);
  const std::string text = replaced(in);
  if (parsed.get<std::string>() != text) fail("the string reads back as other text: " + out);
  const nlohmann::json doc = {{std::string(in), std::string(in)}};
  const auto back = nlohmann::json::parse(tcpscope::json_text(doc, 2), nullptr, false);
  if (back != nlohmann::json{{text, text}}) fail("json_text()'s document reads back as another");
  return 0;
}
