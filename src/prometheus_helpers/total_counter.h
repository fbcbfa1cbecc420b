// A Prometheus counter fed from a cumulative total that something else keeps
// (a kernel map's counter, the flow-log writer's count) and the daemon
// samples: each sample advances the counter by what the total grew.
#pragma once

#include <cstdint>

#include "prometheus_helpers/prometheus_fwd.h"

namespace tcpscope {

class TotalCounter {
 public:
  explicit TotalCounter(prometheus::Counter* counter = nullptr) : counter_(counter) {}

  // A total below the last one means its source restarted (a reloaded map,
  // a reopened flow log): everything it reports since then is new.
  void set(uint64_t total);

 private:
  prometheus::Counter* counter_;
  uint64_t last_total_ = 0;
};

}  // namespace tcpscope
