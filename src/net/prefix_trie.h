// Longest-prefix match over IPv4 and IPv6 prefixes: one path-compressed
// binary (Patricia) trie per address family.
//
// Why this shape: a routing table's worth of prefixes (1M) must stay small and
// lookups must not allocate. Nodes live in one contiguous vector per family and
// refer to each other by 32-bit index, so there is no per-node heap allocation
// and the vectors can be freed in one go. A trie with N prefixes has at most
// 2N-1 nodes (N prefix nodes plus at most N-1 branching "glue" nodes), and a
// lookup visits at most one node per distinct prefix length on its path.
//
// After a bulk load, optimize() adds a jump table over the top (up to 16)
// bits of each family, so a lookup starts below the upper levels that every
// lookup would otherwise walk through.
//
// Measured (bench/lookup_bench.cc, BGP-like random prefixes, uint32_t values,
// after optimize(); 2-vCPU Xeon VM under load, CPU time):
//   IPv4   1k: 47 bytes/prefix,  16 ns/lookup    1M: 37.5 bytes/prefix, ~100 ns/lookup
//   IPv6   1k: 72 bytes/prefix,  24 ns/lookup    1M: 68 bytes/prefix,  ~165 ns/lookup
// (20-byte IPv4 nodes, 32-byte IPv6 nodes, ~1.65-2 nodes per prefix, the
// 4-byte value, and the jump table: at most 512 KiB per family.)
//
// IPv4-mapped IPv6 addresses are NOT folded here: ::ffff:1.2.3.4 is looked up
// in the IPv6 trie. Callers that want mapped addresses to match IPv4 prefixes
// fold them first (IpAddr::unmapped()).
//
// Not thread-safe for writers; concurrent const lookups are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "net/ip_addr.h"

namespace tcpscope {

namespace prefix_trie_detail {

constexpr uint32_t kNil = UINT32_MAX;

// --- IPv4 keys: the address as a host-order uint32_t, top bit = first bit.
struct Key4 {
  uint32_t v = 0;
  static constexpr int kBits = 32;
  bool operator==(const Key4& o) const { return v == o.v; }
};
inline Key4 key_mask(Key4 k, int len) {
  return Key4{len == 0 ? 0u : k.v & (~0u << (32 - len))};
}
inline int key_bit(Key4 k, int i) { return (k.v >> (31 - i)) & 1; }
inline Key4 key_with_bit(Key4 k, int i) { return Key4{k.v | (1u << (31 - i))}; }
// Number of leading bits a and b share (32 if equal).
inline int key_common(Key4 a, Key4 b) {
  const uint32_t x = a.v ^ b.v;
  return x == 0 ? 32 : __builtin_clz(x);
}
inline Key4 key_of(const IpAddr& a) {
  return Key4{(uint32_t(a.bytes[0]) << 24) | (uint32_t(a.bytes[1]) << 16) |
              (uint32_t(a.bytes[2]) << 8) | uint32_t(a.bytes[3])};
}
// The top `bits` bits as an integer (bits <= 16), and the key they start.
inline uint32_t key_top(Key4 k, int bits) { return bits == 0 ? 0 : k.v >> (32 - bits); }
inline Key4 key_from_top(uint32_t top, int bits, Key4) { return Key4{bits == 0 ? 0 : top << (32 - bits)}; }
inline IpAddr addr_of(Key4 k) {
  IpAddr a;
  a.family = 4;
  a.bytes[0] = uint8_t(k.v >> 24);
  a.bytes[1] = uint8_t(k.v >> 16);
  a.bytes[2] = uint8_t(k.v >> 8);
  a.bytes[3] = uint8_t(k.v);
  return a;
}

// --- IPv6 keys: two host-order halves.
struct Key6 {
  uint64_t hi = 0, lo = 0;
  static constexpr int kBits = 128;
  bool operator==(const Key6& o) const { return hi == o.hi && lo == o.lo; }
};
inline uint64_t mask64(int len) { return len <= 0 ? 0 : len >= 64 ? ~0ull : ~0ull << (64 - len); }
inline Key6 key_mask(Key6 k, int len) {
  return Key6{k.hi & mask64(len), k.lo & mask64(len - 64)};
}
inline int key_bit(Key6 k, int i) {
  return i < 64 ? int((k.hi >> (63 - i)) & 1) : int((k.lo >> (127 - i)) & 1);
}
inline Key6 key_with_bit(Key6 k, int i) {
  if (i < 64) return Key6{k.hi | (1ull << (63 - i)), k.lo};
  return Key6{k.hi, k.lo | (1ull << (127 - i))};
}
inline int key_common(Key6 a, Key6 b) {
  const uint64_t h = a.hi ^ b.hi;
  if (h != 0) return __builtin_clzll(h);
  const uint64_t l = a.lo ^ b.lo;
  return l == 0 ? 128 : 64 + __builtin_clzll(l);
}
inline Key6 key_of6(const IpAddr& a) {
  Key6 k;
  for (int i = 0; i < 8; ++i) k.hi = (k.hi << 8) | a.bytes[i];
  for (int i = 8; i < 16; ++i) k.lo = (k.lo << 8) | a.bytes[i];
  return k;
}
inline uint32_t key_top(Key6 k, int bits) { return bits == 0 ? 0 : uint32_t(k.hi >> (64 - bits)); }
inline Key6 key_from_top(uint32_t top, int bits, Key6) {
  return Key6{bits == 0 ? 0 : uint64_t(top) << (64 - bits), 0};
}
inline IpAddr addr_of(Key6 k) {
  IpAddr a;
  a.family = 6;
  for (int i = 0; i < 8; ++i) a.bytes[i] = uint8_t(k.hi >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) a.bytes[8 + i] = uint8_t(k.lo >> (56 - 8 * i));
  return a;
}

// One family's Patricia tree. A node is a prefix (key, len); child[b] holds
// the prefixes below it whose bit `len` is b. `value` indexes the owning
// PrefixTrie's value vector, kNil for glue nodes that only branch.
template <class K>
struct Tree {
  struct Node {
    K key;
    uint32_t child[2] = {kNil, kNil};
    uint32_t value = kNil;
    uint8_t len = 0;
  };
  std::vector<Node> nodes;
  uint32_t root = kNil;

