// Text from the network or from other processes (process names, AS
// organisation names, query strings) on its way to a terminal, a log line or
// JSON: UTF-8 validity, and a form a terminal shows rather than obeys.
#pragma once

#include <string>
#include <string_view>

namespace tcpscope {

// UTF-8 as RFC 3629 allows it: no overlong forms, no surrogates, at most U+10FFFF.
bool valid_utf8(std::string_view s);

// `s` with every control character (C0, DEL, C1) and every byte that is not
// part of valid UTF-8 replaced by '?': an escape sequence in a process name
// cannot move the cursor, recolour or retitle the reader's terminal.
std::string printable_text(std::string_view s);

}  // namespace tcpscope
