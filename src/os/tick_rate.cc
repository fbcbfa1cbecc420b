#include "os/tick_rate.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace tcpscope {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTickRateTolerance = 0.08;
constexpr auto kMaxReadTime = std::chrono::milliseconds(2);
constexpr int kReadAttempts = 5;

struct JiffiesSample {
  uint32_t jiffies = 0;
  Clock::time_point at;
};

bool sample(const JiffiesReader& read, JiffiesSample* out, std::string* error) {
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const auto before = Clock::now();
    if (!read(&out->jiffies, error)) return false;
    const auto after = Clock::now();
    if (after - before <= kMaxReadTime) {
      out->at = before + (after - before) / 2;
      return true;
    }
  }
  *error = "each of " + std::to_string(kReadAttempts) + " reads of the jiffies took over " +
           std::to_string(kMaxReadTime.count()) + " ms";
  return false;
}

std::string format_rate(double per_second) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", per_second);
  return text;
}

}  // namespace

int config_hz(std::string_view config) {
  constexpr std::string_view kKey = "CONFIG_HZ=";
  for (size_t at = 0; at < config.size();) {
    size_t end = config.find('\n', at);
    if (end == std::string_view::npos) end = config.size();
    const std::string_view line = config.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    const std::string value(line.substr(kKey.size()));
    char* rest = nullptr;
    const long hz = std::strtol(value.c_str(), &rest, 10);
    if (rest != value.c_str() && (*rest == '\0' || *rest == '\r') && hz > 0 && hz <= 100000)
      return static_cast<int>(hz);
  }
  return 0;
}

int nearest_tick_rate(double ticks_per_second) {
  int best = 0;
  for (int rate : kTickRates)
    if (!best || std::fabs(ticks_per_second - rate) < std::fabs(ticks_per_second - best)) best = rate;
  return std::fabs(ticks_per_second - best) <= kTickRateTolerance * best ? best : 0;
}

TickMeasurement measure_tick_rate(const JiffiesReader& read, std::chrono::milliseconds interval) {
  TickMeasurement m;
  m.over = interval;
  JiffiesSample first, second;
  if (!sample(read, &first, &m.error)) return m;
  std::this_thread::sleep_for(interval);
  if (!sample(read, &second, &m.error)) return m;
  const double seconds = std::chrono::duration<double>(second.at - first.at).count();
  // Unsigned difference: the low 32 bits wrap (on a 32-bit count, 5 minutes after boot).
  m.ticks_per_second = static_cast<uint32_t>(second.jiffies - first.jiffies) / seconds;
  m.hz = nearest_tick_rate(m.ticks_per_second);
  if (!m.hz) m.error = format_rate(m.ticks_per_second) + " ticks per second, no rate a kernel is built with";
  return m;
}

KernelTick choose_kernel_tick(const std::vector<KernelConfigFile>& configs,
                              const std::function<TickMeasurement()>& measure) {
  std::string unread;
  for (const auto& c : configs) {
    const int hz = c.error.empty() ? config_hz(c.text) : 0;
    if (hz) return {hz, "tick " + std::to_string(hz) + " Hz, CONFIG_HZ of " + c.path};
    unread += (unread.empty() ? "" : ", ") + c.path + ": " + (c.error.empty() ? "sets no CONFIG_HZ" : c.error);
  }
  const std::string no_config = "no kernel config (" + unread + ")";
  const TickMeasurement m = measure();
  if (m.hz)
    return {m.hz, "tick " + std::to_string(m.hz) + " Hz, measured: the jiffies advanced " +
                      format_rate(m.ticks_per_second) + " per second over " + std::to_string(m.over.count()) +
                      " ms; " + no_config};
  return {0, "tick unknown: " + no_config + ", and measuring failed (" + m.error +
                 "): transfer records' busy_us, rwnd_limited_us and sndbuf_limited_us read 0"};
}

}  // namespace tcpscope
