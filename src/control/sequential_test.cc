#include "control/sequential_test.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <nlohmann/json.hpp>

namespace tcpscope {

void ClusteredRatio::add(ClusterSums* c, double dy, double dx) {
  if (c->x == 0) ++clusters;
  y += dy;
  x += dx;
  yy += dy * (2 * c->y + dy);
  xy += c->y * dx + dy * c->x + dy * dx;
  xx += dx * (2 * c->x + dx);
  c->y += dy;
  c->x += dx;
}

double ClusteredRatio::variance() const {
  if (clusters < 2 || !(x > 0)) return 0;
  const double r = y / x;
  const double residual = std::max(0.0, yy - 2 * r * xy + r * r * xx);
  const double k = static_cast<double>(clusters);
  return k / (k - 1) * residual / (x * x);
}

namespace {

constexpr double kMaxLogE = 690;  // e^690: below DBL_MAX

// log e of the t mixture at statistic t, nu degrees of freedom, rho = tau^2 / V.
double log_e(double t, double nu, double rho) {
  const double t2 = t * t;
  return -0.5 * std::log1p(rho) + (nu + 1) / 2 * (std::log1p(t2 / nu) - std::log1p(t2 / (nu * (1 + rho))));
}

// The |t| at which the e-value reaches 1/alpha, infinity when it never does
// (its supremum, (1 + rho)^(nu/2), is below).
double t_boundary(double nu, double rho, double alpha) {
  const double target = std::log(1 / alpha);
  if (nu / 2 * std::log1p(rho) <= target) return std::numeric_limits<double>::infinity();
  double lo = 0, hi = 1;
  for (int i = 0; i < 200 && log_e(hi, nu, rho) < target; ++i) hi *= 2;
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    (log_e(mid, nu, rho) < target ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace

SequentialResult mixture_sprt(const ClusteredRatio& a, const ClusteredRatio& b, double tau, double alpha) {
  SequentialResult r;
  if (a.clusters < 2 || b.clusters < 2) return r;
  const double va = a.variance(), vb = b.variance(), v = va + vb;
  if (!(v > 0) || !std::isfinite(v)) return r;
  const double ka = a.effective_clusters() - 1, kb = b.effective_clusters() - 1;
  if (!(ka > 0) || !(kb > 0)) return r;
  r.testable = true;
  r.dof = v * v / (va * va / ka + vb * vb / kb);
  const double rho = tau * tau / v;
  r.diff = b.ratio() - a.ratio();
  const double t = r.diff / std::sqrt(v);
  r.e_value = std::exp(std::min(log_e(t, r.dof, rho), kMaxLogE));
  const double half = t_boundary(r.dof, rho, alpha) * std::sqrt(v);
  r.ci_lo = r.diff - half;
  r.ci_hi = r.diff + half;
  return r;
}

SequentialResult as_relative_change(SequentialResult r) {
  r.diff = std::expm1(r.diff);
  r.ci_lo = std::expm1(r.ci_lo);
  r.ci_hi = std::expm1(r.ci_hi);
  return r;
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

nlohmann::json to_json(const ClusteredRatio& r) {
  return {{"clusters", r.clusters}, {"y", r.y}, {"x", r.x}, {"yy", r.yy}, {"xy", r.xy}, {"xx", r.xx}};
}

bool from_json(const nlohmann::json& j, ClusteredRatio* out) {
  if (!j.is_object()) return false;
  for (const char* k : {"y", "x", "yy", "xy", "xx"})
    if (!j.contains(k) || !j[k].is_number() || !std::isfinite(j[k].get<double>())) return false;
  if (!j.contains("clusters") || !j["clusters"].is_number_unsigned()) return false;
  ClusteredRatio r;
  r.clusters = j["clusters"].get<uint64_t>();
  r.y = j["y"].get<double>();
  r.x = j["x"].get<double>();
  r.yy = j["yy"].get<double>();
  r.xy = j["xy"].get<double>();
  r.xx = j["xx"].get<double>();
  const double k = static_cast<double>(r.clusters);
  // Every cluster has x >= 1 (a value, or a flow's segments), and by
  // Cauchy-Schwarz sum x_c^2 >= (sum x_c)^2 / K, likewise for y, and
  // (sum x_c y_c)^2 <= sum x_c^2 * sum y_c^2: a state that breaks these was
  // not made by add(). The slack is for rounding.
  constexpr double kSlack = 1e-9;
  const bool empty_ok = r.clusters > 0 || (r.y == 0 && r.x == 0 && r.yy == 0 && r.xy == 0 && r.xx == 0);
  if (!empty_ok || r.x < k || r.x > 1e15 || r.yy < 0 || r.xx < 0) return false;
  if (r.clusters > 0 && (r.xx * k < r.x * r.x * (1 - kSlack) || r.yy * k < r.y * r.y * (1 - kSlack) ||
                         r.xy * r.xy > r.xx * r.yy * (1 + kSlack)))
    return false;
  *out = r;
  return true;
}

}  // namespace tcpscope
