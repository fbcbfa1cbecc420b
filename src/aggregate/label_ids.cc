#include "aggregate/label_ids.h"

namespace tcpscope {

const std::string& LabelIds::overflow_name() {
  static const std::string name = "other";
  return name;
}

}  // namespace tcpscope
