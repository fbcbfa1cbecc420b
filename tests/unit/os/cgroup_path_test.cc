#include "os/cgroup_path.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace tcpscope {
namespace {

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/tcpscope-mountinfo-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(Cgroup2MountPoint, HybridHierarchy) {
  auto p = write_temp(
      "25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw\n"
      "33 25 0:28 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755\n"
      "34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
      "35 33 0:30 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n");
  EXPECT_EQ(cgroup2_mount_point(p), "/sys/fs/cgroup/unified");
  unlink(p.c_str());
}

TEST(Cgroup2MountPoint, UnifiedWithOptionalFieldsAndEscapes) {
  auto p = write_temp(
      "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 master:1 - cgroup2 cgroup2 rw\n"
      "90 29 0:26 /system.slice /mnt/a\\040b rw - cgroup2 cgroup2 rw\n");
  EXPECT_EQ(cgroup2_mount_point(p), "/sys/fs/cgroup");
  unlink(p.c_str());
}

TEST(Cgroup2MountPoint, NoneMounted) {
  auto p = write_temp("25 30 0:23 / /sys rw - sysfs sysfs rw\n");
  EXPECT_EQ(cgroup2_mount_point(p), "");
  unlink(p.c_str());
  EXPECT_EQ(cgroup2_mount_point("/nonexistent/mountinfo"), "");
}

TEST(Cgroup2MountPoint, ThisMachine) {
  std::string m = cgroup2_mount_point();
  if (m.empty()) GTEST_SKIP() << "no cgroup2 here";
  EXPECT_EQ(access((m + "/cgroup.procs").c_str(), R_OK), 0) << m;
}

}  // namespace
}  // namespace tcpscope
