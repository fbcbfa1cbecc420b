#include "enrich/asn_db.h"

#include "../ip_text.h"
#include "../temp_dir.h"

#include <gtest/gtest.h>
#include <maxminddb.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tcpscope {
namespace {

const std::string kData = std::string(TCPSCOPE_TEST_DATA) + "/asn";

std::vector<std::string> strings(const std::vector<Prefix>& ps) {
  std::vector<std::string> out;
  for (const Prefix& p : ps) out.push_back(p.to_string());
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::shared_ptr<const AsnDatabase> load(const std::string& mmdb, const std::string& prefix_file,
                                        std::string* error) {
  AsnConfig cfg;
  cfg.mmdb = mmdb;
  cfg.prefix_file = prefix_file;
  return AsnDatabase::load(cfg, error);
}

std::shared_ptr<const AsnDatabase> load_ok(const std::string& mmdb, const std::string& prefix_file) {
  std::string error;
  auto db = load(mmdb, prefix_file, &error);
  EXPECT_NE(db, nullptr) << error;
  EXPECT_EQ(error, "");
  return db;
}

std::string load_error(const std::string& mmdb, const std::string& prefix_file) {
  std::string error;
  auto db = load(mmdb, prefix_file, &error);
  EXPECT_EQ(db, nullptr) << "loaded although it should not: " << (db ? db->describe() : "");
  return error;
}

// --- range_to_cidrs --------------------------------------------------------------

TEST(AsnRangeToCidrs, AlignedRangeIsOnePrefix) {
  EXPECT_EQ(strings(range_to_cidrs(ip("1.0.0.0"), ip("1.0.0.255"))), std::vector<std::string>{"1.0.0.0/24"});
  EXPECT_EQ(strings(range_to_cidrs(ip("0.0.0.0"), ip("255.255.255.255"))), std::vector<std::string>{"0.0.0.0/0"});
  EXPECT_EQ(strings(range_to_cidrs(ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))),
            std::vector<std::string>{"::/0"});
  EXPECT_EQ(strings(range_to_cidrs(ip("192.0.2.7"), ip("192.0.2.7"))), std::vector<std::string>{"192.0.2.7/32"});
  EXPECT_EQ(strings(range_to_cidrs(ip("2001:db8::"), ip("2001:db8::ffff:ffff"))),
            std::vector<std::string>{"2001:db8::/96"});
}

TEST(AsnRangeToCidrs, UnalignedRangeIsSplitMinimally) {
  EXPECT_EQ(strings(range_to_cidrs(ip("1.0.0.1"), ip("1.0.0.6"))),
            (std::vector<std::string>{"1.0.0.1/32", "1.0.0.2/31", "1.0.0.4/31", "1.0.0.6/32"}));
  EXPECT_EQ(strings(range_to_cidrs(ip("255.255.255.254"), ip("255.255.255.255"))),
            std::vector<std::string>{"255.255.255.254/31"});
  EXPECT_EQ(strings(range_to_cidrs(ip("::1"), ip("::3"))), (std::vector<std::string>{"::1/128", "::2/127"}));
}

TEST(AsnRangeToCidrs, InvalidRangesGiveNothing) {
  EXPECT_TRUE(range_to_cidrs(ip("1.0.0.6"), ip("1.0.0.1")).empty());
  EXPECT_TRUE(range_to_cidrs(ip("1.0.0.1"), ip("::1")).empty());
  EXPECT_TRUE(range_to_cidrs(IpAddr{}, IpAddr{}).empty());
}

TEST(AsnRangeToCidrs, RandomRangesAreCoveredExactlyAndMinimally) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    uint64_t a = rng() & 0xffffffff, b = rng() & 0xffffffff;
    if (i % 2) b = a + (rng() % 5000);  // short ranges, many small blocks at both ends
    if (b > 0xffffffff) b = 0xffffffff;
    if (a > b) std::swap(a, b);
    auto addr = [](uint64_t v) {
      const uint8_t bytes[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
      return IpAddr::v4(bytes);
    };
    const std::vector<Prefix> cidrs = range_to_cidrs(addr(a), addr(b));
    ASSERT_FALSE(cidrs.empty());
    uint64_t next = a;
    for (size_t k = 0; k < cidrs.size(); ++k) {
      const Prefix& p = cidrs[k];
      const uint64_t start = (uint64_t(p.addr.bytes[0]) << 24) | (p.addr.bytes[1] << 16) |
                             (p.addr.bytes[2] << 8) | p.addr.bytes[3];
      const uint64_t size = uint64_t(1) << (32 - p.len);
      ASSERT_EQ(start, next) << "gap or overlap at " << p.to_string();
      ASSERT_EQ(start % size, 0u) << "unaligned " << p.to_string();
      // Minimal: no two neighbours are the halves of one block.
      if (k > 0 && cidrs[k - 1].len == p.len) {
        ASSERT_FALSE(start % (2 * size) == size) << "mergeable " << cidrs[k - 1].to_string() << " "
                                                 << p.to_string();
      }
      next = start + size;
    }
    ASSERT_EQ(next, b + 1);
  }
}

