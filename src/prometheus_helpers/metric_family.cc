#include "prometheus_helpers/metric_family.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace tcpscope {

prometheus::Family<prometheus::Counter>* counter_family(prometheus::Registry& registry, const char* name,
                                                        const char* help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Gauge>* gauge_family(prometheus::Registry& registry, const char* name,
                                                    const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Histogram>* histogram_family(prometheus::Registry& registry, const char* name,
                                                            const char* help) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

}  // namespace tcpscope
