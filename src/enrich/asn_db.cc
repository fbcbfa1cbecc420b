#include "enrich/asn_db.h"

#include <maxminddb.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace tcpscope {

namespace {

using u128 = unsigned __int128;

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// --- addresses as integers, for range arithmetic -----------------------------

u128 to_u128(const IpAddr& a) {
  u128 v = 0;
  const int n = a.family == 4 ? 4 : 16;
  for (int i = 0; i < n; ++i) v = (v << 8) | a.bytes[i];
  return v;
}

IpAddr from_u128(u128 v, int family) {
  IpAddr a;
  a.family = uint8_t(family);
  const int n = family == 4 ? 4 : 16;
  for (int i = n - 1; i >= 0; --i) {
    a.bytes[i] = uint8_t(v);
    v >>= 8;
  }
  return a;
}

// 2^k - 1 without the undefined 1 << 128.
u128 block_span(int k) { return k >= 128 ? ~u128(0) : (u128(1) << k) - 1; }

int trailing_zeros(u128 v, int bits) {
  if (v == 0) return bits;
  const uint64_t lo = uint64_t(v);
  if (lo != 0) return __builtin_ctzll(lo);
  return 64 + __builtin_ctzll(uint64_t(v >> 64));
}

bool prefix_contains(const Prefix& p, const IpAddr& a) {
  if (p.addr.family != a.family) return false;
  const int whole = p.len / 8;
  if (std::memcmp(p.addr.bytes.data(), a.bytes.data(), whole) != 0) return false;
  const int rest = p.len % 8;
  if (rest == 0) return true;
  const uint8_t mask = uint8_t(0xff << (8 - rest));
  return (p.addr.bytes[whole] & mask) == (a.bytes[whole] & mask);
}

// --- text parsing helpers ------------------------------------------------------

bool parse_u32(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = uint32_t(v);
  return true;
}

// "64500", "64500_64501" (multi-origin) or "{64500,64501}" (AS set): the first AS.
bool parse_origin_as(std::string_view s, uint32_t* out) {
  if (!s.empty() && s.front() == '{') {
    if (s.back() != '}') return false;
    s = s.substr(1, s.size() - 2);
  }
  const size_t end = s.find_first_of("_,");
  if (end != std::string_view::npos) {
    // The rest must be ASes too, or the field is garbage rather than a set.
    uint32_t ignored;
    std::string_view rest = s.substr(end + 1);
    while (true) {
      const size_t next = rest.find_first_of("_,");
      if (!parse_u32(rest.substr(0, next), &ignored)) return false;
      if (next == std::string_view::npos) break;
      rest = rest.substr(next + 1);
    }
  }
  return parse_u32(s.substr(0, end), out);
}

// "AS13335", "as13335" or "13335".
bool parse_as_string(std::string_view s, uint32_t* out) {
  if (s.size() > 2 && (s[0] == 'A' || s[0] == 'a') && (s[1] == 'S' || s[1] == 's')) s.remove_prefix(2);
  return parse_u32(s, out);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string_view::npos ? tab : tab - start));
    if (tab == std::string_view::npos) return fields;
    start = tab + 1;
  }
}

// Text from the file, fit for a one-line log message: control characters
// (a newline in an MMDB string, an escape sequence) are shown as \xNN and
// long values cut. Found by tests/fuzz/mmdb_fuzz.
std::string printable(std::string_view s) {
  constexpr size_t kMaxEchoed = 64;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxEchoed; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxEchoed) out += "...";
  return out;
}

std::string quoted(std::string_view s) { return "'" + printable(s) + "'"; }

// --- libmaxminddb --------------------------------------------------------------

