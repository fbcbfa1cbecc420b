// Writes the controller's state off the daemon's loop thread: fitting it
// within what loading accepts (state_fit.h), serialising it and the
// write-fsync-rename (controller_store.h) run on a thread of their own, so a
// slow disk never stalls the ring buffer's drain. One state waits at most: a
// newer one replaces it (what a restart needs is the latest, and a disk that
// cannot keep up with one state per interval would only fall further behind
// with a queue).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/controller_store.h"

namespace tcpscope {

class StateWriter {
 public:
  explicit StateWriter(const ControllerStore& store);
  // Finishes the write under way; a state still waiting is dropped (flush()
  // first to keep it).
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Hands `state` to the writer; a state still waiting is replaced.
  void save(nlohmann::json state);
  // Waits until every state handed over is written (or failed), at most
  // `timeout`; false if it is not by then.
  bool flush(std::chrono::milliseconds timeout);
  // What the writes had to say since the last call, each once while it
  // lasts: a failure ("controller state not saved: ..."), and what was
  // trimmed to fit. For the loop thread to log.
  std::vector<std::string> take_messages();
  // States replaced before they were written, since the start.
  uint64_t replaced() const;

 private:
  void run();
  void write(nlohmann::json state);

  const ControllerStore& store_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<nlohmann::json> waiting_;
  bool writing_ = false;
  bool stopping_ = false;
  uint64_t replaced_ = 0;
  std::vector<std::string> messages_;
  std::string last_error_;  // the writer thread's, to say each once
  bool trimming_ = false;
  std::thread thread_;
};

}  // namespace tcpscope
