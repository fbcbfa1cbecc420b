// Lookup costs of the enrichment path: PrefixTrie, PeerClassifier, AsnDatabase.
//
//   tcpscope_bench --benchmark_filter='Trie|Classify|Asn'
//
// bench/results/lookup.json was recorded with
//   tcpscope_bench --benchmark_filter='TrieLookup|PeerClassify|Asn' \
//     --benchmark_repetitions=3 --benchmark_out=bench/results/lookup.json --benchmark_out_format=json
// and docs/configuration.md ("Peer classes and ASNs") quotes its medians.
//
// Each iteration is one lookup, so "Time" is ns per lookup. Counters:
// bytes_per_prefix (heap held by the structure / prefixes stored), and for
// the ASN database load_s (time to parse the generated 1M-line pfx2as file).
// Probes are half addresses inside stored prefixes (random host bits), half
// uniformly random addresses, shuffled, 64Ki of them cycled so the lookups
// miss the CPU caches the way real traffic does on a large table.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "enrich/asn_db.h"
#include "enrich/peer_classifier.h"
#include "net/prefix_trie.h"

namespace tcpscope {
namespace {

constexpr size_t kProbes = 1 << 16;

IpAddr random_addr(std::mt19937_64& rng, int family) {
  IpAddr a;
  a.family = uint8_t(family);
  const uint64_t hi = rng(), lo = rng();
  for (int i = 0; i < 8; ++i) a.bytes[i] = uint8_t(hi >> (8 * i));
  for (int i = 0; i < 8; ++i) a.bytes[8 + i] = uint8_t(lo >> (8 * i));
  if (family == 4) std::fill(a.bytes.begin() + 4, a.bytes.end(), 0);
  return a;
}

IpAddr with_len(IpAddr a, int len) {
  for (int i = len; i < a.bit_length(); ++i) a.bytes[i >> 3] &= uint8_t(~(0x80 >> (i & 7)));
  return a;
}

// Prefix lengths shaped like a BGP table: mostly /24 (IPv4) or /48 and /32 (IPv6).
int random_len(std::mt19937_64& rng, int family) {
  const int r = int(rng() % 100);
  if (family == 4) return r < 60 ? 24 : r < 90 ? 16 + int(rng() % 8) : 8 + int(rng() % 8);
  return r < 45 ? 48 : r < 70 ? 32 : r < 90 ? 33 + int(rng() % 15) : 19 + int(rng() % 13);
}

struct Prefixes {
  std::vector<std::pair<IpAddr, int>> list;
  std::vector<IpAddr> probes;
};

Prefixes make_prefixes(int family, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Prefixes p;
  p.list.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int len = random_len(rng, family);
    p.list.emplace_back(with_len(random_addr(rng, family), len), len);
  }
  for (size_t i = 0; i < kProbes; ++i) {
    IpAddr a = random_addr(rng, family);
    if (i % 2 == 0) {  // inside a stored prefix
      const auto& [base, len] = p.list[rng() % n];
      for (int b = 0; b < len; ++b) {
        const uint8_t m = uint8_t(0x80 >> (b & 7));
        a.bytes[b >> 3] = uint8_t(base.bit(b) ? (a.bytes[b >> 3] | m) : (a.bytes[b >> 3] & ~m));
      }
    }
    p.probes.push_back(a);
  }
  return p;
}

struct BuiltTrie {
  PrefixTrie<uint32_t> trie;
  std::vector<IpAddr> probes;
  double insert_ns_per_prefix = 0;
};

// Built once per (family, size) and kept: benchmark functions run several times.
const BuiltTrie& built_trie(int family, size_t n) {
  static std::map<std::pair<int, size_t>, std::unique_ptr<BuiltTrie>> cache;
  auto& slot = cache[{family, n}];
  if (!slot) {
    slot = std::make_unique<BuiltTrie>();
    Prefixes p = make_prefixes(family, n, 42 + n + family);
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < p.list.size(); ++i) slot->trie.insert(p.list[i].first, p.list[i].second, uint32_t(i));
    const auto end = std::chrono::steady_clock::now();
    slot->trie.optimize();
    slot->insert_ns_per_prefix = std::chrono::duration<double, std::nano>(end - start).count() / double(n);
    slot->probes = std::move(p.probes);
  }
  return *slot;
}

void trie_lookup(benchmark::State& state, int family) {
  const BuiltTrie& t = built_trie(family, size_t(state.range(0)));
  size_t i = 0, hits = 0;
  for (auto _ : state) {
    const uint32_t* v = t.trie.lookup(t.probes[i++ & (kProbes - 1)]);
    hits += v != nullptr;
    benchmark::DoNotOptimize(v);
  }
  state.counters["prefixes"] = double(t.trie.size());
  state.counters["bytes_per_prefix"] = double(t.trie.memory_bytes()) / double(t.trie.size());
  state.counters["insert_ns_per_prefix"] = t.insert_ns_per_prefix;
  state.counters["hit_ratio"] = double(hits) / double(state.iterations());
}

void BM_TrieLookupV4(benchmark::State& state) { trie_lookup(state, 4); }
void BM_TrieLookupV6(benchmark::State& state) { trie_lookup(state, 6); }
BENCHMARK(BM_TrieLookupV4)->Arg(1000)->Arg(10000)->Arg(1000000);
BENCHMARK(BM_TrieLookupV6)->Arg(1000)->Arg(10000)->Arg(1000000);

