#include "pipeline/byte_ranking.h"

#include <algorithm>
#include <cmath>

namespace tcpscope {

template <class Key>
ByteRanking<Key>::ByteRanking(ByteRankingOptions options) : options_(std::move(options)) {
  created_ = last_recompute_ = Clock::now();
}

template <class Key>
typename ByteRanking<Key>::Counted ByteRanking<Key>::add(Key key, uint64_t bytes) {
  RankedLabel label = RankedLabel::kOwn;
  if (key != 0) {
    Entry* e = bytes_.find(key);
    if (!e) {
      if (bytes_.size() < options_.max_tracked) {
        e = bytes_.try_emplace(key, Entry{static_cast<double>(bytes), false, true, last_recompute_}).first;
      } else {
        ++untracked_flows_;
      }
    } else {
      e->bytes += static_cast<double>(bytes);
      e->seen = true;
    }
    // While the top-N has room (a young daemon, or few keys) a key joins
    // it at once rather than waiting as "other" for the next ranking.
    if (e && !e->top && top_.size() < options_.top_n) {
      e->top = true;
      top_.push_back(key);
    }
    if (!e || !e->top) label = RankedLabel::kOther;
  }

  // A fresh daemon labels every key "other" until the first ranking; rank
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

template <class Key>
void ByteRanking<Key>::recompute() {
  const Clock::time_point now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - last_recompute_).count();
  last_recompute_ = now;
  flows_since_recompute_ = 0;

  std::vector<std::pair<double, Key>> ranked;
  ranked.reserve(bytes_.size());
  const double decay = options_.bytes_half_life_s > 0 ? std::exp2(-elapsed / options_.bytes_half_life_s) : 1.0;
  const bool forgets = options_.forget_after_s > 0;
  bytes_.erase_if([&](Key, Entry& e) {
    if (e.seen) {
      e.last_seen = now;
      e.seen = false;
      return false;
    }
    return forgets && std::chrono::duration<double>(now - e.last_seen).count() >= options_.forget_after_s;
  });
  bytes_.for_each([&](Key key, Entry& e) {
    ranked.emplace_back(e.bytes, key);
    e.bytes *= decay;
    e.top = false;
  });
  // Most bytes first; ties broken by the lower key so the ranking is stable.
  auto by_bytes = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  const size_t n = std::min<size_t>(options_.top_n, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.end(), by_bytes);
  top_.clear();
  for (size_t i = 0; i < n; ++i) {
    top_.push_back(ranked[i].second);
    bytes_.find(ranked[i].second)->top = true;
  }

  // Keep the table bounded: once nearly full, keep the half with the most bytes.
  if (bytes_.size() > options_.max_tracked - options_.max_tracked / 10) {
    const size_t keep = std::max<size_t>(options_.max_tracked / 2, n);
    if (keep < ranked.size()) {
      std::nth_element(ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.begin() + static_cast<std::ptrdiff_t>(keep),
                       ranked.end(), by_bytes);
      for (size_t i = keep; i < ranked.size(); ++i) bytes_.erase(ranked[i].second);
    }
  }
}

template <class Key>
bool ByteRanking<Key>::update_options(ByteRankingOptions options) {
  const bool top_changed = options.top_n != options_.top_n;
  options_ = std::move(options);
  if (top_changed) recompute();
  return top_changed;
}

template <class Key>
RankedLabel ByteRanking<Key>::label(Key key) const {
  if (key == 0) return RankedLabel::kOwn;  // the unknown value is a value of its own
  const Entry* e = bytes_.find(key);
  return e && e->top ? RankedLabel::kOwn : RankedLabel::kOther;
}

template class ByteRanking<uint32_t>;
template class ByteRanking<uint64_t>;

}  // namespace tcpscope
