#include "compare/compare.h"

#include "compare/metric_text.h"
#include "text/unit_text.h"
#include "text/utf8_text.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tcpscope {

namespace {

ArmSummary summarize(const ArmDistribution& d, const std::vector<ReportedQuantile>& quantiles) {
  ArmSummary s;
  s.n = d.count();
  s.mean = d.mean();
  for (const ReportedQuantile& rq : quantiles) {
    ArmQuantile q;
    if (s.n >= rq.min_count) {
      q.value = d.quantile(rq.q);
      if (d.binned()) q.bucket = d.quantile_bucket(rq.q);
    }
    s.quantiles.push_back(q);
  }
  return s;
}

// "(a, b]" in the metric's units, for the buckets of binned samples.
std::string bucket_text(Measure m, const BucketBounds& b) {
  return "(" + format_metric_value(m, b.lo) + ", " + (std::isinf(b.hi) ? "+Inf" : format_metric_value(m, b.hi)) +
         "]";
}

// Why a binned group's verdict is limited by its buckets, or "".
std::string resolution_note_of(const GroupResult& g, Measure m) {
  const MedianChange& c = g.change;
  if (!c.binned || g.verdict != Verdict::kNoDifference || !(c.binned_lo <= 0 && c.binned_hi >= 0)) return "";
  const bool same = c.a_bucket.lo == c.b_bucket.lo;
  const bool adjacent = c.a_bucket.hi == c.b_bucket.lo || c.b_bucket.hi == c.a_bucket.lo;
  if (!same && !adjacent) return "";
  auto bound = [](double v) { return std::isinf(v) ? std::string("+Inf") : percent_change_text(v); };
  return std::string("unresolved at bucket resolution: the medians lie in ") +
         (same ? "the same bucket " + bucket_text(m, c.a_bucket)
               : "adjacent buckets, A " + bucket_text(m, c.a_bucket) + " and B " + bucket_text(m, c.b_bucket)) +
         ", so the change of the median is only known to lie in [" + bound(c.binned_lo) + ", " +
         bound(c.binned_hi) + "]";
}

uint64_t group_seed(const GroupSamples& g, const CompareOptions& o) {
  return fnv1a(std::string(to_string(o.metric)) + "\x1f" + g.group + "\x1f" + g.size_class.value_or("") + "\x1f" +
               std::to_string(o.seed));
}

// JSON number, or null for NaN / infinity (JSON has neither).
nlohmann::ordered_json num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}
nlohmann::ordered_json num(const std::optional<double>& v) { return v ? num(*v) : nlohmann::ordered_json(nullptr); }

std::string pvalue_text(const std::optional<double>& p) {
  if (!p) return "-";
  char buf[32];
  if (*p >= 0.001)
    std::snprintf(buf, sizeof(buf), "%.3f", *p);
  else if (*p > 0)
    std::snprintf(buf, sizeof(buf), "%.1e", *p);
  else
    std::snprintf(buf, sizeof(buf), "<1e-300");
  return buf;
}

// Word-wraps a footnote to `width` columns; continuation lines are indented.
std::string wrap(const std::string& text, size_t width = 100) {
  std::string out, line;
  std::istringstream words(text);
  std::string w;
  while (words >> w) {
    if (!line.empty() && line.size() + 1 + w.size() > width) {
      out += line + "\n";
      line = "  ";
    }
    line += (line.empty() || line == "  " ? "" : " ") + w;
  }
  return out + line + "\n";
}

}  // namespace

std::string ci_method_note(const CompareOptions& o) {
  return "diff = (median B - median A) / median A; 95% CI: percentile bootstrap of that change, " +
         std::to_string(o.resamples) + " resamples (each resample's median drawn exactly as an order statistic), " +
         "seed " + std::to_string(o.seed) +
         " mixed with the group name. Bootstrap rather than Hodges-Lehmann: HL estimates a shift of pairwise "
         "differences, not the change of the median reported here.";
}

std::string share_statistic_note() {
  return "diff of share>0: where A's median is 0 (most flows of the metric are 0, e.g. retrans), diff and its "
         "95% CI are the relative change of the share of flows with a nonzero value (for retrans: flows that "
         "retransmitted at all), (share B - share A) / share A, bootstrapped with binomial resamples of the two "
         "shares; exact in both modes, since sketches count zeros exactly.";
}

