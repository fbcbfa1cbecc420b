#include "aggregate/aggregate_sinks.h"

namespace tcpscope {

void AggregatorSink::apply_config(const Config& config) {
  aggregator_.update_options(AggregatorOptions::from_config(config));
}

void DistributionsSink::apply_config(const Config& config) {
  if (distributions_.update_options(FlowDistributionsOptions::from_config(config)))
    log_("reload: new size classes: the compare --server distributions start empty");
}

}  // namespace tcpscope