// 5k prefixes (4k IPv4, 1k IPv6) over 8 classes, plus 20 ASNs; probes mix
// IPv4, IPv4-mapped and IPv6 addresses.
void BM_PeerClassify(benchmark::State& state) {
  Prefixes v4 = make_prefixes(4, 4000, 7);
  Prefixes v6 = make_prefixes(6, 1000, 8);
  std::vector<PeerClassSpec> classes(8);
  for (size_t c = 0; c < classes.size(); ++c) {
    classes[c].name = "class" + std::to_string(c);
    for (uint32_t k = 0; k < 20; k += 8) classes[c].asns.push_back(64500 + uint32_t(c) + k);
  }
  for (size_t i = 0; i < v4.list.size(); ++i)
    classes[i % classes.size()].prefixes.push_back(Prefix{v4.list[i].first, v4.list[i].second});
  for (size_t i = 0; i < v6.list.size(); ++i)
    classes[i % classes.size()].prefixes.push_back(Prefix{v6.list[i].first, v6.list[i].second});
  const PeerClassifier classifier(classes, "client");

  std::vector<IpAddr> probes;
  for (size_t i = 0; i < kProbes; ++i) {
    if (i % 4 == 3) {
      probes.push_back(v6.probes[i]);
    } else if (i % 4 == 2) {  // ::ffff:a.b.c.d
      IpAddr m;
      m.family = 6;
      m.bytes[10] = m.bytes[11] = 0xff;
      std::copy(v4.probes[i].bytes.begin(), v4.probes[i].bytes.begin() + 4, m.bytes.begin() + 12);
      probes.push_back(m);
    } else {
      probes.push_back(v4.probes[i]);
    }
  }
  size_t i = 0;
  for (auto _ : state) {
    const std::string& cls = classifier.classify(probes[i & (kProbes - 1)], 64500 + uint32_t(i % 40));
    ++i;
    benchmark::DoNotOptimize(&cls);
  }
}
BENCHMARK(BM_PeerClassify);

// A 1M-line pfx2as file (900k IPv4, 100k IPv6 prefixes), written once.
const std::string& pfx2as_file() {
  static const std::string path = [] {
    const std::string p = "/tmp/tcpscope_bench_pfx2as_1m.tsv";
    std::ofstream out(p);
    Prefixes v4 = make_prefixes(4, 900000, 1);
    Prefixes v6 = make_prefixes(6, 100000, 2);
    std::mt19937_64 rng(3);
    for (const auto* set : {&v4, &v6}) {
      for (const auto& [addr, len] : set->list) {
        out << addr.to_string() << '\t' << len << '\t' << (1 + rng() % 70000) << '\n';
      }
    }
    return p;
  }();
  return path;
}

struct LoadedDb {
  std::shared_ptr<const AsnDatabase> db;
  double load_s = 0;
  std::vector<IpAddr> probes;
};

const LoadedDb& loaded_db() {
  static const LoadedDb loaded = [] {
    LoadedDb l;
    AsnConfig cfg;
    cfg.prefix_file = pfx2as_file();
    std::string error;
    const auto start = std::chrono::steady_clock::now();
    l.db = AsnDatabase::load(cfg, &error);
    l.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!l.db) std::fprintf(stderr, "lookup_bench: %s\n", error.c_str());
    // Same seeds as the file: half of the probes fall inside its prefixes.
    Prefixes v4 = make_prefixes(4, 900000, 1);
    Prefixes v6 = make_prefixes(6, 100000, 2);
    for (size_t i = 0; i < kProbes; ++i) l.probes.push_back(i % 10 == 9 ? v6.probes[i] : v4.probes[i]);
    return l;
  }();
  return loaded;
}

// Runs the benchmark's `body` on the database; skips it when that did not load.
template <class Body>
void on_loaded_db(benchmark::State& state, Body body) {
  const LoadedDb& l = loaded_db();
  if (!l.db) {
    state.SkipWithError("could not load the generated pfx2as file");
    return;
  }
  body(l);
}

void BM_AsnLookup(benchmark::State& state) {
  on_loaded_db(state, [&](const LoadedDb& l) {
    size_t i = 0, known = 0;
    for (auto _ : state) {
      const uint32_t asn = l.db->lookup_asn(l.probes[i++ & (kProbes - 1)]);
      known += asn != 0;
      benchmark::DoNotOptimize(asn);
    }
    state.counters["prefixes"] = double(l.db->prefix_count());
    state.counters["bytes_per_prefix"] = double(l.db->memory_bytes()) / double(l.db->prefix_count());
    state.counters["load_s"] = l.load_s;
    state.counters["hit_ratio"] = double(known) / double(state.iterations());
  });
}
BENCHMARK(BM_AsnLookup);

// The full AsnInfo (with the organisation string copy).
void BM_AsnLookupInfo(benchmark::State& state) {
  on_loaded_db(state, [&](const LoadedDb& l) {
    size_t i = 0;
    for (auto _ : state) {
      AsnInfo info = l.db->lookup(l.probes[i++ & (kProbes - 1)]);
      benchmark::DoNotOptimize(info);
    }
  });
}
BENCHMARK(BM_AsnLookupInfo);

// prefixes_of() walks the whole 1M-prefix trie: a reload-time cost.
void BM_AsnPrefixesOf(benchmark::State& state) {
  on_loaded_db(state, [&](const LoadedDb& l) {
    size_t found = 0;
    uint32_t asn = 1;
    for (auto _ : state) {
      found += l.db->prefixes_of(asn).size();
      asn = asn % 70000 + 1;
    }
    state.counters["prefixes_per_call"] = double(found) / double(state.iterations());
  });
}
BENCHMARK(BM_AsnPrefixesOf)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tcpscope