std::string bucket_resolution_note() {
  return "Histogram buckets: counts per bucket (lo, hi] only; each value sits at its bucket's geometric midpoint "
         "(the first bucket at hi/2, the +Inf bucket at lo), quantiles are shown as the bucket they lie in, and "
         "the rank test treats a bucket as one tie group. A median is only known to lie in its bucket, so the "
         "change from A to B only in [lo B / hi A - 1, hi B / lo A - 1]: the 95% CI is the percentile bootstrap "
         "of those bounds (lower bounds for the lower end, upper bounds for the upper end) joined with the "
         "observed medians' bounds, and a verdict needs it to exclude 0. Medians in the same or adjacent buckets "
         "never get one: 'unresolved at bucket resolution'.";
}

std::string quantile_note(const CompareOptions& o) {
  std::string needs;
  for (const ReportedQuantile& q : o.quantiles)
    needs += (needs.empty() ? "" : ", ") + q.key + ": " + std::to_string(q.min_count);
  return std::string("Quantiles: the q-quantile is the order statistic of rank floor(q (n - 1)) of an arm's n ") +
         unit_plural(o.unit) + " (no interpolation). An arm of fewer than 1/(1 - q) of them (" + needs +
         ") cannot hold it: n/a (null in JSON), never estimated.";
}

std::string test_method_note(const CompareOptions& o) {
  const std::string one = to_string(o.unit);
  return "p: two-sided Mann-Whitney U test (normal approximation with tie and continuity correction); "
         "P(B better) is the probability that a random B " + one + " beats a random A " + one + ".";
}

std::string fdr_note(const CompareResult& r) {
  char alpha[16];
  std::snprintf(alpha, sizeof(alpha), "%g", r.options.alpha);
  return "q: Benjamini-Hochberg adjustment over the " + std::to_string(r.groups_tested) +
         " groups tested; a verdict other than 'no significant difference' needs q < " + alpha +
         " and a diff interval that excludes 0 on the same side (or no interval, with its reason), which keeps "
         "the expected share of false discoveries among the groups below " + alpha + ".";
}

std::string min_sample_note(const CompareOptions& o) {
  return "insufficient data: fewer than " + std::to_string(o.min_sample) + " " + unit_plural(o.unit) +
         " in an arm (below that the normal approximation of U and the bootstrap interval of a median lose "
         "their stated accuracy and coverage).";
}

