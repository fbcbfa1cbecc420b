// The kernel's tick rate where no kernel config says it: the choice of
// source, and the measurement against a jiffies clock of known rate.
#include "os/tick_rate.h"

#include <gtest/gtest.h>

#include <thread>

namespace tcpscope {
namespace {

using std::chrono::milliseconds;

// Jiffies at `hz` from the steady clock, as a kernel's advance, started
// near the 32-bit wrap so that a measurement crosses it.
JiffiesReader jiffies_at(int hz) {
  const auto start = std::chrono::steady_clock::now();
  return [=](uint32_t* jiffies, std::string*) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    *jiffies = static_cast<uint32_t>(0xffffffffu - 10 + static_cast<uint64_t>(s * hz));
    return true;
  };
}

TEST(TickRate, ConfigHzIsTheValueOfItsOwnLine) {
  const std::string debian =
      "# CONFIG_HZ_PERIODIC is not set\n# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\n"
      "# CONFIG_HZ_300 is not set\nCONFIG_HZ=250\nCONFIG_SCHED_HRTICK=y\n";
  EXPECT_EQ(config_hz(debian), 250);
  EXPECT_EQ(config_hz("CONFIG_HZ=1000"), 1000);    // last line, no newline
  EXPECT_EQ(config_hz("CONFIG_HZ=300\r\n"), 300);
  EXPECT_EQ(config_hz("CONFIG_HZ_1000=y\n"), 0);  // the choice, not the value
  EXPECT_EQ(config_hz("# CONFIG_HZ=250\n"), 0);
  EXPECT_EQ(config_hz("CONFIG_HZ=\nCONFIG_HZ=abc\nCONFIG_HZ=250x\nCONFIG_HZ=-1\n"), 0);
  EXPECT_EQ(config_hz(""), 0);
}

TEST(TickRate, NearestRateWithinEightPercent) {
  EXPECT_EQ(nearest_tick_rate(249.6), 250);
  EXPECT_EQ(nearest_tick_rate(95), 100);
  EXPECT_EQ(nearest_tick_rate(310), 300);
  EXPECT_EQ(nearest_tick_rate(1040), 1000);
  EXPECT_EQ(nearest_tick_rate(275), 0);  // between 250 and 300: neither
  EXPECT_EQ(nearest_tick_rate(600), 0);
  EXPECT_EQ(nearest_tick_rate(50), 0);
  EXPECT_EQ(nearest_tick_rate(0), 0);
}

TEST(TickRate, MeasuresEachRateAKernelIsBuiltWith) {
  for (int hz : kTickRates) {
    const TickMeasurement m = measure_tick_rate(jiffies_at(hz), milliseconds(120));
    EXPECT_EQ(m.hz, hz) << m.ticks_per_second << " " << m.error;
    EXPECT_TRUE(m.error.empty()) << m.error;
    EXPECT_EQ(m.over, milliseconds(120));
  }
}

TEST(TickRate, AClockOfNoKernelRateIsNoMeasurement) {
  const TickMeasurement m = measure_tick_rate(jiffies_at(600), milliseconds(100));
  EXPECT_EQ(m.hz, 0);
  EXPECT_NE(m.error.find("no rate a kernel is built with"), std::string::npos) << m.error;
}

TEST(TickRate, AFailedReadIsNoMeasurement) {
  const TickMeasurement m = measure_tick_rate(
      [](uint32_t*, std::string* error) {
        *error = "BPF_PROG_TEST_RUN: Operation not permitted (errno 1)";
        return false;
      },
      milliseconds(10));
  EXPECT_EQ(m.hz, 0);
  EXPECT_EQ(m.error, "BPF_PROG_TEST_RUN: Operation not permitted (errno 1)");
}

TEST(TickRate, ReadsTooSlowToPlaceInTimeAreNoMeasurement) {
  int reads = 0;
  const TickMeasurement m = measure_tick_rate(
      [&](uint32_t* jiffies, std::string*) {
        ++reads;
        std::this_thread::sleep_for(milliseconds(3));
        *jiffies = 0;
        return true;
      },
      milliseconds(10));
  EXPECT_EQ(m.hz, 0);
  EXPECT_EQ(reads, 5);  // retried, and bounded
  EXPECT_NE(m.error.find("took over 2 ms"), std::string::npos) << m.error;
}

TEST(TickRate, TheFirstConfigSettingHzWinsAndNothingIsMeasured) {
  bool measured = false;
  const auto measure = [&] {
    measured = true;
    return TickMeasurement{};
  };
  const KernelTick t = choose_kernel_tick(
      {{"/boot/config-6.1.0-28-amd64", "CONFIG_HZ=250\n", ""}, {"/proc/config.gz", "CONFIG_HZ=1000\n", ""}}, measure);
  EXPECT_EQ(t.hz, 250);
  EXPECT_EQ(t.source, "tick 250 Hz, CONFIG_HZ of /boot/config-6.1.0-28-amd64");
  EXPECT_FALSE(measured);

  const KernelTick second = choose_kernel_tick(
      {{"/boot/config-6.1.0-28-amd64", "", "No such file or directory (errno 2)"},
       {"/proc/config.gz", "# an empty config\n", ""}},
      [] { return TickMeasurement{300, 299.7, milliseconds(200), ""}; });
  EXPECT_EQ(second.hz, 300);
  EXPECT_EQ(second.source,
            "tick 300 Hz, measured: the jiffies advanced 299.7 per second over 200 ms; no kernel config "
            "(/boot/config-6.1.0-28-amd64: No such file or directory (errno 2), /proc/config.gz: sets no CONFIG_HZ)");
}

TEST(TickRate, WithNeitherItSaysWhatReadsZero) {
  const KernelTick t = choose_kernel_tick({{"/proc/config.gz", "", "No such file or directory (errno 2)"}}, [] {
    TickMeasurement m;
    m.error = "loading a socket filter that calls bpf_jiffies64: Operation not permitted (errno 1)";
    return m;
  });
  EXPECT_EQ(t.hz, 0);
  EXPECT_EQ(t.source,
            "tick unknown: no kernel config (/proc/config.gz: No such file or directory (errno 2)), and measuring "
            "failed (loading a socket filter that calls bpf_jiffies64: Operation not permitted (errno 1)): transfer "
            "records' busy_us, rwnd_limited_us and sndbuf_limited_us read 0");
}

}  // namespace
}  // namespace tcpscope