// --- prefix files ------------------------------------------------------------------

TEST(AsnPrefixFile, Pfx2asSample) {
  auto db = load_ok("", kData + "/pfx2as_sample.tsv");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("1.0.0.77")), 13335u);
  EXPECT_EQ(db->lookup(ip("1.0.0.77")).org, "");  // pfx2as has no names
  EXPECT_EQ(db->lookup_asn(ip("8.8.8.8")), 15169u);  // longest match inside 8/8
  EXPECT_EQ(db->lookup_asn(ip("8.8.9.9")), 3356u);
  EXPECT_EQ(db->lookup_asn(ip("64.63.0.1")), 64500u);  // multi-origin: first
  EXPECT_EQ(db->lookup_asn(ip("65.0.200.1")), 64502u);  // AS set: first
  EXPECT_EQ(db->lookup_asn(ip("66.1.1.1")), 0u);        // AS 0 lines are skipped
  EXPECT_EQ(db->lookup_asn(ip("2001:db8:ffff::1")), 64496u);  // the CRLF line
  EXPECT_EQ(db->lookup_asn(ip("2001:db8:1::1")), 64497u);
  EXPECT_EQ(db->lookup_asn(ip("::ffff:8.8.8.8")), 15169u);
  EXPECT_EQ(db->lookup_asn(ip("9.9.9.9")), 0u);
  EXPECT_EQ(db->prefix_count(), 7u);
  EXPECT_EQ(db->describe(), "prefix file: 7 prefixes");
}

TEST(AsnPrefixFile, IptoasnSample) {
  auto db = load_ok("", kData + "/iptoasn_sample.tsv");
  ASSERT_NE(db, nullptr);
  const AsnInfo cf = db->lookup(ip("1.0.0.200"));
  EXPECT_EQ(cf.asn, 13335u);
  EXPECT_EQ(cf.org, "CLOUDFLARENET");
  EXPECT_EQ(db->lookup(ip("1.0.1.1")).org, "Example Range Org, Pty");
  EXPECT_EQ(db->lookup_asn(ip("1.0.1.6")), 64510u);
  EXPECT_EQ(db->lookup_asn(ip("1.0.1.0")), 0u);  // just outside the range
  EXPECT_EQ(db->lookup_asn(ip("1.0.1.7")), 0u);
  EXPECT_EQ(db->lookup_asn(ip("1.0.2.5")), 0u);  // "Not routed"
  EXPECT_EQ(db->lookup(ip("2001:db8:1ab::1")).org, "Example v6 Org");
  EXPECT_EQ(db->lookup_asn(ip("2001:db8:200::")), 0u);
  // 1 + 4 (1.0.1.1-6) + 1 (the IPv6 /40) CIDRs.
  EXPECT_EQ(db->prefix_count(), 6u);
  EXPECT_EQ(strings(db->prefixes_of(64510)), (std::vector<std::string>{"1.0.1.1/32", "1.0.1.2/31",
                                                                        "1.0.1.4/31", "1.0.1.6/32"}));
  EXPECT_EQ(strings(db->prefixes_of(64511)), std::vector<std::string>{"2001:db8:100::/40"});
}