const char* mmdb_error_name(int code) {
  switch (code) {
    case MMDB_SUCCESS: return "MMDB_SUCCESS";
    case MMDB_FILE_OPEN_ERROR: return "MMDB_FILE_OPEN_ERROR";
    case MMDB_CORRUPT_SEARCH_TREE_ERROR: return "MMDB_CORRUPT_SEARCH_TREE_ERROR";
    case MMDB_INVALID_METADATA_ERROR: return "MMDB_INVALID_METADATA_ERROR";
    case MMDB_IO_ERROR: return "MMDB_IO_ERROR";
    case MMDB_OUT_OF_MEMORY_ERROR: return "MMDB_OUT_OF_MEMORY_ERROR";
    case MMDB_UNKNOWN_DATABASE_FORMAT_ERROR: return "MMDB_UNKNOWN_DATABASE_FORMAT_ERROR";
    case MMDB_INVALID_DATA_ERROR: return "MMDB_INVALID_DATA_ERROR";
    case MMDB_INVALID_LOOKUP_PATH_ERROR: return "MMDB_INVALID_LOOKUP_PATH_ERROR";
    case MMDB_LOOKUP_PATH_DOES_NOT_MATCH_DATA_ERROR: return "MMDB_LOOKUP_PATH_DOES_NOT_MATCH_DATA_ERROR";
    case MMDB_INVALID_NODE_NUMBER_ERROR: return "MMDB_INVALID_NODE_NUMBER_ERROR";
    case MMDB_IPV6_LOOKUP_IN_IPV4_DATABASE_ERROR: return "MMDB_IPV6_LOOKUP_IN_IPV4_DATABASE_ERROR";
  }
  return "unknown libmaxminddb error";
}

struct MmdbCloser {
  MMDB_s* db;
  ~MmdbCloser() { MMDB_close(db); }
};

// A network in the search tree: the first `depth` bits of (hi, lo).
struct TreePath {
  uint64_t hi = 0, lo = 0;
  int depth = 0;

  TreePath child(int bit) const {
    TreePath c = *this;
    if (bit) {
      if (depth < 64) c.hi |= 1ull << (63 - depth);
      else c.lo |= 1ull << (127 - depth);
    }
    c.depth = depth + 1;
    return c;
  }
  IpAddr v6() const {
    IpAddr a;
    a.family = 6;
    for (int i = 0; i < 8; ++i) a.bytes[i] = uint8_t(hi >> (56 - 8 * i));
    for (int i = 0; i < 8; ++i) a.bytes[8 + i] = uint8_t(lo >> (56 - 8 * i));
    return a;
  }
  // Bits 0..31 of the path, for an IPv4-only tree (depth <= 32).
  IpAddr v4_from_top() const { return from_u128(u128(hi >> 32), 4); }
  // Bits 96..127, for IPv4 data stored at ::/96 or ::ffff:0:0/96.
  IpAddr v4_from_low() const { return from_u128(u128(uint32_t(lo)), 4); }
  bool in_v4_subtree() const { return hi == 0 && (lo >> 32) == 0; }           // ::/96
  bool in_v4_mapped() const { return hi == 0 && (lo >> 32) == 0xffffull; }    // ::ffff:0:0/96
};

}  // namespace

// Accumulates networks from the sources into a new AsnDatabase.
class AsnDatabaseBuilder {
 public:
  AsnDatabaseBuilder() : db_(new AsnDatabase()) {}

  bool load_mmdb(const std::string& path, std::string* error);
  bool load_prefix_file(const std::string& path, std::string* error);
  std::shared_ptr<const AsnDatabase> finish() {
    db_->trie_.optimize();
    db_->records_.shrink_to_fit();
    return std::shared_ptr<const AsnDatabase>(db_.release());
  }

 private:
  uint32_t intern(uint32_t asn, std::string_view org) {
    key_.assign(reinterpret_cast<const char*>(&asn), sizeof asn);
    key_.append(org);
    auto it = interned_.find(key_);
    if (it != interned_.end()) return it->second;
    const uint32_t index = uint32_t(db_->records_.size());
    db_->records_.push_back(AsnInfo{asn, std::string(org)});
    interned_.emplace(key_, index);
    return index;
  }

  bool mmdb_record(MMDB_entry_s entry, const std::string& path, const IpAddr& addr, int len, uint32_t* record,
                   std::string* error);
  bool parse_line(std::string_view line, std::string* why);

  std::unique_ptr<AsnDatabase> db_;
  std::unordered_map<std::string, uint32_t> interned_;  // asn bytes + org -> record
  std::string key_;                                     // reused lookup key
  std::unordered_map<uint32_t, uint32_t> by_offset_;    // mmdb data offset -> record (kNone: no ASN)
  static constexpr uint32_t kNone = UINT32_MAX;
};

