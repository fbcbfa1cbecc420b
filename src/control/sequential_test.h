// Placeholder until the statistics module lands (same API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tcpscope {

struct LogMoments {
  uint64_t n = 0;
  double mean = 0;
  double m2 = 0;
  void add(double value);
  void add_log(double log_value);
  void merge(const LogMoments& o);
  double variance() const;
};

struct Proportion {
  double events = 0, trials = 0;
  void add(double e, double t);
  double share() const;
};

struct SequentialResult {
  bool testable = false;
  double diff = 0;
  double ci_lo = 0, ci_hi = 0;
  double e_value = 1;
};

SequentialResult mixture_sprt(const LogMoments& a, const LogMoments& b, double tau, double alpha);
SequentialResult mixture_sprt(const Proportion& a, const Proportion& b, double tau, double alpha);
std::vector<size_t> e_benjamini_hochberg(const std::vector<double>& e_values, double alpha);
double always_valid_p(double max_e_so_far);

nlohmann::json to_json(const LogMoments& m);
bool from_json(const nlohmann::json& j, LogMoments* out);
nlohmann::json to_json(const Proportion& p);
bool from_json(const nlohmann::json& j, Proportion* out);

}  // namespace tcpscope
