// The memory that answers waiting to be sent hold, against a limit. A body
// several connections share (one answer to many queued requests) is one
// string in memory and counts once, from when the first connection takes it
// until the last one holding it lets go; a connection's head counts for that
// connection alone. So a crowd of clients that ask for the same answer and
// never read it costs what it really holds, not one copy per client.
//
// Only the server's I/O thread changes it; used() may be read from any.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

namespace tcpscope {

class ResponseBudget {
 public:
  using Body = std::shared_ptr<const std::string>;

  explicit ResponseBudget(size_t limit) : limit_(limit) {}

  // Past the limit: a new request is refused.
  bool exhausted() const { return used() > limit_; }
  // Whether an answer with this body may be sent: a body some connection
  // already holds costs nothing more; any body fits while nothing is held.
  bool fits(const Body& body) const;
  // A connection takes an answer: its head, and the body unless it is held already.
  void hold(const Body& body, size_t head_bytes);
  // The connection lets go of what hold() took; the body's bytes go with its last holder.
  void release(const Body& body, size_t head_bytes);
  size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  void add(size_t bytes) { used_.store(used() + bytes, std::memory_order_relaxed); }
  void subtract(size_t bytes) { used_.store(used() - bytes, std::memory_order_relaxed); }

  const size_t limit_;
  std::atomic<size_t> used_{0};
  // Connections holding each body. A key stays valid while it is here: its
  // holders keep the string alive.
  std::unordered_map<const std::string*, size_t> holders_;
};

}  // namespace tcpscope
