#include "prometheus_helpers/total_counter.h"

#include <prometheus/counter.h>

namespace tcpscope {

void TotalCounter::set(uint64_t total) {
  const uint64_t delta = total >= last_total_ ? total - last_total_ : total;
  if (delta) counter_->Increment(static_cast<double>(delta));
  last_total_ = total;
}

}  // namespace tcpscope
