#include "os/linux_capabilities.h"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tcpscope {
namespace {

TEST(CapabilityNamesTest, NamesBitsInOrder) {
  EXPECT_EQ(capability_names(0), "none");
  EXPECT_EQ(capability_names(cap_bit(kCapNetAdmin)), "cap_net_admin");
  EXPECT_EQ(capability_names(cap_bit(kCapBpf) | cap_bit(kCapNetAdmin) | cap_bit(0)), "cap_chown,cap_net_admin,cap_bpf");
  EXPECT_EQ(capability_names(cap_bit(40)), "cap_checkpoint_restore");
  EXPECT_EQ(capability_names(cap_bit(50)), "cap_50");
}

TEST(ProcStatusTest, ParsesTheCapabilityLines) {
  const std::string status =
      "Name:\ttcpscope\nUmask:\t0022\nState:\tS (sleeping)\n"
      "CapInh:\t0000000000000000\nCapPrm:\t0000000000281000\nCapEff:\t0000000000201000\n"
      "CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t0\n";
  auto sets = parse_proc_status_capabilities(status);
  ASSERT_TRUE(sets);
  EXPECT_EQ(sets->inheritable, 0u);
  EXPECT_EQ(sets->permitted, 0x281000u);
  EXPECT_EQ(sets->effective, 0x201000u);
  EXPECT_EQ(sets->bounding, 0x1ffffffffffu);
  EXPECT_EQ(sets->ambient, 0u);
  EXPECT_TRUE(sets->no_new_privs);
  EXPECT_EQ(capability_names(sets->permitted), "cap_net_admin,cap_sys_ptrace,cap_sys_admin");
}

TEST(ProcStatusTest, MissingOrGarbledLinesAreRejected) {
  EXPECT_FALSE(parse_proc_status_capabilities(""));
  EXPECT_FALSE(parse_proc_status_capabilities("CapInh:\t0\nCapPrm:\t0\nCapEff:\t0\n"));  // no CapBnd
  EXPECT_FALSE(parse_proc_status_capabilities("CapInh:\t0\nCapPrm:\tzz\nCapEff:\t0\nCapBnd:\t0\n"));
}

TEST(ProcStatusTest, ReadsThisThread) {
  auto sets = thread_capabilities();
  ASSERT_TRUE(sets);
  EXPECT_EQ(sets->effective & ~sets->permitted, 0u);  // effective is always within permitted
  EXPECT_FALSE(process_threads().empty());
}

// The real thing, in a child process (the test binary must keep its own
// capabilities): threads blocked in different ways all end up with only the
// kept capability, and keep working.
TEST(DropCapabilitiesTest, EveryThreadDropsAndKeepsWorking) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(report[0]);
    auto fail = [&](const std::string& why) {
      (void)!write(report[1], why.data(), why.size());
      _exit(1);
    };
    const uint64_t keep = cap_bit(kCapNetAdmin);
    const auto before = thread_capabilities();
    if (!before) fail("cannot read capabilities");

    // A thread blocked on a condition variable, one in read() on a socket,
    // one sleeping in a loop: the shapes of civetweb's workers, its master
    // and the flow-log writer.
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    std::atomic<uint64_t> seen_in_cv_thread{~0ull};
    std::thread waiter([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return go; });
      auto now = thread_capabilities();
      seen_in_cv_thread = now ? now->effective : ~0ull;
    });
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) fail("socketpair");
    std::atomic<int> read_result{-2};
    std::thread reader([&] {
      char c;
      read_result = static_cast<int>(read(sv[0], &c, 1));
    });
    std::atomic<bool> stop{false};
    std::thread sleeper([&] {
      while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));

    std::string error;
    if (!drop_capabilities_in_every_thread(keep, &error)) fail(error);

    // Every thread, as the kernel sees it.
    const uint64_t want = keep & before->permitted;
    for (int tid : process_threads()) {
      auto sets = thread_capabilities(tid);
      if (!sets) fail("cannot read thread " + std::to_string(tid));
      if (sets->effective != want || sets->permitted != want || sets->inheritable || sets->ambient)
        fail("thread " + std::to_string(tid) + " has effective " + capability_names(sets->effective));
      if ((before->effective & cap_bit(kCapSetpcap)) && sets->bounding != (before->bounding & keep))
        fail("thread " + std::to_string(tid) + " has bounding set " + capability_names(sets->bounding));
      if (!sets->no_new_privs) fail("thread " + std::to_string(tid) + " lacks no_new_privs");
    }
    // The interrupted threads carry on: the read completes with the byte
    // written now, the waiter wakes.
    if (write(sv[1], "x", 1) != 1) fail("write");
    reader.join();
    if (read_result != 1) fail("read in the reader thread returned " + std::to_string(read_result.load()));
    {
      std::lock_guard<std::mutex> lock(mu);
      go = true;
    }
    cv.notify_one();
    waiter.join();
    if (seen_in_cv_thread != want) fail("the waiting thread sees " + capability_names(seen_in_cv_thread));
    stop = true;
    sleeper.join();
    // A thread started afterwards inherits the reduced sets.
    uint64_t later = ~0ull;
    std::thread([&] {
      auto s = thread_capabilities();
      later = s ? s->permitted : ~0ull;
    }).join();
    if (later != want) fail("a new thread has " + capability_names(later));
    // Gone means gone: raising a dropped capability fails.
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, kCapSysAdmin, 0, 0) == 0) fail("raised cap_sys_admin again");
    _exit(0);
  }
  close(report[1]);
  std::string why;
  char buf[512];
  ssize_t n;
  while ((n = read(report[0], buf, sizeof buf)) > 0) why.append(buf, static_cast<size_t>(n));
  close(report[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << why;
}

}  // namespace
}  // namespace tcpscope