  uint32_t add(K key, int len, uint32_t value) {
    Node n;
    n.key = key;
    n.len = uint8_t(len);
    n.value = value;
    nodes.push_back(n);
    return uint32_t(nodes.size() - 1);
  }

  // Index of the node holding exactly (key, len), or kNil. `key` is masked.
  uint32_t find(K key, int len) const {
    uint32_t ni = root;
    while (ni != kNil) {
      const Node& n = nodes[ni];
      if (n.len > len || !(key_mask(key, n.len) == n.key)) return kNil;
      if (n.len == len) return ni;
      ni = n.child[key_bit(key, n.len)];
    }
    return kNil;
  }

  // Node index of the longest prefix with a value that contains `key`, or kNil.
  uint32_t longest(K key) const {
    uint32_t best = kNil;
    uint32_t ni = root;
    if (!jump.empty()) {
      const Jump& j = jump[key_top(key, jump_bits)];
      best = j.best;
      ni = j.resume;
    }
    while (ni != kNil) {
      const Node& n = nodes[ni];
      if (!(key_mask(key, n.len) == n.key)) break;
      if (n.value != kNil) best = ni;
      if (n.len == K::kBits) break;
      ni = n.child[key_bit(key, n.len)];
    }
    return best;
  }

  // Jump table over the top `jump_bits` bits of an address: where the walk
  // for any address starting with those bits stands after them. It skips the
  // upper levels, which are the same few nodes for every lookup, and turns
  // them into one array access. Rebuilt by build_jump(); dropped by inserts.
  struct Jump {
    uint32_t resume = kNil;  // first node below jump_bits on the path, or kNil
    uint32_t best = kNil;    // longest valued node of length <= jump_bits on the path
  };
  std::vector<Jump> jump;
  int jump_bits = 0;

  void build_jump() {
    jump.clear();
    jump.shrink_to_fit();
    jump_bits = 0;
    // About one entry per four nodes, at most 2^16 (512 KiB): the table must
    // stay small next to the nodes it saves visiting.
    while (jump_bits < 16 && (size_t(4) << jump_bits) <= nodes.size()) ++jump_bits;
    if (jump_bits < 4) {
      jump_bits = 0;
      return;
    }
    std::vector<Jump> table(size_t(1) << jump_bits);
    for (uint32_t top = 0; top < table.size(); ++top) {
      const K key = key_from_top(top, jump_bits, K{});
      Jump j;
      uint32_t ni = root;
      while (ni != kNil) {
        const Node& n = nodes[ni];
        if (n.len >= jump_bits) {
          // The rest depends on bits below the table: resume at this node
          // (the lookup re-checks it) if it agrees on the top bits.
          if (key_mask(n.key, jump_bits) == key) j.resume = ni;
          break;
        }
        if (!(key_mask(key, n.len) == n.key)) break;
        if (n.value != kNil) j.best = ni;
        ni = n.child[key_bit(key, n.len)];
      }
      table[top] = j;
    }
    jump = std::move(table);
  }

