#include "cli/command_line.h"

#include <utility>

namespace tcpscope {

CommandLine& CommandLine::flag(const std::string& spelling, bool* seen) {
  options_.push_back({spelling, Option::kFlag, seen, nullptr});
  return *this;
}

CommandLine& CommandLine::stop_flag(const std::string& spelling, bool* seen) {
  options_.push_back({spelling, Option::kStop, seen, nullptr});
  return *this;
}

CommandLine& CommandLine::option(const std::string& spelling, ValueHandler on_value) {
  options_.push_back({spelling, Option::kValue, nullptr, std::move(on_value)});
  return *this;
}

CommandLine& CommandLine::option(const std::string& spelling, std::string* value) {
  return option(spelling, [value](const std::string& v) {
    *value = v;
    return std::string();
  });
}

CommandLine& CommandLine::option(const std::string& spelling, std::optional<std::string>* value) {
  return option(spelling, [value](const std::string& v) {
    *value = v;
    return std::string();
  });
}

CommandLine& CommandLine::count_option(const std::string& spelling, size_t max_digits, uint64_t lo, uint64_t hi,
                                       const std::string& wants, std::function<void(uint64_t)> take) {
  return option(spelling, [=](const std::string& v) -> std::string {
    uint64_t n = 0;
    if (!parse_decimal(v, max_digits, &n) || n < lo || n > hi)
      return spelling + " wants " + wants + ", got \"" + v + "\"";
    take(n);
    return "";
  });
}

CommandLine& CommandLine::on_unknown(Wording wording) {
  unknown_ = std::move(wording);
  return *this;
}

CommandLine& CommandLine::on_missing_value(Wording wording) {
  missing_ = std::move(wording);
  return *this;
}

std::string CommandLine::unknown_option_text(const std::string& arg) { return "unknown option '" + arg + "'"; }

std::string CommandLine::needs_value_text(const std::string& arg) { return arg + " needs a value"; }

std::optional<CommandLine::Error> CommandLine::parse(const std::vector<std::string>& args, size_t first) const {
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const Option* match = nullptr;
    std::string value;
    bool inline_value = false;
    for (const Option& o : options_) {
      if (arg == o.spelling) {
        match = &o;
        break;
      }
      const size_t n = o.spelling.size();
      if (o.kind == Option::kValue && arg.size() > n && arg.compare(0, n, o.spelling) == 0 && arg[n] == '=') {
        match = &o;
        value = arg.substr(n + 1);
        inline_value = true;
        break;
      }
    }
    if (!match) return Error{Error::kUnknown, unknown_(arg)};
    if (match->kind != Option::kValue) {
      *match->seen = true;
      if (match->kind == Option::kStop) return std::nullopt;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return Error{Error::kMissingValue, missing_(arg)};
      value = args[++i];
    }
    if (std::string why = match->on_value(value); !why.empty()) return Error{Error::kBadValue, std::move(why)};
  }
  return std::nullopt;
}

bool parse_decimal(const std::string& text, size_t max_digits, uint64_t* out) {
  if (text.empty() || text.size() > max_digits || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *out = std::stoull(text);
  return true;
}

}  // namespace tcpscope