CompareResult compare_groups(std::vector<GroupSamples> groups, const CompareOptions& options) {
  CompareResult r;
  r.options = options;
  for (const auto& g : groups)
    r.relative_accuracy = std::max({r.relative_accuracy, g.a.relative_accuracy(), g.b.relative_accuracy()});

  // Order: groups with the most flows (over all their size classes) first.
  std::map<std::string, uint64_t> group_flows;
  for (const auto& g : groups) group_flows[g.group] += g.a.count() + g.b.count();
  std::sort(groups.begin(), groups.end(), [&](const GroupSamples& x, const GroupSamples& y) {
    const uint64_t fx = group_flows[x.group], fy = group_flows[y.group];
    if (fx != fy) return fx > fy;
    if (x.group != y.group) return x.group < y.group;
    return x.size_class_order < y.size_class_order;
  });

  std::vector<std::optional<double>> p(groups.size());
  std::vector<RankSumResult> tests(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    GroupResult res;
    res.group = g.group;
    res.size_class = g.size_class;
    res.a = summarize(g.a, options.quantiles);
    res.b = summarize(g.b, options.quantiles);
    const bool enough = res.a.n >= options.min_sample && res.b.n >= options.min_sample;
    // The point estimate is shown whenever both arms have flows; the
    // interval and the test only when the sample is large enough.
    res.change = bootstrap_median_change(g.a, g.b, enough ? options.resamples : 0, group_seed(g, options));
    if (!enough) res.change.ci_reason = "insufficient data";
    res.sketch_collapsed = g.a.collapsed() || g.b.collapsed();
    res.sketch_clamped = g.a.clamped() + g.b.clamped();
    if (enough) {
      tests[i] = rank_sum_test(g.a, g.b);
      p[i] = tests[i].p_value;
      res.p_value = p[i];
      const double pb = tests[i].prob_b_lower;
      res.prob_b_better = lower_is_better(options.metric) ? pb : 1 - pb;
      ++r.groups_tested;
    }
    r.groups.push_back(std::move(res));
  }
  const auto q = benjamini_hochberg(p);
  for (size_t i = 0; i < r.groups.size(); ++i) {
    GroupResult& res = r.groups[i];
    res.q_value = q[i];
    VerdictInputs in;
    in.n_a = res.a.n;
    in.n_b = res.b.n;
    in.min_sample = options.min_sample;
    in.q_value = q[i];
    in.alpha = options.alpha;
    in.prob_b_lower = tests[i].prob_b_lower;
    in.change = res.change;
    in.lower_is_better = lower_is_better(options.metric);
    res.verdict = decide_verdict(in);
    if (res.p_value) res.resolution_note = resolution_note_of(res, options.metric);
  }
  r.groups_total = r.groups.size();
  // Warnings about the groups' numbers, before --top drops rows.
  std::vector<std::string> collapsed, clamped, no_ci;
  uint64_t clamped_flows = 0;
  auto name = [](const GroupResult& g) { return g.group + (g.size_class ? " " + *g.size_class : ""); };
  for (const auto& g : r.groups) {
    if (g.sketch_collapsed) collapsed.push_back(name(g));
    if (g.sketch_clamped) {
      clamped.push_back(name(g));
      clamped_flows += g.sketch_clamped;
    }
    if (g.verdict != Verdict::kInsufficientData && !g.change.lo && !g.change.ci_reason.empty())
      no_ci.push_back(name(g) + ": " + g.change.ci_reason);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 8) s += " and " + std::to_string(v.size() - 8) + " more";
    return s;
  };
  if (!collapsed.empty())
    r.notes.push_back("warning: the daemon's sketches collapsed their lowest buckets (max_buckets smaller than "
                      "the metric's span) in " + list(collapsed) +
                      ": their low quantiles and intervals are not within the stated relative error.");
  if (!clamped.empty())
    r.notes.push_back("note: " + std::to_string(clamped_flows) + " " + unit_plural(options.unit) +
                      " lay outside the sketches' span and were counted at its end (" + list(clamped) +
                      "); their own ranks read as the span's end, every other quantile keeps the stated error.");
  for (size_t i = 0; i < no_ci.size() && i < 8; ++i) r.notes.push_back("no 95% CI for " + no_ci[i] + ".");
  std::vector<std::string> unresolved;
  for (const auto& g : r.groups)
    if (!g.resolution_note.empty()) unresolved.push_back(name(g) + ": " + g.resolution_note);
  for (size_t i = 0; i < unresolved.size() && i < 8; ++i) r.notes.push_back(unresolved[i] + ".");
  if (unresolved.size() > 8)
    r.notes.push_back("(" + std::to_string(unresolved.size() - 8) + " more groups unresolved at bucket resolution)");
  if (no_ci.size() > 8) r.notes.push_back("(" + std::to_string(no_ci.size() - 8) + " more groups without a CI)");
  if (options.top && r.groups.size() > options.top) {
    // Whole groups (all their size classes) are kept or dropped together.
    std::vector<std::string> kept;
    std::vector<GroupResult> out;
    for (auto& g : r.groups) {
      if (std::find(kept.begin(), kept.end(), g.group) == kept.end()) {
        if (kept.size() >= options.top) continue;
        kept.push_back(g.group);
      }
      out.push_back(std::move(g));
    }
    r.groups = std::move(out);
  }
  return r;
}

CompareResult compare_samples(CompareSamples samples, CompareOptions options, const std::string& source) {
  options.metric_options = std::move(samples.metric_options);
  CompareResult r = compare_groups(std::move(samples.groups), options);
  r.source = source;
  r.size_classes = std::move(samples.size_classes);
  samples.notes.insert(samples.notes.end(), r.notes.begin(), r.notes.end());
  r.notes = std::move(samples.notes);
  return r;
}