TEST(AsnPrefixFile, BothFormatsMayShareAFile) {
  TempDir dir;
  const std::string path = dir.write("mixed.tsv",
                                     "10.0.0.0\t8\t64500\n"
                                     "10.1.0.0\t10.1.255.255\t64501\tZZ\tInner\n");
  auto db = load_ok("", path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("10.2.0.1")), 64500u);
  EXPECT_EQ(db->lookup(ip("10.1.0.1")).org, "Inner");
}

TEST(AsnPrefixFile, RangeOfV4MappedAddressesAnswersIPv4Lookups) {
  // Found by the prefix-file fuzzer: the range's ::ffff:0:0/100 block went
  // into the IPv6 trie, where no lookup (all unmapped to IPv4) could reach it.
  TempDir dir;
  const std::string path = dir.write("mapped.tsv", "::ffff:10.0.0.0\t::ffff:10.0.255.255\t64502\tZZ\tMapped\n");
  auto db = load_ok("", path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("10.0.3.4")), 64502u);
  EXPECT_EQ(db->lookup_asn(ip("::ffff:10.0.3.4")), 64502u);
  EXPECT_EQ(db->lookup_asn(ip("10.1.0.0")), 0u);
  EXPECT_EQ(strings(db->prefixes_of(64502)), std::vector<std::string>{"10.0.0.0/16"});

  // A wider range reaching past ::ffff:0:0/96, with a narrower one of another
  // AS below it: the IPv6 trie then holds a region that is exactly the
  // mapped block, which no lookup reaches; it is not one of the AS's prefixes.
  const std::string wide = dir.write("wide.tsv",
                                     "::\t::1:0:0:0\t64503\tZZ\tWide\n"
                                     "::\t::ffff:dff:ffff\t64504\tZZ\tNarrow\n");
  db = load_ok("", wide);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("::ffff:1.2.3.4")), 64504u);
  for (const auto& p : db->prefixes_of(64503))
    EXPECT_EQ(db->lookup_asn(p.addr), 64503u) << p.to_string() << " is listed for 64503";
}

TEST(AsnPrefixFile, LastLineWithoutNewlineAndLongLines) {
  TempDir dir;
  const std::string org(6000, 'x');  // longer than one read buffer
  const std::string path = dir.write("long.tsv", "192.0.2.0\t192.0.2.255\t64499\tUS\t" + org +
                                                     "\n198.51.100.0\t24\t64498");
  auto db = load_ok("", path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup(ip("192.0.2.9")).org, org);
  EXPECT_EQ(db->lookup_asn(ip("198.51.100.9")), 64498u);
}

TEST(AsnPrefixFile, GzipCompressed) {
  TempDir dir;
  const std::string plain = read_bytes(kData + "/pfx2as_sample.tsv");
  const std::string gz = dir.file("pfx2as.tsv.gz");
  gzFile out = gzopen(gz.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, plain.data(), unsigned(plain.size())), int(plain.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
  ASSERT_NE(read_bytes(gz).substr(0, 2), plain.substr(0, 2));  // really compressed

  auto db = load_ok("", gz);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("8.8.8.8")), 15169u);
  EXPECT_EQ(db->prefix_count(), 7u);

  // Cut inside the deflate stream: an error, not a silently shorter table.
  const std::string bytes = read_bytes(gz);
  const std::string cut = dir.write("cut.tsv.gz", bytes.substr(0, bytes.size() / 2));
  const std::string error = load_error("", cut);
  EXPECT_NE(error.find("cut.tsv.gz"), std::string::npos) << error;
  EXPECT_NE(error.find("unexpected end of file"), std::string::npos) << error;
}

