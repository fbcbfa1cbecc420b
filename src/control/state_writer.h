// Writes the controller's state off the daemon's loop thread: fitting it
// within what loading accepts (state_fit.h), serialising it and the
// write-fsync-rename (controller_store.h) run on a thread of their own, so a
// slow disk never stalls the ring buffer's drain. One state waits at most: a
// newer one replaces it (what a restart needs is the latest, and a disk that
// cannot keep up with one state per interval would only fall further behind
// with a queue).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/controller_store.h"

namespace tcpscope {

class StateWriter {
 public:
  explicit StateWriter(const ControllerStore& store);
  // Drops a state still waiting (flush() first to keep it). A write under
  // way is not waited for: the thread ends on its own, owning all it uses,
  // and an exit meanwhile leaves the previous state whole (the rename has
  // not happened). So a stop waits no longer than flush()'s timeout, even
  // on a disk that hangs.
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Hands `state` to the writer; a state still waiting is replaced.
  void save(nlohmann::json state);
  // Waits until every state handed over is written (or failed), at most
  // `timeout`; false if it is not by then.
  bool flush(std::chrono::milliseconds timeout);
  // What the writes had to say since the last call, each once while it
  // lasts: a failure ("controller state not saved: ..."; a state over the
  // cap, whose size changes at every save, is one failure, and the previous
  // state, stale then, is set aside: controller_store.h), and what was
  // trimmed to fit, with counts (state_fit.h). For the loop thread to log.
  std::vector<std::string> take_messages();

 private:
  // What the thread uses: shared, so that it outlives a writer destroyed
  // while a write is under way.
  struct Shared;
  static void run(const std::shared_ptr<Shared>& s);
  static void write(Shared& s, nlohmann::json state);

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace tcpscope