  // Returns the node for (key, len), creating it (and a glue node if needed)
  // with value kNil when absent. `key` is masked.
  uint32_t find_or_create(K key, int len) {
    if (!jump.empty()) {
      jump.clear();
      jump_bits = 0;
    }
    uint32_t parent = kNil;  // kNil: the link is `root`
    int side = 0;
    auto link = [&]() -> uint32_t& { return parent == kNil ? root : nodes[parent].child[side]; };
    for (;;) {
      const uint32_t ni = link();
      if (ni == kNil) {
        const uint32_t created = add(key, len, kNil);
        link() = created;
        return created;
      }
      const K nkey = nodes[ni].key;
      const int nlen = nodes[ni].len;
      int common = key_common(key, nkey);
      if (common > len) common = len;
      if (common > nlen) common = nlen;
      if (common == nlen) {
        if (nlen == len) return ni;            // exact node exists
        parent = ni;                           // it is an ancestor: descend
        side = key_bit(key, nlen);
        continue;
      }
      if (common == len) {                     // new prefix is an ancestor of ni
        const uint32_t created = add(key, len, kNil);
        nodes[created].child[key_bit(nkey, len)] = ni;
        link() = created;
        return created;
      }
      // The two diverge below both lengths: branch at `common`.
      const uint32_t glue = add(key_mask(key, common), common, kNil);
      const uint32_t created = add(key, len, kNil);
      nodes[glue].child[key_bit(key, common)] = created;
      nodes[glue].child[key_bit(nkey, common)] = ni;
      link() = glue;
      return created;
    }
  }

  // Pre-order walk (address order, shorter prefix before the ones it contains).
  template <class F>
  void for_each_node(F&& f) const {
    if (root == kNil) return;
    std::vector<uint32_t> stack{root};
    while (!stack.empty()) {
      const uint32_t ni = stack.back();
      stack.pop_back();
      const Node& n = nodes[ni];
      f(n);
      if (n.child[1] != kNil) stack.push_back(n.child[1]);
      if (n.child[0] != kNil) stack.push_back(n.child[0]);
    }
  }

  // See PrefixTrie::for_each_region. `ni` is kNil or a node inside key/len;
  // `inherited` is the value index in effect for key/len from above.
  template <class Want, class F>
  void regions(K key, int len, uint32_t ni, uint32_t inherited, Want& want, F& f) const {
    if (ni == kNil) {
      if (want(inherited)) f(key, len, inherited);
      return;
    }
    const Node& n = nodes[ni];
    if (n.len > len) {
      // Everything between len and n.len outside the path to n keeps
      // `inherited`; skip straight to n when that value is not wanted.
      if (!want(inherited)) return regions(n.key, n.len, ni, inherited, want, f);
      const int b = key_bit(n.key, len);
      regions(key, len + 1, b == 0 ? ni : kNil, inherited, want, f);
      regions(key_with_bit(key, len), len + 1, b == 1 ? ni : kNil, inherited, want, f);
      return;
    }
    const uint32_t effective = n.value != kNil ? n.value : inherited;
    if (n.child[0] == kNil && n.child[1] == kNil) {
      if (want(effective)) f(key, len, effective);
      return;
    }
    regions(key, len + 1, n.child[0], effective, want, f);
    regions(key_with_bit(key, len), len + 1, n.child[1], effective, want, f);
  }
};

}  // namespace prefix_trie_detail

template <class V>
class PrefixTrie {
 public:
  // Adds prefix/len -> value; host bits of `prefix` beyond len are ignored.
  // Inserting a prefix that is already present replaces its value.
  // Returns false (and changes nothing) for an unset family or len out of range.
  bool insert(const IpAddr& prefix, int len, V value) {
    uint32_t* slot = slot_for(prefix, len);
    if (slot == nullptr) return false;
    if (*slot == prefix_trie_detail::kNil) {
      *slot = uint32_t(values_.size());
      values_.push_back(std::move(value));
    } else {
      values_[*slot] = std::move(value);
    }
    return true;
  }

  // Value of the longest prefix containing `addr`, nullptr if none.
  const V* lookup(const IpAddr& addr) const { return lookup_with_len(addr, nullptr); }

  // Same, and stores the matched prefix length in *matched_len (when non-null
  // and a prefix matched).
  const V* lookup_with_len(const IpAddr& addr, int* matched_len) const {
    using namespace prefix_trie_detail;
    if (addr.family == 4) {
      const uint32_t ni = v4_.longest(key_of(addr));
      return found(v4_, ni, matched_len);
    }
    if (addr.family == 6) {
      const uint32_t ni = v6_.longest(key_of6(addr));
      return found(v6_, ni, matched_len);
    }
    return nullptr;
  }

