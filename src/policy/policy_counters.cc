#include "policy/policy_counters.h"

namespace tcpscope {

const char* app_cc_action_name(uint32_t action) {
  switch (action) {
    case TCPSCOPE_APP_CC_OVERRIDDEN: return "overridden";
    case TCPSCOPE_APP_CC_REFUSED: return "refused";
    default: return "observed";
  }
}

const char* sysctl_name(uint32_t name_idx) {
  static const char* const kNames[TCPSCOPE_SYSCTL_NAMES] = {"net.ipv4." TCPSCOPE_SYSCTL_CC,
                                                            "net.ipv4." TCPSCOPE_SYSCTL_ALLOWED_CC};
  return kNames[name_idx];
}

}  // namespace tcpscope