// Decodes the data record of network addr/len into *record (kNone when it
// carries no AS number).
bool AsnDatabaseBuilder::mmdb_record(MMDB_entry_s entry, const std::string& path, const IpAddr& addr, int len,
                                     uint32_t* record, std::string* error) {
  auto cached = by_offset_.find(entry.offset);
  if (cached != by_offset_.end()) {
    *record = cached->second;
    return true;
  }
  const std::string where = path + ": network " + addr.to_string() + "/" + std::to_string(len);
  // A missing key is "no such field", not corruption; anything else is.
  auto get = [&](const char* key, MMDB_entry_data_s* data) {
    const int rc = MMDB_get_value(&entry, data, key, nullptr);
    if (rc == MMDB_SUCCESS || rc == MMDB_LOOKUP_PATH_DOES_NOT_MATCH_DATA_ERROR) {
      if (rc != MMDB_SUCCESS) data->has_data = false;
      return true;
    }
    *error = where + ": bad data record at offset " + std::to_string(entry.offset) + " (" +
             mmdb_error_name(rc) + ")";
    return false;
  };

  uint32_t asn = 0;
  bool has_asn = false;
  MMDB_entry_data_s data;
  if (!get("autonomous_system_number", &data)) return false;
  if (data.has_data) {
    switch (data.type) {
      case MMDB_DATA_TYPE_UINT16: asn = data.uint16; has_asn = true; break;
      case MMDB_DATA_TYPE_UINT32: asn = data.uint32; has_asn = true; break;
      case MMDB_DATA_TYPE_UINT64: has_asn = data.uint64 <= UINT32_MAX; asn = uint32_t(data.uint64); break;
      case MMDB_DATA_TYPE_INT32: has_asn = data.int32 >= 0; asn = uint32_t(data.int32); break;
      case MMDB_DATA_TYPE_UTF8_STRING:
        has_asn = parse_as_string(std::string_view(data.utf8_string, data.data_size), &asn);
        break;
      default: break;
    }
    if (!has_asn) {
      *error = where + ": autonomous_system_number is not an AS number";
      return false;
    }
  } else {
    if (!get("asn", &data)) return false;
    if (data.has_data) {
      if (data.type == MMDB_DATA_TYPE_UTF8_STRING) {
        const std::string_view text(data.utf8_string, data.data_size);
        has_asn = parse_as_string(text, &asn);
        if (!has_asn) {
          *error = where + ": bad asn " + quoted(text) + " (expected \"AS<number>\")";
          return false;
        }
      } else if (data.type == MMDB_DATA_TYPE_UINT32) {
        asn = data.uint32;
        has_asn = true;
      } else if (data.type == MMDB_DATA_TYPE_UINT16) {
        asn = data.uint16;
        has_asn = true;
      }
    }
  }

  std::string_view org;
  if (!get("autonomous_system_organization", &data)) return false;
  if (!data.has_data && !get("as_name", &data)) return false;
  if (data.has_data && data.type == MMDB_DATA_TYPE_UTF8_STRING) org = std::string_view(data.utf8_string, data.data_size);

  *record = has_asn && asn != 0 ? intern(asn, org) : kNone;
  by_offset_.emplace(entry.offset, *record);
  return true;
}