nlohmann::ordered_json compare_result_json(const CompareResult& r) {
  const CompareOptions& o = r.options;
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  bool binned = false;
  for (const auto& g : r.groups) binned = binned || g.change.binned;
  // The report's values are for people: in display_unit(), like the table.
  const double scale = display_scale(o.metric);
  auto shown = [scale](const std::optional<double>& v) { return v ? num(*v * scale) : num(v); };
  auto bucket = [scale](const std::optional<BucketBounds>& b) {
    if (!b) return nlohmann::ordered_json(nullptr);
    return nlohmann::ordered_json::array({b->lo * scale, num(b->hi * scale)});  // +Inf: null
  };
  auto arm = [&](const ArmSummary& s) {
    nlohmann::ordered_json j, buckets;
    for (size_t i = 0; i < o.quantiles.size(); ++i) {
      j[o.quantiles[i].key] = shown(s.quantiles[i].value);
      buckets[o.quantiles[i].key] = bucket(s.quantiles[i].bucket);
    }
    j["mean"] = s.n ? shown(s.mean) : nullptr;
    if (binned) j["bucket_bounds"] = std::move(buckets);
    return j;
  };
  for (const auto& g : r.groups) {
    nlohmann::ordered_json j;
    j["group"] = g.group;
    j["size_class"] = g.size_class ? nlohmann::ordered_json(*g.size_class) : nlohmann::ordered_json(nullptr);
    j["n_a"] = g.a.n;
    j["n_b"] = g.b.n;
    j["a"] = arm(g.a);
    j["b"] = arm(g.b);
    j["diff"] = num(g.change.diff);
    // Two finite numbers or null, never a pair holding null.
    const bool ci = g.change.lo && g.change.hi && std::isfinite(*g.change.lo) && std::isfinite(*g.change.hi);
    if (ci)
      j["ci"] = nlohmann::ordered_json::array({*g.change.lo, *g.change.hi});
    else
      j["ci"] = nullptr;
    j["p_value"] = num(g.p_value);
    j["q_value"] = num(g.q_value);
    j["prob_b_better"] = g.p_value ? num(g.prob_b_better) : nlohmann::ordered_json(nullptr);
    j["verdict"] = to_string(g.verdict);
    j["diff_statistic"] = to_string(g.change.statistic);
    if (ci)
      j["ci_reason"] = nullptr;
    else
      j["ci_reason"] = g.change.ci_reason.empty() ? std::string("no interval") : g.change.ci_reason;
    j["sketch_collapsed"] = g.sketch_collapsed;
    j["sketch_clamped"] = g.sketch_clamped;
    if (binned) {
      // The interval the verdict used, half-infinite ends as null.
      j["binned_interval"] = g.change.binned
                                 ? nlohmann::ordered_json::array({num(g.change.binned_lo), num(g.change.binned_hi)})
                                 : nlohmann::ordered_json(nullptr);
      j["resolution_note"] =
          g.resolution_note.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.resolution_note);
    }
    groups.push_back(std::move(j));
  }
  nlohmann::ordered_json out;
  out["metric"] = to_string(o.metric);
  out["a"] = o.a;
  out["b"] = o.b;
  out["groups"] = std::move(groups);
  out["by"] = o.by;
  out["unit"] = to_string(o.unit);
  out["value_unit"] = display_unit(o.metric);
  out["lower_is_better"] = lower_is_better(o.metric);
  out["description"] = metric_description(o.metric, o.unit, o.metric_options.throughput_min_bytes);
  out["source"] = r.source;
  out["relative_accuracy"] = r.relative_accuracy;
  out["throughput_min_bytes"] = o.metric_options.throughput_min_bytes;
  out["alpha"] = o.alpha;
  out["min_sample"] = o.min_sample;
  nlohmann::ordered_json quantiles = nlohmann::ordered_json::array();
  for (const ReportedQuantile& q : o.quantiles)
    quantiles.push_back({{"key", q.key}, {"q", q.q}, {"min_n", q.min_count}});
  out["quantiles"] = std::move(quantiles);
  out["groups_tested"] = r.groups_tested;
  out["groups_total"] = r.groups_total;
  out["ci_method"] = ci_method_note(o);
  out["test_method"] = test_method_note(o);
  out["fdr_note"] = fdr_note(r);
  out["min_sample_note"] = min_sample_note(o);
  out["quantile_note"] = quantile_note(o);
  out["diff_statistic_note"] = share_statistic_note();
  if (binned) out["bucket_resolution_note"] = bucket_resolution_note();
  out["notes"] = r.notes;
  return out;
}

