#include "http/response_budget.h"

namespace tcpscope {

bool ResponseBudget::fits(const Body& body) const {
  if (holders_.count(body.get())) return true;
  return used() == 0 || used() + body->size() <= limit_;
}

void ResponseBudget::hold(const Body& body, size_t head_bytes) {
  add(head_bytes);
  if (++holders_[body.get()] == 1) add(body->size());
}

void ResponseBudget::release(const Body& body, size_t head_bytes) {
  subtract(head_bytes);
  auto it = holders_.find(body.get());
  if (it == holders_.end()) return;
  if (--it->second == 0) {
    subtract(body->size());
    holders_.erase(it);
  }
}

}  // namespace tcpscope
