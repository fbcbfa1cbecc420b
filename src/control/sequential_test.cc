#include "control/sequential_test.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

namespace tcpscope {

void LogMoments::add(double value) {
  if (value > 0 && std::isfinite(value)) add_log(std::log(value));
}
void LogMoments::add_log(double x) {
  ++n;
  const double d = x - mean;
  mean += d / static_cast<double>(n);
  m2 += d * (x - mean);
}
void LogMoments::merge(const LogMoments& o) {
  if (!o.n) return;
  if (!n) {
    *this = o;
    return;
  }
  const double na = static_cast<double>(n), nb = static_cast<double>(o.n), d = o.mean - mean;
  mean += d * nb / (na + nb);
  m2 += o.m2 + d * d * na * nb / (na + nb);
  n += o.n;
}
LogMoments LogMoments::since(const LogMoments& earlier) const {
  if (!earlier.n) return *this;
  if (earlier.n >= n) return {};
  const double na = static_cast<double>(earlier.n), nb = static_cast<double>(n - earlier.n);
  LogMoments b;
  b.n = n - earlier.n;
  b.mean = (static_cast<double>(n) * mean - na * earlier.mean) / nb;
  const double d = b.mean - earlier.mean;
  b.m2 = std::max(0.0, m2 - earlier.m2 - d * d * na * nb / static_cast<double>(n));
  return b;
}

double LogMoments::variance() const { return n < 2 ? 0 : m2 / static_cast<double>(n - 1); }
void Proportion::add(double e, double t) {
  events += e;
  trials += t;
}
double Proportion::share() const { return trials > 0 ? events / trials : 0; }

namespace {
SequentialResult msprt(double theta, double v, double tau, double alpha) {
  SequentialResult r;
  if (!(v > 0) || !std::isfinite(v)) return r;
  r.testable = true;
  const double t2 = tau * tau;
  const double log_e = 0.5 * std::log(v / (v + t2)) + t2 * theta * theta / (2 * v * (v + t2));
  r.e_value = std::exp(std::min(log_e, 690.0));
  const double half = std::sqrt(2 * v * (v + t2) / t2 * (std::log(1 / alpha) + 0.5 * std::log((v + t2) / v)));
  r.diff = theta;
  r.ci_lo = theta - half;
  r.ci_hi = theta + half;
  return r;
}
}  // namespace

SequentialResult mixture_sprt(const LogMoments& a, const LogMoments& b, double tau, double alpha) {
  if (a.n < 2 || b.n < 2) return {};
  SequentialResult r = msprt(b.mean - a.mean, a.variance() / a.n + b.variance() / b.n, tau, alpha);
  if (!r.testable) return r;
  r.diff = std::expm1(r.diff);
  r.ci_lo = std::expm1(r.ci_lo);
  r.ci_hi = std::expm1(r.ci_hi);
  return r;
}

SequentialResult mixture_sprt(const Proportion& a, const Proportion& b, double tau, double alpha) {
  if (!(a.trials > 0) || !(b.trials > 0)) return {};
  const double pa = a.share(), pb = b.share();
  return msprt(pb - pa, pa * (1 - pa) / a.trials + pb * (1 - pb) / b.trials, tau, alpha);
}

std::vector<size_t> e_benjamini_hochberg(const std::vector<double>& e, double alpha) {
  std::vector<size_t> order(e.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return e[x] > e[y]; });
  const double k_total = static_cast<double>(e.size());
  size_t k_star = 0;
  for (size_t k = 1; k <= order.size(); ++k)
    if (e[order[k - 1]] >= k_total / (alpha * static_cast<double>(k))) k_star = k;
  return {order.begin(), order.begin() + static_cast<long>(k_star)};
}

double always_valid_p(double max_e) { return max_e > 1 ? 1 / max_e : 1; }

nlohmann::json to_json(const LogMoments& m) { return {{"n", m.n}, {"mean", m.mean}, {"m2", m.m2}}; }
bool from_json(const nlohmann::json& j, LogMoments* out) {
  if (!j.is_object() || !j.contains("n") || !j["n"].is_number_unsigned() || !j.contains("mean") ||
      !j["mean"].is_number() || !j.contains("m2") || !j["m2"].is_number())
    return false;
  LogMoments m{j["n"].get<uint64_t>(), j["mean"].get<double>(), j["m2"].get<double>()};
  if (!std::isfinite(m.mean) || !std::isfinite(m.m2) || m.m2 < 0) return false;
  *out = m;
  return true;
}
nlohmann::json to_json(const Proportion& p) { return {{"events", p.events}, {"trials", p.trials}}; }
bool from_json(const nlohmann::json& j, Proportion* out) {
  if (!j.is_object() || !j.contains("events") || !j["events"].is_number() || !j.contains("trials") ||
      !j["trials"].is_number())
    return false;
  Proportion p{j["events"].get<double>(), j["trials"].get<double>()};
  if (!std::isfinite(p.events) || !std::isfinite(p.trials) || p.events < 0 || p.trials < 0) return false;
  *out = p;
  return true;
}

}  // namespace tcpscope
