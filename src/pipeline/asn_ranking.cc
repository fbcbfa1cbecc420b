#include "pipeline/asn_ranking.h"

#include <algorithm>
#include <cmath>

#include "config/config.h"

namespace tcpscope {

AsnRankingOptions AsnRankingOptions::from_config(const Config& config) {
  AsnRankingOptions o;
  o.top_n = config.asn.top_n;
  return o;
}

AsnRanking::AsnRanking(AsnRankingOptions options) : options_(std::move(options)) {
  created_ = last_recompute_ = Clock::now();
}

AsnRanking::Counted AsnRanking::add(uint32_t asn, uint64_t bytes) {
  AsnLabel label = AsnLabel::kOwn;
  if (asn != 0) {
    auto it = bytes_.find(asn);
    if (it == bytes_.end()) {
      if (bytes_.size() < options_.max_tracked_asns) {
        it = bytes_.emplace(asn, Entry{static_cast<double>(bytes), false}).first;
      } else {
        ++untracked_flows_;
      }
    } else {
      it->second.bytes += static_cast<double>(bytes);
    }
    // While the top-N has room (a young daemon, or few ASNs) an ASN joins
    // it at once rather than waiting as "other" for the next ranking.
    if (it != bytes_.end() && !it->second.top && top_.size() < options_.top_n) {
      it->second.top = true;
      top_.push_back(asn);
    }
    if (it == bytes_.end() || !it->second.top) label = AsnLabel::kOther;
  }

  // A fresh daemon labels every ASN "other" until the first ranking; rank
  // often while it warms up so the labels converge within seconds.
  bool reranked = false;
  if (++flows_since_recompute_ >= options_.warmup_recompute_flows && options_.warmup_recompute_flows > 0) {
    const double age = std::chrono::duration<double>(Clock::now() - created_).count();
    if (age < options_.warmup_seconds) {
      recompute();
      reranked = true;
    } else {
      flows_since_recompute_ = 0;
    }
  }
  return Counted{label, reranked};
}

void AsnRanking::recompute() {
  const Clock::time_point now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - last_recompute_).count();
  last_recompute_ = now;
  flows_since_recompute_ = 0;

  std::vector<std::pair<double, uint32_t>> ranked;
  ranked.reserve(bytes_.size());
  const double decay = options_.bytes_half_life_s > 0 ? std::exp2(-elapsed / options_.bytes_half_life_s) : 1.0;
  for (auto& [asn, e] : bytes_) {
    ranked.emplace_back(e.bytes, asn);
    e.bytes *= decay;
    e.top = false;
  }
  // Most bytes first; ties broken by the lower ASN so the ranking is stable.
  auto by_bytes = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  const size_t n = std::min<size_t>(options_.top_n, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.end(), by_bytes);
  top_.clear();
  for (size_t i = 0; i < n; ++i) {
    top_.push_back(ranked[i].second);
    bytes_[ranked[i].second].top = true;
  }

  // Keep the table bounded: once nearly full, keep the half with the most bytes.
  if (bytes_.size() > options_.max_tracked_asns - options_.max_tracked_asns / 10) {
    const size_t keep = std::max<size_t>(options_.max_tracked_asns / 2, n);
    if (keep < ranked.size()) {
      std::nth_element(ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.begin() + static_cast<std::ptrdiff_t>(keep),
                       ranked.end(), by_bytes);
      for (size_t i = keep; i < ranked.size(); ++i) bytes_.erase(ranked[i].second);
    }
  }
}

bool AsnRanking::update_options(AsnRankingOptions options) {
  const bool top_changed = options.top_n != options_.top_n;
  options_ = std::move(options);
  if (top_changed) recompute();
  return top_changed;
}

AsnLabel AsnRanking::label(uint32_t asn) const {
  if (asn == 0) return AsnLabel::kOwn;  // labelled "0"
  auto it = bytes_.find(asn);
  return it != bytes_.end() && it->second.top ? AsnLabel::kOwn : AsnLabel::kOther;
}

std::string AsnRanking::label_text(uint32_t asn) const {
  if (asn == 0) return "0";
  return label(asn) == AsnLabel::kOwn ? std::to_string(asn) : kOtherAsnLabel;
}

}  // namespace tcpscope
