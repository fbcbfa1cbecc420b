// Text from the network, from other processes (process names, AS
// organisation names, query strings) or from files on its way to a terminal,
// a log line or JSON: UTF-8 validity, a form a terminal shows rather than
// obeys, and a length fit for a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tcpscope {

// UTF-8 as RFC 3629 allows it: no overlong forms, no surrogates, at most U+10FFFF.
bool valid_utf8(std::string_view s);

// Length (1 to 4) of the valid UTF-8 sequence that starts at s[i], its code
// point in *cp; 0 when the bytes there are not one (as valid_utf8 judges).
size_t utf8_sequence_at(std::string_view s, size_t i, uint32_t* cp);

// `s` with every control character (C0, DEL, C1) and every byte that is not
// part of valid UTF-8 replaced by '?': an escape sequence in a process name
// cannot move the cursor, recolour or retitle the reader's terminal.
std::string printable_text(std::string_view s);

// Columns `s` takes on a terminal: two for an East Asian wide or fullwidth
// character (CJK, Hangul, fullwidth forms, emoji), one for any other
// character or stray byte. What table cells are padded and cut by.
size_t display_width(std::string_view s);

// The longest start of `s` that ends on a character boundary and is at most
// `columns` wide.
std::string_view display_prefix(std::string_view s, size_t columns);

// A value echoed in an error message, cut to 40 bytes: a 10 kB scalar or
// line must not make a 10 kB message.
std::string clipped(const std::string& s);

}  // namespace tcpscope