std::string format_compare_table(const CompareResult& r) {
  const CompareOptions& o = r.options;
  const Measure m = o.metric;
  const bool sized = split_by_size_class(m);
  bool any_share = false, binned = false;
  for (const auto& g : r.groups) {
    any_share = any_share || g.change.statistic == ChangeStatistic::kShareNonzero;
    binned = binned || g.change.binned;
  }
  std::vector<std::string> header = {o.by == "all" ? "group" : o.by};
  if (sized) header.push_back("size_class");
  header.push_back("n_a");
  header.push_back("n_b");
  for (const char* arm : {"A ", "B "})
    for (const ReportedQuantile& q : o.quantiles) header.push_back(arm + q.key);
  if (any_share) header.push_back("diff of");
  for (const char* h : {"diff", "95% CI", "p", "q", "P(B better)", "verdict"}) header.push_back(h);
  std::vector<std::vector<std::string>> rows;
  bool unavailable = false;  // a quantile an arm is too small to hold
  for (const auto& g : r.groups) {
    // A group may be a process or AS name: shown, never obeyed by the terminal.
    std::vector<std::string> row = {printable_text(g.group)};
    if (sized) row.push_back(printable_text(g.size_class.value_or("-")));
    row.push_back(std::to_string(g.a.n));
    row.push_back(std::to_string(g.b.n));
    for (const ArmSummary* s : {&g.a, &g.b}) {
      for (const ArmQuantile& q : s->quantiles) {
        unavailable = unavailable || (s->n && !q.value);
        row.push_back(!s->n       ? "-"
                      : !q.value  ? "n/a"
                      : q.bucket  ? bucket_text(m, *q.bucket)
                                  : format_metric_value(m, *q.value));
      }
    }
    if (any_share) row.push_back(g.change.statistic == ChangeStatistic::kShareNonzero ? "share>0" : "median");
    row.push_back(g.change.diff ? percent_change_text(*g.change.diff) : "-");
    row.push_back(g.change.lo && g.change.hi
                      ? "[" + percent_change_text(*g.change.lo) + ", " + percent_change_text(*g.change.hi) + "]"
                      : "-");
    row.push_back(pvalue_text(g.p_value));
    row.push_back(pvalue_text(g.q_value));
    if (g.p_value) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "%.3f", g.prob_b_better);
      row.push_back(buf);
    } else {
      row.push_back("-");
    }
    row.push_back(g.resolution_note.empty() ? to_string(g.verdict) : "unresolved at bucket resolution");
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], display_width(row[c]));
  }
  // Text columns (group, size class, verdict) left-aligned, numbers right.
  const size_t stat_col = any_share ? (sized ? 4 : 3) + 2 * o.quantiles.size() : SIZE_MAX;
  auto left = [&](size_t c) {
    return c == 0 || (sized && c == 1) || c == stat_col || c + 1 == header.size();
  };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c) s += "  ";
      const std::string pad(width[c] - display_width(cells[c]), ' ');
      s += left(c) ? cells[c] + (c + 1 == cells.size() ? "" : pad) : pad + cells[c];
    }
    return s + "\n";
  };

  std::ostringstream out;
  out << "metric: " << to_string(m) << " = " << metric_description(m, o.unit, o.metric_options.throughput_min_bytes)
      << "\n";
  out << "A: " << o.a << "   B: " << o.b << "   by: " << o.by << "   unit: " << to_string(o.unit)
      << "   source: " << r.source;
  if (r.relative_accuracy > 0)
    out << " (quantiles within " << percent_text(r.relative_accuracy, kShortestDecimals) << ")";
  out << "\n\n";
  if (rows.empty()) {
    out << "no " << unit_plural(o.unit) << " matched A or B\n";
  } else {
    out << line(header);
    for (const auto& row : rows) out << line(row);
  }
  out << "\n";
  out << wrap(std::string(lower_is_better(m) ? "Lower" : "Higher") + " is better for " + to_string(m) + ". " +
              ci_method_note(o));
  if (any_share) out << wrap(share_statistic_note());
  if (binned) out << wrap(bucket_resolution_note());
  if (unavailable) out << wrap(quantile_note(o));
  out << wrap(test_method_note(o));
  out << wrap(fdr_note(r));
  out << wrap(min_sample_note(o));
  if (r.groups.size() < r.groups_total)
    out << "showing the " << r.groups.size() << " rows of the top " << o.top << " groups (" << r.groups_total
        << " rows in all)\n";
  for (const auto& n : r.notes) out << wrap(n);
  return out.str();
}

}  // namespace tcpscope
