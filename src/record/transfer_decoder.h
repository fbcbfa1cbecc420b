// Turns the kernel's transfer event into a TransferRecord: monotonic times to
// wall-clock with the flow decoder's clock, addresses and strings as the
// flow decoder reads them, and xfer_us.
#pragma once

#include "record/flow_decoder.h"
#include "record/transfer_record.h"
#include "tcpscope/flow_event.h"

namespace tcpscope {

// `sends`: how this kernel delimits send transfers (kWrite or kDeparture).
TransferRecord decode_transfer_event(const tcpscope_transfer_event& ev, const MonotonicToRealtime& clock,
                                     TransferDelimiter sends);

}  // namespace tcpscope
