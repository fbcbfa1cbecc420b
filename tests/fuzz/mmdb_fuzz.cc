// libFuzzer target: loading a MaxMind DB (GeoLite2-ASN / DB-IP / IPinfo
// layout) through AsnDatabase::load. libmaxminddb checks the file format;
// this exercises tcpscope's walk of the whole search tree (a tree that loops
// back on itself must not hang it) and the record decoding. Any bytes give a
// database or one error line naming the file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "enrich/asn_db.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "mmdb_fuzz: %s\n", why.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A fresh memfd each time: libmaxminddb maps the file, and a file that
  // shrinks under a mapping would fault.
  const int fd = memfd_create("mmdb_fuzz", MFD_CLOEXEC);
  if (fd < 0) fail("memfd_create failed");
  if (pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) fail("writing the memfd");
  tcpscope::AsnConfig cfg;
  cfg.mmdb = "/proc/self/fd/" + std::to_string(fd);
  std::string error;
  auto db = tcpscope::AsnDatabase::load(cfg, &error);
  close(fd);
  if (!db) {
    if (error.empty()) fail("load failed without a message");
    if (error.find("mmdb_fuzz") == std::string::npos && error.find(cfg.mmdb) == std::string::npos)
      fail("error does not name the file: " + error);
    if (error.find('\n') != std::string::npos) fail("error is more than one line: " + error);
    return 0;
  }
  for (const char* text : {"1.2.3.4", "198.18.0.1", "::1", "2001:db8::1", "::ffff:1.2.3.4", "2002:102:304::"}) {
    const auto addr = tcpscope::IpAddr::parse(text);
    if (!addr) fail(std::string("test address ") + text);
    if (db->lookup(*addr).asn != db->lookup_asn(*addr)) fail(std::string("lookup and lookup_asn disagree at ") + text);
  }
  db->describe();
  return 0;
}