bool AsnDatabaseBuilder::load_mmdb(const std::string& path, std::string* error) {
  // libmaxminddb reports an unreadable file only as MMDB_FILE_OPEN_ERROR;
  // open it once first to be able to say why.
  if (FILE* probe = std::fopen(path.c_str(), "rb")) {
    std::fclose(probe);
  } else {
    *error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }

  MMDB_s mmdb;
  const int rc = MMDB_open(path.c_str(), MMDB_MODE_MMAP, &mmdb);
  if (rc != MMDB_SUCCESS) {
    if (rc == MMDB_INVALID_METADATA_ERROR || rc == MMDB_UNKNOWN_DATABASE_FORMAT_ERROR) {
      *error = path + ": not a MaxMind DB file (" + mmdb_error_name(rc) + ")";
    } else if (rc == MMDB_IO_ERROR || rc == MMDB_FILE_OPEN_ERROR) {
      *error = path + ": " + MMDB_strerror(rc) + ": " + std::strerror(errno) + " (" + mmdb_error_name(rc) + ")";
    } else {
      *error = path + ": " + MMDB_strerror(rc) + " (" + mmdb_error_name(rc) + ")";
    }
    return false;
  }
  MmdbCloser closer{&mmdb};

  const MMDB_metadata_s& meta = mmdb.metadata;
  if (meta.ip_version != 4 && meta.ip_version != 6) {
    *error = path + ": unsupported ip_version " + std::to_string(meta.ip_version);
    return false;
  }
  const int tree_bits = meta.ip_version == 4 ? 32 : 128;
  const uint32_t node_count = meta.node_count;

  // The node holding ::/96 in an IPv6 tree. Writers make other IPv6 ranges
  // (::ffff:0:0/96, 2002::/16, 2001::/32) point to this same node; walking
  // those paths would copy the IPv4 data again under IPv6 names (and a
  // crafted file could loop), so they are recorded as aliases instead.
  uint32_t ipv4_start = AsnDatabaseBuilder::kNone;
  if (meta.ip_version == 6) {
    uint32_t node = 0;
    int depth = 0;
    for (; depth < 96; ++depth) {
      MMDB_search_node_s sn;
      if (MMDB_read_node(&mmdb, node, &sn) != MMDB_SUCCESS) break;
      if (sn.left_record_type != MMDB_RECORD_TYPE_SEARCH_NODE) break;
      node = uint32_t(sn.left_record);
    }
    if (depth == 96) ipv4_start = node;
  }

  // Every node of a tree is reached once (aliases aside); more visits mean
  // shared subtrees. Allow some, but bound the work a crafted file can cause.
  const uint64_t max_visits = 2 * uint64_t(node_count) + 16;
  uint64_t visits = 0;
  size_t networks = 0, networks_without_asn = 0;

  struct Pending {
    uint32_t node;
    TreePath path;
  };
  std::vector<Pending> stack{{0, TreePath{}}};
  while (!stack.empty()) {
    const Pending p = stack.back();
    stack.pop_back();
    if (++visits > max_visits) {
      *error = path + ": corrupt search tree (nodes reached more than twice; shared or cyclic subtrees)";
      return false;
    }
    MMDB_search_node_s sn;
    const int read_rc = MMDB_read_node(&mmdb, p.node, &sn);
    if (read_rc != MMDB_SUCCESS) {
      *error = path + ": cannot read search tree node " + std::to_string(p.node) + " (" +
               mmdb_error_name(read_rc) + ")";
      return false;
    }
    // Right first so the left (lower-address) side is handled first; for
    // IPv4 data that puts ::/96 before ::ffff:0:0/96.
    for (int side = 1; side >= 0; --side) {
      const uint64_t record = side ? sn.right_record : sn.left_record;
      const uint8_t type = side ? sn.right_record_type : sn.left_record_type;
      const TreePath child = p.path.child(side);
      if (type == MMDB_RECORD_TYPE_EMPTY) continue;
      if (type == MMDB_RECORD_TYPE_SEARCH_NODE) {
        if (child.depth >= tree_bits) {
          *error = path + ": corrupt search tree (deeper than " + std::to_string(tree_bits) + " bits)";
          return false;
        }
        if (uint32_t(record) == ipv4_start && child.depth <= 96 &&
            !(child.depth == 96 && child.in_v4_subtree())) {
          db_->v4_aliases_.push_back(Prefix{child.v6(), child.depth});
          continue;
        }
        stack.push_back(Pending{uint32_t(record), child});
        continue;
      }
      if (type != MMDB_RECORD_TYPE_DATA) {
        *error = path + ": corrupt search tree (node " + std::to_string(p.node) + " points to " +
                 std::to_string(record) + ", outside the tree and data section)";
        return false;
      }

      IpAddr addr;
      int len;
      if (meta.ip_version == 4) {
        addr = child.v4_from_top();
        len = child.depth;
      } else if (child.depth >= 96 && (child.in_v4_subtree() || child.in_v4_mapped())) {
        addr = child.v4_from_low();
        len = child.depth - 96;
      } else {
        addr = child.v6();
        len = child.depth;
      }
      uint32_t rec;
      if (!mmdb_record(side ? sn.right_record_entry : sn.left_record_entry, path, addr, len, &rec, error))
        return false;
      if (rec == kNone) {
        ++networks_without_asn;
        continue;
      }
      // ::/96 is where lookups of IPv4 addresses go; a separate (unaliased)
      // ::ffff:0:0/96 copy must not override it.
      if (meta.ip_version == 6 && child.depth >= 96 && child.in_v4_mapped() &&
          db_->trie_.find(addr, len) != nullptr)
        continue;
      db_->trie_.insert(addr, len, rec);
      // A network covering all of ::/96 (a /96 or shorter on the all-zero
      // path) also answers every IPv4 lookup.
      if (meta.ip_version == 6 && child.depth <= 96 && child.in_v4_subtree()) {
        IpAddr any4;
        any4.family = 4;
        db_->trie_.insert(any4, 0, rec);
      }
      ++networks;
    }
  }

  if (networks == 0 && networks_without_asn > 0) {
    *error = path + ": database type '" + printable(meta.database_type ? meta.database_type : "") +
             "' has no autonomous_system_number or asn field in any of its " +
             std::to_string(networks_without_asn) + " networks";
    return false;
  }

  char date[16] = "";
  const time_t built = time_t(meta.build_epoch);
  struct tm tm_utc;
  if (gmtime_r(&built, &tm_utc) != nullptr) std::strftime(date, sizeof date, "%Y-%m-%d", &tm_utc);
  db_->mmdb_label_ = std::string(meta.database_type ? meta.database_type : base_name(path)) + " " + date;
  db_->mmdb_networks_ = networks;
  return true;
}

