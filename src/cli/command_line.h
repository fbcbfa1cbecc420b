// The options of a subcommand, read in one pass over its arguments: flags
// ("--json") and options with a value ("--server URL" or "--server=URL"), in
// any order. Each is handled as it is read, so the problem reported is the
// first one in argument order; a stop flag ("--help") ends the pass.
//
// Every command words its own errors: the parser finds unknown arguments
// and options missing their value and asks the command's hooks for the
// message; a value handler says why its value is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tcpscope {

class CommandLine {
 public:
  // "" when the value is taken, otherwise the error message.
  using ValueHandler = std::function<std::string(const std::string& value)>;
  // The message for an argument the parser rejects (the argument as given).
  using Wording = std::function<std::string(const std::string& arg)>;

  // A flag without a value, spelled exactly ("--json", "-h"); sets *seen.
  CommandLine& flag(const std::string& spelling, bool* seen);
  // A flag that ends the pass (--help): sets *seen and reads no further.
  CommandLine& stop_flag(const std::string& spelling, bool* seen);
  // "--name VALUE" or "--name=VALUE" (spelling "--name"). The value is the
  // next argument whatever it looks like; "--name" last is missing its value.
  CommandLine& option(const std::string& spelling, ValueHandler on_value);
  // The same, storing the value.
  CommandLine& option(const std::string& spelling, std::string* value);
  CommandLine& option(const std::string& spelling, std::optional<std::string>* value);
  // An option whose value is a count (parse_decimal, at most max_digits
  // digits) in [lo, hi], handed to `take`; otherwise the error
  // "SPELLING wants WANTS, got "VALUE"".
  CommandLine& count_option(const std::string& spelling, size_t max_digits, uint64_t lo, uint64_t hi,
                            const std::string& wants, std::function<void(uint64_t)> take);

  // Default wording: unknown_option_text and needs_value_text.
  CommandLine& on_unknown(Wording wording);
  CommandLine& on_missing_value(Wording wording);
  static std::string unknown_option_text(const std::string& arg);  // unknown option 'ARG'
  static std::string needs_value_text(const std::string& arg);     // ARG needs a value

  struct Error {
    enum Kind { kUnknown, kMissingValue, kBadValue };
    Kind kind;
    std::string message;
  };
  // Reads args[first..]: the first problem, or nullopt when every argument
  // was taken (or a stop flag was reached).
  std::optional<Error> parse(const std::vector<std::string>& args, size_t first = 0) const;

 private:
  struct Option {
    std::string spelling;
    enum Kind { kFlag, kStop, kValue } kind;
    bool* seen = nullptr;
    ValueHandler on_value;
  };
  std::vector<Option> options_;
  Wording unknown_ = unknown_option_text;
  Wording missing_ = needs_value_text;
};

// A count written in decimal digits only (no sign, no space), at most
// max_digits of them; max_digits <= 19, so that every such count fits.
bool parse_decimal(const std::string& text, size_t max_digits, uint64_t* out);

}  // namespace tcpscope