// 256 MiB of one line, 250 KiB compressed: refused at the line limit, not
// read whole into memory.
TEST(AsnPrefixFile, GzipBombOfOneLineIsRefusedAtTheLineLimit) {
  TempDir dir;
  const std::string gz = dir.file("bomb.tsv.gz");
  gzFile out = gzopen(gz.c_str(), "wb9");
  ASSERT_NE(out, nullptr);
  const std::string chunk(1 << 20, 'a');
  for (int i = 0; i < 256; ++i) ASSERT_EQ(gzwrite(out, chunk.data(), unsigned(chunk.size())), int(chunk.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
  const std::string error = load_error("", gz);
  EXPECT_EQ(error, gz + ":1: line longer than 65536 bytes (not a prefix file?)");
}

struct BadLine {
  const char* content;
  const char* message;  // expected after "bad.tsv:LINE: "
};

TEST(AsnPrefixFile, MalformedLinesNameFileAndLine) {
  const BadLine cases[] = {
      {"1.0.0.0\t40x\t13335", "bad prefix length '40x'"},
      {"1.0.0.0\t33\t13335", "bad prefix length '33'"},
      {"2001:db8::\t129\t13335", "bad prefix length '129'"},
      {"1.0.0\t24\t13335", "bad prefix '1.0.0' (not an IPv4 or IPv6 address)"},
      {"1.0.0.0\t24\tAS13335", "bad AS number 'AS13335'"},
      {"1.0.0.0\t24\t4294967296", "bad AS number '4294967296'"},
      {"1.0.0.0\t24\t64500_x", "bad AS number '64500_x'"},
      {"1.0.0.0\t24\t{64500,64501", "bad AS number '{64500,64501'"},
      {"1.0.0.0\t24\t", "bad AS number ''"},
      {"1.0.0.1\t24\t13335", "host bits set in 1.0.0.1/24"},
      {"1.0.0.0 24 13335", "expected 3 tab-separated fields (pfx2as: prefix, length, AS) or 5 "
                           "(iptoasn: range_start, range_end, AS, country, org), found 1"},
      {"1.0.0.0\t1.0.0.9\t13335\tUS", "expected 3 tab-separated fields (pfx2as: prefix, length, AS) "
                                      "or 5 (iptoasn: range_start, range_end, AS, country, org), found 4"},
      {"1.0.0.9\t1.0.0.0\t13335\tUS\tX", "range start 1.0.0.9 is after range end 1.0.0.0"},
      {"1.0.0.0\t::1\t13335\tUS\tX", "range 1.0.0.0 - ::1 mixes IPv4 and IPv6"},
      {"1.0.0.0\tnope\t13335\tUS\tX", "bad range end 'nope' (not an IPv4 or IPv6 address)"},
      {"1.0.0.0\t1.0.0.9\t-1\tUS\tX", "bad AS number '-1'"},
  };
  TempDir dir;
  for (const BadLine& c : cases) {
    // Two good lines, a comment and a blank line first: the bad one is line 5.
    const std::string path =
        dir.write("bad.tsv", "# header\n192.0.2.0\t24\t64496\n\n198.51.100.0\t24\t64497\n" +
                                 std::string(c.content) + "\n203.0.113.0\t24\t64498\n");
    EXPECT_EQ(load_error("", path), path + ":5: " + c.message) << c.content;
  }
}

TEST(AsnPrefixFile, MissingFile) {
  EXPECT_EQ(load_error("", "/nonexistent/pfx2as.tsv"), "/nonexistent/pfx2as.tsv: cannot open: No such file or directory");
}

TEST(AsnPrefixFile, EmptyConfigGivesEmptyDatabase) {
  auto db = load_ok("", "");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("8.8.8.8")), 0u);
  EXPECT_EQ(db->prefix_count(), 0u);
  EXPECT_EQ(db->describe(), "no ASN data");
  EXPECT_TRUE(db->prefixes_of(13335).empty());
}

TEST(AsnPrefixFile, PrefixesOfCutsOutOtherAsesAndMergesSiblings) {
  TempDir dir;
  const std::string path = dir.write("nested.tsv",
                                     "10.0.0.0\t8\t64500\n"
                                     "10.0.0.0\t10\t64501\n"     // hole at the start
                                     "10.128.0.0\t9\t64500\n"    // same AS nested: no hole
                                     "10.200.0.0\t16\t64500\n"   // idem
                                     "fd00::\t8\t64500\n"
                                     "fd00::\t9\t64502\n");
  auto db = load_ok("", path);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(strings(db->prefixes_of(64500)),
            (std::vector<std::string>{"10.64.0.0/10", "10.128.0.0/9", "fd80::/9"}));
  EXPECT_EQ(strings(db->prefixes_of(64501)), std::vector<std::string>{"10.0.0.0/10"});
  EXPECT_TRUE(db->prefixes_of(64999).empty());
  EXPECT_TRUE(db->prefixes_of(0).empty());
}

