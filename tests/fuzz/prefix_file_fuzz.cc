// libFuzzer target: the ASN prefix-file parser (CAIDA pfx2as / iptoasn TSV,
// plain or gzip) through AsnDatabase::load, reading the input from a memfd as
// the daemon reads a file. Any bytes give a database or one error line that
// names the file; a database answers lookups consistently with prefixes_of().
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "enrich/asn_db.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "prefix_file_fuzz: %s\n", why.c_str());
  std::abort();
}

int input_fd() {
  static const int fd = memfd_create("prefix_file_fuzz", MFD_CLOEXEC);
  if (fd < 0) fail("memfd_create failed");
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = input_fd();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) fail("writing the memfd");
  tcpscope::AsnConfig cfg;
  cfg.prefix_file = "/proc/self/fd/" + std::to_string(fd);
  std::string error;
  auto db = tcpscope::AsnDatabase::load(cfg, &error);
  if (!db) {
    if (error.empty()) fail("load failed without a message");
    if (error.rfind(cfg.prefix_file, 0) != 0) fail("error does not name the file: " + error);
    if (error.find('\n') != std::string::npos) fail("error is more than one line: " + error);
    return 0;
  }
  // Lookups agree with prefixes_of(): the first address of every prefix
  // listed for an AS looks up as that AS.
  int checked = 0;
  for (const char* text : {"0.0.0.0", "10.1.2.3", "192.0.2.1", "255.255.255.255", "::", "2001:db8::1",
                           "::ffff:10.1.2.3", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}) {
    const auto addr = tcpscope::IpAddr::parse(text);
    if (!addr) fail(std::string("test address ") + text);
    const tcpscope::AsnInfo info = db->lookup(*addr);
    if (info.asn != db->lookup_asn(*addr)) fail(std::string("lookup and lookup_asn disagree at ") + text);
    if (info.asn == 0 || checked++ > 2) continue;
    for (const auto& p : db->prefixes_of(info.asn)) {
      if (db->lookup_asn(p.addr) != info.asn)
        fail("prefixes_of(" + std::to_string(info.asn) + ") lists " + p.to_string() + " which looks up as " +
             std::to_string(db->lookup_asn(p.addr)));
    }
  }
  return 0;
}