// One non-comment line of a prefix file; on error *why is the message
// without the FILE:LINE: part.
bool AsnDatabaseBuilder::parse_line(std::string_view line, std::string* why) {
  const std::vector<std::string_view> f = split_tabs(line);

  if (f.size() == 3) {  // CAIDA pfx2as: prefix, length, origin AS
    const std::optional<IpAddr> addr = IpAddr::parse(f[0]);
    if (!addr) {
      *why = "bad prefix " + quoted(f[0]) + " (not an IPv4 or IPv6 address)";
      return false;
    }
    uint32_t len;
    if (!parse_u32(f[1], &len) || len > uint32_t(addr->bit_length())) {
      *why = "bad prefix length " + quoted(f[1]);
      return false;
    }
    for (int i = int(len); i < addr->bit_length(); ++i) {
      if (addr->bit(i)) {
        *why = "host bits set in " + std::string(f[0]) + "/" + std::to_string(len);
        return false;
      }
    }
    uint32_t asn;
    if (!parse_origin_as(f[2], &asn)) {
      *why = "bad AS number " + quoted(f[2]);
      return false;
    }
    if (asn == 0) return true;  // AS 0 means "no origin"
    db_->trie_.insert(*addr, int(len), intern(asn, ""));
    ++db_->prefix_file_prefixes_;
    return true;
  }

  if (f.size() == 5) {  // iptoasn: range_start, range_end, AS, country, org
    const std::optional<IpAddr> first = IpAddr::parse(f[0]);
    const std::optional<IpAddr> last = IpAddr::parse(f[1]);
    if (!first) {
      *why = "bad range start " + quoted(f[0]) + " (not an IPv4 or IPv6 address)";
      return false;
    }
    if (!last) {
      *why = "bad range end " + quoted(f[1]) + " (not an IPv4 or IPv6 address)";
      return false;
    }
    if (first->family != last->family) {
      *why = "range " + std::string(f[0]) + " - " + std::string(f[1]) + " mixes IPv4 and IPv6";
      return false;
    }
    if (to_u128(*first) > to_u128(*last)) {
      *why = "range start " + std::string(f[0]) + " is after range end " + std::string(f[1]);
      return false;
    }
    uint32_t asn;
    if (!parse_u32(f[2], &asn)) {
      *why = "bad AS number " + quoted(f[2]);
      return false;
    }
    if (asn == 0) return true;  // "Not routed"
    const uint32_t rec = intern(asn, f[4]);
    for (const Prefix& cidr : range_to_cidrs(*first, *last)) {
      // Lookups of ::ffff:a.b.c.d go to the IPv4 trie (find()): a block
      // inside ::ffff:0:0/96 is stored there, as parse_prefix stores a
      // pfx2as line's (found by the prefix-file fuzzer).
      const Prefix p = cidr.unmapped();
      db_->trie_.insert(p.addr, p.len, rec);
      ++db_->prefix_file_prefixes_;
    }
    return true;
  }

  *why = "expected 3 tab-separated fields (pfx2as: prefix, length, AS) or 5 (iptoasn: "
         "range_start, range_end, AS, country, org), found " + std::to_string(f.size());
  return false;
}