// --- MaxMind DB --------------------------------------------------------------------

// Networks for the generated test databases: network, AS, organisation.
// 8.8.8.0/24 inside 8.0.0.0/8 makes the writer split the /8 around it.
const char kNetworks[] =
    "1.0.0.0/24\t13335\tCLOUDFLARENET\n"
    "8.0.0.0/8\t3356\tLEVEL3\n"
    "8.8.8.0/24\t15169\tGOOGLE\n"
    "198.51.100.0/24\t64500\tExample Org, Inc.\n"
    "2606:4700::/32\t13335\tCLOUDFLARENET\n"
    "2a00:1450::/29\t15169\tGOOGLE\n";
const char kNetworksV4Only[] =
    "1.0.0.0/24\t13335\tCLOUDFLARENET\n"
    "8.0.0.0/8\t3356\tLEVEL3\n"
    "8.8.8.0/24\t15169\tGOOGLE\n";

class AsnMmdb : public ::testing::Test {
 protected:
  void SetUp() override {
    static const bool have_writer = std::system("perl -MMaxMind::DB::Writer::Tree -e 1 >/dev/null 2>&1") == 0;
    if (!have_writer) {
      GTEST_SKIP() << "perl with MaxMind::DB::Writer::Tree (libmaxmind-db-writer-perl) is not installed; "
                      "cannot build test MaxMind DB files";
    }
  }
  static void TearDownTestSuite() {
    built_.clear();
    generated_.reset();
  }

  // Writes `networks` and runs the generator; returns the .mmdb path. The
  // writer takes most of a second to start, so each distinct database is
  // built once per test suite (tests only read them).
  std::string make_mmdb(const std::string& name, const std::string& networks, const std::string& options) {
    if (!generated_) generated_ = std::make_unique<TempDir>();
    const std::string key = name + "\n" + options + "\n" + networks;
    auto it = built_.find(key);
    if (it != built_.end()) return it->second;
    const std::string tsv = generated_->write(name + ".tsv", networks);
    const std::string out = generated_->file(name + ".mmdb");
    const std::string cmd = "perl '" + kData + "/make_test_mmdb.pl' --input '" + tsv + "' --output '" + out +
                            "' " + options;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    built_[key] = out;
    return out;
  }

  TempDir dir_;  // per test, for damaged copies
  static std::unique_ptr<TempDir> generated_;
  static std::map<std::string, std::string> built_;
};

std::unique_ptr<TempDir> AsnMmdb::generated_;
std::map<std::string, std::string> AsnMmdb::built_;

TEST_F(AsnMmdb, GeoLite2Lookups) {
  auto db = load_ok(make_mmdb("geolite", kNetworks, ""), "");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("1.0.0.1")), 13335u);
  EXPECT_EQ(db->lookup(ip("1.0.0.1")).org, "CLOUDFLARENET");
  EXPECT_EQ(db->lookup_asn(ip("8.8.8.8")), 15169u);
  EXPECT_EQ(db->lookup(ip("8.8.8.8")).org, "GOOGLE");
  EXPECT_EQ(db->lookup_asn(ip("8.8.9.1")), 3356u);
  EXPECT_EQ(db->lookup_asn(ip("8.255.255.255")), 3356u);
  EXPECT_EQ(db->lookup(ip("198.51.100.20")).org, "Example Org, Inc.");
  EXPECT_EQ(db->lookup_asn(ip("2606:4700::1111")), 13335u);
  EXPECT_EQ(db->lookup_asn(ip("2a00:1457:ffff::1")), 15169u);
  EXPECT_EQ(db->lookup_asn(ip("2a00:1458::1")), 0u);  // just past the /29
  // IPv4-mapped, and the ranges the writer aliases to IPv4 (6to4, Teredo).
  EXPECT_EQ(db->lookup_asn(ip("::ffff:8.8.8.8")), 15169u);
  EXPECT_EQ(db->lookup_asn(ip("2002:808:808::1")), 15169u);
  EXPECT_EQ(db->lookup_asn(ip("2001:0:808:808::1")), 15169u);
  // Unknown.
  const AsnInfo none = db->lookup(ip("5.5.5.5"));
  EXPECT_EQ(none.asn, 0u);
  EXPECT_EQ(none.org, "");
  EXPECT_EQ(db->lookup_asn(ip("2c0f::1")), 0u);
  EXPECT_EQ(db->lookup_asn(IpAddr{}), 0u);

  const std::string d = db->describe();
  EXPECT_EQ(d.rfind("mmdb GeoLite2-ASN 20", 0), 0u) << d;
  EXPECT_NE(d.find(std::to_string(db->prefix_count()) + " networks"), std::string::npos) << d;
}

