// The kernel's tick rate (CONFIG_HZ), which turns its jiffies-based counters
// into time: read from the kernel's config, or, where none can be read (a
// container without /boot, a minimal image; Debian's kernels have no
// /proc/config.gz), measured by watching the jiffies advance.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tcpscope {

// The rates a kernel's tick can be built with (x86's and arm64's Kconfig:
// HZ_100, HZ_250, HZ_300, HZ_1000).
inline constexpr int kTickRates[] = {100, 250, 300, 1000};

// CONFIG_HZ's value in a kernel config's text; 0 if it sets none.
int config_hz(std::string_view config);

// The tick rate of a clock seen advancing `ticks_per_second`: the nearest of
// kTickRates if within 8% of it (250 and 300 are 20% apart), else 0.
int nearest_tick_rate(double ticks_per_second);

// Reads the kernel's jiffies (at least their low 32 bits) into *jiffies;
// false and *error naming what failed.
using JiffiesReader = std::function<bool(uint32_t* jiffies, std::string* error)>;

struct TickMeasurement {
  int hz = 0;  // 0: not measured, or no tick rate a kernel is built with
  double ticks_per_second = 0;
  std::chrono::milliseconds over{0};
  std::string error;  // why hz is 0
};

// Reads the jiffies, waits `interval`, reads them again, each read placed in
// time between two steady-clock readings: a read the scheduler interrupted
// (over 2 ms) is taken again, 5 times at most.
TickMeasurement measure_tick_rate(const JiffiesReader& read, std::chrono::milliseconds interval);

// A kernel config file as it was read: its text, or why it could not be.
struct KernelConfigFile {
  std::string path;
  std::string text;
  std::string error;  // "" if read
};

struct KernelTick {
  int hz = 0;          // 0: unknown, the jiffies-based counters read 0
  std::string source;  // one line: the rate and where it came from
};

// The first of `configs` that sets CONFIG_HZ gives the rate; if none does,
// `measure` is called and its rate taken. The source line names the file, or
// says why each file did not serve and what was measured, or what reads 0.
KernelTick choose_kernel_tick(const std::vector<KernelConfigFile>& configs,
                              const std::function<TickMeasurement()>& measure);

}  // namespace tcpscope