constexpr size_t kMaxPrefixLineBytes = 64 * 1024;  // pfx2as lines are under 100 bytes, with an org a few hundred

bool AsnDatabaseBuilder::load_prefix_file(const std::string& path, std::string* error) {
  // gzopen reads plain files transparently, so .gz needs no special case.
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    *error = path + ": cannot open: " + std::strerror(errno ? errno : ENOMEM);
    return false;
  }
  gzbuffer(file, 1 << 17);
  db_->has_prefix_file_ = true;

  std::string line;
  char buf[4096];
  int line_no = 0;
  bool ok = true;
  auto handle = [&]() {
    ++line_no;
    const std::string_view content = trim(line);
    if (content.empty() || content.front() == '#') return true;
    // Strip only the line ending: a trailing empty org is a real (empty) field.
    std::string_view raw(line);
    while (!raw.empty() && (raw.back() == '\n' || raw.back() == '\r')) raw.remove_suffix(1);
    std::string why;
    if (parse_line(raw, &why)) return true;
    *error = path + ":" + std::to_string(line_no) + ": " + why;
    return false;
  };
  // gzgets() ends what it read with a NUL, so a NUL byte in the file would cut
  // the line short without a word (and a line cut to nothing is skipped as
  // blank). With the buffer pre-filled, a second NUL after the first one
  // gives it away: that input is not a text file.
  while (ok && (std::memset(buf, 0xff, sizeof buf), gzgets(file, buf, sizeof buf)) != nullptr) {
    const size_t n = std::strlen(buf);
    if (std::memchr(buf + n + 1, 0, sizeof buf - n - 1) != nullptr) {
      *error = path + ":" + std::to_string(line_no + 1) + ": NUL byte in the line (not a text file?)";
      ok = false;
      break;
    }
    line.append(buf, n);
    if (line.size() > kMaxPrefixLineBytes) {
      // Not a prefix file: a gzip bomb of one line would otherwise be read
      // whole into memory.
      *error = path + ":" + std::to_string(line_no + 1) + ": line longer than " +
               std::to_string(kMaxPrefixLineBytes) + " bytes (not a prefix file?)";
      ok = false;
      break;
    }
    if (!line.empty() && line.back() == '\n') {
      ok = handle();
      line.clear();
    }
  }
  if (ok) {
    int errnum = Z_OK;
    const char* msg = gzerror(file, &errnum);
    if (errnum != Z_OK && errnum != Z_STREAM_END) {
      *error = path + ": read error after line " + std::to_string(line_no) + ": " +
               (errnum == Z_ERRNO ? std::strerror(errno) : msg);
      ok = false;
    } else if (!line.empty()) {
      ok = handle();  // last line without a newline
    }
  }
  gzclose(file);
  return ok;
}

std::vector<Prefix> range_to_cidrs(const IpAddr& first, const IpAddr& last) {
  std::vector<Prefix> out;
  if (first.family != last.family || (first.family != 4 && first.family != 6)) return out;
  const int bits = first.bit_length();
  u128 a = to_u128(first);
  const u128 b = to_u128(last);
  if (a > b) return out;
  for (;;) {
    // The largest aligned block starting at a that does not pass b.
    int k = trailing_zeros(a, bits);
    while (k > 0 && b - a < block_span(k)) --k;
    out.push_back(Prefix{from_u128(a, first.family), bits - k});
    if (b - a == block_span(k)) break;
    a += block_span(k) + 1;
  }
  return out;
}