TEST_F(AsnMmdb, NonAsciiOrganisationsAreTheirUtf8) {
  const std::string telefonica = "Telef\xC3\xB3nica de Espa\xC3\xB1" "a";
  const std::string china_telecom = "\xE4\xB8\xAD\xE5\x9B\xBD\xE7\x94\xB5\xE4\xBF\xA1";
  const std::string turk_telekom = "T\xC3\xBCrk Telekom";
  for (const char* flavor : {"", "--flavor ipinfo"}) {
    auto db = load_ok(make_mmdb(*flavor ? "utf8-ipinfo" : "utf8-maxmind",
                                "80.58.0.0/16\t3352\t" + telefonica + "\n202.96.0.0/16\t4134\t" + china_telecom +
                                    "\n2a02:b000::/24\t9121\t" + turk_telekom + "\n",
                                flavor),
                      "");
    ASSERT_NE(db, nullptr);
    EXPECT_EQ(db->lookup(ip("80.58.1.1")).org, telefonica) << flavor;
    EXPECT_EQ(db->lookup(ip("202.96.1.1")).org, china_telecom) << flavor;
    EXPECT_EQ(db->lookup(ip("2a02:b000::1")).org, turk_telekom) << flavor;
  }
}

TEST_F(AsnMmdb, PrefixesOfCoverExactlyWhatLookupReturns) {
  auto db = load_ok(make_mmdb("geolite", kNetworks, ""), "");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(strings(db->prefixes_of(13335)), (std::vector<std::string>{"1.0.0.0/24", "2606:4700::/32"}));
  EXPECT_EQ(strings(db->prefixes_of(15169)), (std::vector<std::string>{"8.8.8.0/24", "2a00:1450::/29"}));
  // The writer split 8.0.0.0/8 around 8.8.8.0/24: 3356 gets the rest of the /8.
  const std::vector<Prefix> level3 = db->prefixes_of(3356);
  uint64_t addresses = 0;
  for (const Prefix& p : level3) {
    ASSERT_EQ(p.addr.family, 4);
    EXPECT_EQ(p.addr.bytes[0], 8) << p.to_string();
    addresses += uint64_t(1) << (32 - p.len);
    EXPECT_EQ(db->lookup_asn(p.addr), 3356u) << p.to_string();
  }
  EXPECT_EQ(addresses, (uint64_t(1) << 24) - 256);
  EXPECT_EQ(level3.size(), 16u);  // a /8 minus a /24 takes one prefix per level in between
}

TEST_F(AsnMmdb, IpinfoSpelling) {
  auto db = load_ok(make_mmdb("ipinfo", kNetworks, "--flavor ipinfo"), "");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("1.0.0.1")), 13335u);
  EXPECT_EQ(db->lookup(ip("8.8.8.8")).org, "GOOGLE");
  EXPECT_EQ(db->lookup(ip("198.51.100.1")).org, "Example Org, Inc.");
  EXPECT_EQ(db->lookup_asn(ip("2a00:1450::1")), 15169u);
  EXPECT_EQ(db->describe().rfind("mmdb ipinfo asn.mmdb 20", 0), 0u) << db->describe();
}