  // Value stored for exactly prefix/len, nullptr if that prefix is absent.
  const V* find(const IpAddr& prefix, int len) const {
    using namespace prefix_trie_detail;
    if (!valid(prefix, len)) return nullptr;
    const uint32_t ni = prefix.family == 4 ? v4_.find(key_mask(key_of(prefix), len), len)
                                           : v6_.find(key_mask(key_of6(prefix), len), len);
    if (ni == kNil) return nullptr;
    const uint32_t vi = prefix.family == 4 ? v4_.nodes[ni].value : v6_.nodes[ni].value;
    return vi == kNil ? nullptr : &values_[vi];
  }

  size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }

  void clear() {
    v4_ = {};
    v6_ = {};
    values_.clear();
    values_.shrink_to_fit();
  }

  // Call after a bulk load: releases vector slack and builds the jump tables
  // that let large tries skip their upper levels. Lookups are correct
  // without it, only slower; an insert afterwards drops the tables again.
  void optimize() {
    v4_.nodes.shrink_to_fit();
    v6_.nodes.shrink_to_fit();
    values_.shrink_to_fit();
    v4_.build_jump();
    v6_.build_jump();
  }

  // Heap bytes held (capacity, not size), for memory accounting.
  size_t memory_bytes() const {
    return v4_.nodes.capacity() * sizeof(typename decltype(v4_)::Node) +
           v6_.nodes.capacity() * sizeof(typename decltype(v6_)::Node) +
           v4_.jump.capacity() * sizeof(typename decltype(v4_)::Jump) +
           v6_.jump.capacity() * sizeof(typename decltype(v6_)::Jump) + values_.capacity() * sizeof(V);
  }

  // Calls f(const IpAddr& prefix, int len, const V& value) for every stored
  // prefix: IPv4 first, then IPv6, each in address order with a prefix
  // before the longer prefixes inside it.
  template <class F>
  void for_each(F&& f) const {
    using namespace prefix_trie_detail;
    v4_.for_each_node([&](const auto& n) {
      if (n.value != kNil) f(addr_of(n.key), int(n.len), values_[n.value]);
    });
    v6_.for_each_node([&](const auto& n) {
      if (n.value != kNil) f(addr_of(n.key), int(n.len), values_[n.value]);
    });
  }

  // Partitions the whole address space of `family` (4 or 6) into disjoint
  // prefixes, in address order, inside each of which lookup() returns the
  // same result, and calls f(const IpAddr& prefix, int len, const V* value)
  // for those where want(const V* value) is true (value nullptr = no match).
  // This is the exact "which addresses map to X" answer, with the holes that
  // more specific prefixes punch already cut out. Regions of unwanted values
  // are skipped without being split, so the cost is O(nodes + output).
  template <class Want, class F>
  void for_each_region(int family, Want&& want, F&& f) const {
    using namespace prefix_trie_detail;
    auto want_index = [&](uint32_t vi) { return want(vi == kNil ? nullptr : &values_[vi]); };
    auto emit = [&](auto key, int len, uint32_t vi) {
      f(addr_of(key), len, vi == kNil ? nullptr : &values_[vi]);
    };
    if (family == 4) v4_.regions(Key4{}, 0, v4_.root, kNil, want_index, emit);
    if (family == 6) v6_.regions(Key6{}, 0, v6_.root, kNil, want_index, emit);
  }

 private:
  static bool valid(const IpAddr& prefix, int len) {
    return (prefix.family == 4 || prefix.family == 6) && len >= 0 && len <= prefix.bit_length();
  }

  // The value slot of the node for prefix/len (created if absent), nullptr if invalid.
  uint32_t* slot_for(const IpAddr& prefix, int len) {
    using namespace prefix_trie_detail;
    if (!valid(prefix, len)) return nullptr;
    if (prefix.family == 4) {
      const uint32_t ni = v4_.find_or_create(key_mask(key_of(prefix), len), len);
      return &v4_.nodes[ni].value;
    }
    const uint32_t ni = v6_.find_or_create(key_mask(key_of6(prefix), len), len);
    return &v6_.nodes[ni].value;
  }

  template <class T>
  const V* found(const T& tree, uint32_t ni, int* matched_len) const {
    if (ni == prefix_trie_detail::kNil) return nullptr;
    if (matched_len != nullptr) *matched_len = tree.nodes[ni].len;
    return &values_[tree.nodes[ni].value];
  }

  prefix_trie_detail::Tree<prefix_trie_detail::Key4> v4_;
  prefix_trie_detail::Tree<prefix_trie_detail::Key6> v6_;
  std::vector<V> values_;
};

}  // namespace tcpscope
