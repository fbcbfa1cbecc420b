// Which ASNs get a label of their own. Both outputs that split flows by ASN
// (the Prometheus series, aggregator.h, and the sketches behind
// /api/v1/distributions, flow_distributions.h) take a flow's label from
// here, so the two agree and neither ranks on its own.
//
// An ASN among the top-N by (decayed) bytes keeps its number, ASN 0
// (unknown) is "0", every other ASN is "other". The ranking is remade every
// 60 s by the daemon and, while a fresh daemon warms up, every
// warmup_recompute_flows flows; between rankings an ASN joins the top-N at
// once while it has room.
//
// Not thread-safe: the daemon's loop thread is its only user.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace tcpscope {

struct Config;

// A flow's ASN label: its number ("0" for ASN 0) or "other".
enum class AsnLabel { kOwn, kOther };
constexpr const char* kOtherAsnLabel = "other";

struct AsnRankingOptions {
  uint32_t top_n = 50;
  // Bytes are counted per ASN to rank them; at most this many ASNs are
  // tracked (the routed Internet has ~80k). A flow whose ASN finds the table
  // full is labelled "other" and its bytes are not ranked until a ranking
  // prunes the table back to the half with the most bytes.
  size_t max_tracked_asns = 100000;
  // Per-ASN byte counts decay with this half-life so that the top-N follows
  // the traffic mix instead of freezing on the first hours after start.
  double bytes_half_life_s = 3600;
  // A fresh daemon has no ranking: for its first `warmup_seconds`, add()
  // ranks every `warmup_recompute_flows` flows (0: never).
  uint64_t warmup_recompute_flows = 10000;
  double warmup_seconds = 300;

  static AsnRankingOptions from_config(const Config& config);
};

class AsnRanking {
 public:
  using Clock = std::chrono::steady_clock;

  explicit AsnRanking(AsnRankingOptions options);

  struct Counted {
    AsnLabel label;  // the flow's label, by the ranking in force before it
    bool reranked;   // the flow completed a warm-up batch and a new ranking is in force
  };
  // Counts a finished flow's payload bytes (both directions) for its ASN.
  Counted add(uint32_t asn, uint64_t bytes);

  // Ranks ASNs by decayed bytes and fixes the top-N for the flows from now on.
  void recompute();
  // Config reload; a new top_n ranks at once (returns true then).
  bool update_options(AsnRankingOptions options);

  AsnLabel label(uint32_t asn) const;
  // "0", "other" or the number.
  std::string label_text(uint32_t asn) const;
  // Current top-N, most bytes first.
  const std::vector<uint32_t>& top() const { return top_; }
  // Flows whose ASN found the tracking table full (labelled "other").
  uint64_t untracked_flows() const { return untracked_flows_; }

 private:
  struct Entry {
    double bytes = 0;
    bool top = false;
  };

  AsnRankingOptions options_;
  std::unordered_map<uint32_t, Entry> bytes_;
  std::vector<uint32_t> top_;
  uint64_t untracked_flows_ = 0;
  Clock::time_point created_;
  Clock::time_point last_recompute_;
  uint64_t flows_since_recompute_ = 0;
};

}  // namespace tcpscope