TEST_F(AsnMmdb, IPv4OnlyDatabase) {
  auto db = load_ok(make_mmdb("v4", kNetworksV4Only, "--ip-version 4"), "");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("8.8.8.8")), 15169u);
  EXPECT_EQ(db->lookup_asn(ip("8.8.4.4")), 3356u);
  EXPECT_EQ(db->lookup_asn(ip("::ffff:1.0.0.1")), 13335u);
  EXPECT_EQ(db->lookup_asn(ip("2606:4700::1")), 0u);
}

TEST_F(AsnMmdb, UnaliasedIPv6Database) {
  auto db = load_ok(make_mmdb("noalias", kNetworks, "--no-alias"), "");
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("8.8.8.8")), 15169u);
  EXPECT_EQ(db->lookup_asn(ip("::ffff:8.8.8.8")), 15169u);  // folded by us, not by the file
  EXPECT_EQ(db->lookup_asn(ip("2002:808:808::1")), 0u);     // no 6to4 alias in this file
}

TEST_F(AsnMmdb, AliasesAreNotCopiedTwice) {
  auto aliased = load_ok(make_mmdb("geolite", kNetworks, ""), "");
  auto plain = load_ok(make_mmdb("noalias", kNetworks, "--no-alias"), "");
  ASSERT_NE(aliased, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(aliased->prefix_count(), plain->prefix_count());
  EXPECT_EQ(strings(aliased->prefixes_of(15169)), strings(plain->prefixes_of(15169)));
}

// Every address we answer for must get libmaxminddb's own answer.
TEST_F(AsnMmdb, AgreesWithLibmaxminddb) {
  const std::string path = make_mmdb("geolite", kNetworks, "");
  auto db = load_ok(path, "");
  ASSERT_NE(db, nullptr);
  MMDB_s mmdb;
  ASSERT_EQ(MMDB_open(path.c_str(), MMDB_MODE_MMAP, &mmdb), MMDB_SUCCESS);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  const char* bases[] = {"8.8.8.0", "8.0.0.0", "1.0.0.0", "198.51.100.0", "::ffff:8.8.0.0", "2606:4700::",
                         "2a00:1450::", "2002:808:800::", "2001:0:808:800::", "2002:100::", "::"};
  const int keep_bits[] = {20, 6, 22, 22, 110, 30, 27, 38, 54, 22, 0};
  size_t known = 0;
  for (int i = 0; i < 20000; ++i) {
    const int which = i % int(std::size(bases));
    IpAddr a = ip(bases[which]);
    for (int bit = keep_bits[which]; bit < a.bit_length(); ++bit) {
      if (byte(rng) & 1) a.bytes[bit >> 3] ^= uint8_t(0x80 >> (bit & 7));
    }
    const std::string text = a.to_string();
    int gai = 0, err = 0;
    MMDB_lookup_result_s r = MMDB_lookup_string(&mmdb, text.c_str(), &gai, &err);
    ASSERT_EQ(gai, 0);
    ASSERT_EQ(err, MMDB_SUCCESS);
    uint32_t want = 0;
    if (r.found_entry) {
      MMDB_entry_data_s data;
      ASSERT_EQ(MMDB_get_value(&r.entry, &data, "autonomous_system_number", nullptr), MMDB_SUCCESS);
      want = data.uint32;
      ++known;
    }
    ASSERT_EQ(db->lookup_asn(a), want) << text;
  }
  MMDB_close(&mmdb);
  EXPECT_GT(known, 5000u);  // most probes fall inside the networks
}

TEST_F(AsnMmdb, PrefixFileWinsOnlyAtEqualOrLongerLength) {
  const std::string mmdb = make_mmdb("geolite", kNetworks, "");
  TempDir dir;
  const std::string pfx = dir.write("own.tsv",
                                    "1.0.0.0\t24\t64999\n"        // same prefix as the mmdb: file wins
                                    "198.51.100.0\t25\t64998\n"   // more specific: file wins there
                                    "2606::\t16\t64997\n");       // less specific: mmdb wins inside /32
  auto db = load_ok(mmdb, pfx);
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(db->lookup_asn(ip("1.0.0.1")), 64999u);
  EXPECT_EQ(db->lookup_asn(ip("198.51.100.1")), 64998u);
  EXPECT_EQ(db->lookup_asn(ip("198.51.100.200")), 64500u);
  EXPECT_EQ(db->lookup_asn(ip("2606:4700::1")), 13335u);
  EXPECT_EQ(db->lookup_asn(ip("2606:4800::1")), 64997u);
  const std::string d = db->describe();
  EXPECT_NE(d.find("mmdb GeoLite2-ASN"), std::string::npos) << d;
  EXPECT_NE(d.find("; prefix file: 3 prefixes"), std::string::npos) << d;
}

TEST_F(AsnMmdb, DatabaseWithoutAsnFields) {
  const std::string path = make_mmdb("other", kNetworks, "--flavor noasn");
  const std::string error = load_error(path, "");
  EXPECT_NE(error.find(path + ": database type 'Test-Networks' has no autonomous_system_number or asn field"),
            std::string::npos)
      << error;
}

TEST_F(AsnMmdb, TruncatedFile) {
  const std::string bytes = read_bytes(make_mmdb("geolite", kNetworks, ""));
  const std::string cut = dir_.write("GeoLite2-ASN.mmdb", bytes.substr(0, bytes.size() / 2));
  EXPECT_EQ(load_error(cut, ""), cut + ": not a MaxMind DB file (MMDB_INVALID_METADATA_ERROR)");
}

TEST_F(AsnMmdb, GarbageAndEmptyFiles) {
  std::mt19937 rng(9);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = char(rng());
  const std::string g = dir_.write("garbage.mmdb", garbage);
  EXPECT_EQ(load_error(g, ""), g + ": not a MaxMind DB file (MMDB_INVALID_METADATA_ERROR)");
  const std::string e = dir_.write("empty.mmdb", "");
  EXPECT_NE(load_error(e, "").find(e + ": "), std::string::npos);
  EXPECT_EQ(load_error("/nonexistent/GeoLite2-ASN.mmdb", ""),
            "/nonexistent/GeoLite2-ASN.mmdb: cannot open: No such file or directory");
}

// A file whose metadata is intact but whose search tree points outside itself.
TEST_F(AsnMmdb, CorruptSearchTree) {
  const std::string good = read_bytes(make_mmdb("geolite", kNetworks, ""));
  std::string bad = good;
  for (size_t i = 0; i < 6 * 40; ++i) bad[i] = char(0xff);  // 40 nodes of 24-bit records
  const std::string path = dir_.write("bad-tree.mmdb", bad);
  const std::string error = load_error(path, "");
  EXPECT_NE(error.find(path + ": corrupt search tree"), std::string::npos) << error;
}

// Node 0's left record pointing back at node 0: an endless path, which the
// walk must cut off (depth > 128 bits or too many node visits).
TEST_F(AsnMmdb, SelfReferencingNodeIsAnError) {
  std::string bad = read_bytes(make_mmdb("geolite", kNetworks, ""));
  bad[0] = bad[1] = bad[2] = 0;  // 24-bit left record of node 0 := node 0
  const std::string path = dir_.write("loop.mmdb", bad);
  const std::string error = load_error(path, "");
  EXPECT_EQ(error.rfind(path + ": corrupt search tree (", 0), 0u) << error;
}

// Random damage anywhere in the tree and data sections: load succeeds or
// fails with a message, but never crashes or hangs.
TEST_F(AsnMmdb, RandomCorruptionNeverCrashes) {
  const std::string good = read_bytes(make_mmdb("geolite", kNetworks, ""));
  const size_t metadata = good.rfind("\xab\xcd\xefMaxMind.com");
  ASSERT_NE(metadata, std::string::npos);
  std::mt19937 rng(13);
  int failed = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bad = good;
    // Mostly the tree and data sections; every fourth file the metadata too.
    const size_t range = i % 4 == 3 ? good.size() : metadata;
    for (int k = 0; k < 1 + i % 8; ++k) bad[rng() % range] = char(rng());
    const std::string path = dir_.write("fuzz.mmdb", bad);
    std::string error;
    auto db = load(path, "", &error);
    if (db == nullptr) {
      ++failed;
      EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
    } else {
      db->lookup_asn(ip("8.8.8.8"));
      db->prefixes_of(3356);
    }
  }
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace tcpscope