std::shared_ptr<const AsnDatabase> AsnDatabase::load(const AsnConfig& cfg, std::string* error) {
  AsnDatabaseBuilder builder;
  std::string why;
  // The prefix file goes second so that it replaces MMDB entries of equal length.
  if (!cfg.mmdb.empty() && !builder.load_mmdb(cfg.mmdb, &why)) {
    if (error) *error = why;
    return nullptr;
  }
  if (!cfg.prefix_file.empty() && !builder.load_prefix_file(cfg.prefix_file, &why)) {
    if (error) *error = why;
    return nullptr;
  }
  return builder.finish();
}

const uint32_t* AsnDatabase::find(const IpAddr& addr) const {
  const IpAddr a = addr.is_v4_mapped() ? addr.unmapped() : addr;
  int len = -1;
  const uint32_t* hit = trie_.lookup_with_len(a, &len);
  if (a.family != 6) return hit;
  for (const Prefix& alias : v4_aliases_) {
    if (!prefix_contains(alias, a)) continue;
    // libmaxminddb continues such a lookup at the IPv4 root with the 32 bits
    // that follow the alias prefix.
    const u128 v = to_u128(a);
    const IpAddr v4 = from_u128(uint32_t(v >> (96 - alias.len)), 4);
    int len4 = -1;
    const uint32_t* hit4 = trie_.lookup_with_len(v4, &len4);
    if (hit4 != nullptr && (hit == nullptr || alias.len + len4 > len)) return hit4;
    break;
  }
  return hit;
}

AsnInfo AsnDatabase::lookup(const IpAddr& addr) const {
  const uint32_t* rec = find(addr);
  return rec ? records_[*rec] : AsnInfo{};
}

uint32_t AsnDatabase::lookup_asn(const IpAddr& addr) const {
  const uint32_t* rec = find(addr);
  return rec ? records_[*rec].asn : 0;
}

std::vector<Prefix> AsnDatabase::prefixes_of(uint32_t asn) const {
  std::vector<Prefix> out;
  if (asn == 0) return out;
  auto wanted = [&](const uint32_t* rec) { return rec != nullptr && records_[*rec].asn == asn; };
  for (int family : {4, 6}) {
    const size_t family_start = out.size();
    trie_.for_each_region(family, wanted, [&](const IpAddr& addr, int len, const uint32_t*) {
      // Regions come in address order: fold two halves of one block back
      // into the block (they were split only because of a more specific
      // prefix of the same AS, e.g. a /24 of X inside a /16 of X).
      Prefix p{addr, len};
      // Lookups of ::ffff:a.b.c.d are answered by the IPv4 trie (find()):
      // an IPv6 entry inside ::ffff:0:0/96 (a range that spans into it and
      // was split around it) answers nothing. Found by the prefix-file fuzzer.
      if (family == 6 && p.unmapped().addr.family == 4) return;
      while (out.size() > family_start) {
        const Prefix& prev = out.back();
        if (prev.len != p.len || p.len == 0) break;
        const int i = p.len - 1;  // the bit in which two sibling halves differ
        if (prev.addr.bit(i) != 0 || p.addr.bit(i) != 1) break;
        IpAddr parent = p.addr;
        parent.bytes[i >> 3] &= uint8_t(~(0x80 >> (i & 7)));
        if (parent != prev.addr) break;
        out.pop_back();
        p = Prefix{parent, p.len - 1};
      }
      out.push_back(p);
    });
  }
  return out;
}

std::string AsnDatabase::describe() const {
  std::string text;
  if (!mmdb_label_.empty()) text = "mmdb " + mmdb_label_ + ": " + std::to_string(mmdb_networks_) + " networks";
  if (has_prefix_file_) {
    if (!text.empty()) text += "; ";
    text += "prefix file: " + std::to_string(prefix_file_prefixes_) + " prefixes";
  }
  return text.empty() ? "no ASN data" : text;
}

size_t AsnDatabase::memory_bytes() const {
  size_t bytes = trie_.memory_bytes() + records_.capacity() * sizeof(AsnInfo);
  for (const AsnInfo& r : records_) {
    if (r.org.capacity() > 15) bytes += r.org.capacity() + 1;  // beyond the small-string buffer
  }
  return bytes;
}

}  // namespace tcpscope
