// A metric family registered with its name and help, as every class that
// exports metrics makes its own; the caller adds the labelled series.
#pragma once

#include "prometheus_helpers/prometheus_fwd.h"

namespace tcpscope {

prometheus::Family<prometheus::Counter>* counter_family(prometheus::Registry& registry, const char* name,
                                                        const char* help);
prometheus::Family<prometheus::Gauge>* gauge_family(prometheus::Registry& registry, const char* name,
                                                    const char* help);
prometheus::Family<prometheus::Histogram>* histogram_family(prometheus::Registry& registry, const char* name,
                                                            const char* help);

}  // namespace tcpscope
