// The NDJSON flow log on disk (or stdout). Writes happen on a thread of their
// own behind a bounded queue: a slow or stalled disk must never stall the
// ring-buffer reader, so when the queue is full records are dropped and counted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tcpscope {

class FlowLog {
 public:
  // path "-" is stdout. The file is created 0640 and appended to; a path
  // that is not this process's own regular file is refused (owned_file.h).
  static std::unique_ptr<FlowLog> open(const std::string& path, size_t max_queued_bytes,
                                       std::string* error);
  ~FlowLog();

  // Queues `lines` (whole NDJSON lines holding `records` records). Never blocks on I/O.
  void submit(std::string&& lines, uint64_t records);
  // Reopens the path (after logrotate moved it). Safe to call from any thread.
  bool reopen(std::string* error);
  // Writes what is queued, waiting at most `timeout_ms`, and stops the writer.
  void close(int timeout_ms);

  uint64_t written_records() const { return st_->written_records.load(); }
  uint64_t dropped_records() const { return st_->dropped_records.load(); }
  // The last write's error ("No space left on device"), "" once a write
  // succeeds; a write that has not returned for a few seconds, and a file
  // that was deleted under the log, are errors too.
  std::string last_error() const;
  const std::string& path() const { return path_; }

 private:
  // Everything the writer thread touches. Shared, so that a writer stuck in
  // write() on a dead disk can be abandoned at exit without dangling.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::condition_variable drained_cv;
    std::string queue;
    uint64_t queued_records = 0;
    bool writing = false;
    bool stop = false;
    int fd = -1;
    int pending_fd = -1;  // set by reopen(), swapped in by the writer
    std::atomic<uint64_t> written_records{0};
    std::atomic<uint64_t> dropped_records{0};
    std::atomic<int> write_errno{0};
    std::atomic<int64_t> write_started_ns{0};  // steady clock; 0 while not in write()
    std::atomic<bool> deleted{false};           // the file has no name left
    ~State();
  };

  FlowLog(std::string path, int fd, size_t max_queued_bytes);
  static void writer_loop(std::shared_ptr<State> st);

  const std::string path_;
  const size_t max_queued_bytes_;
  std::shared_ptr<State> st_ = std::make_shared<State>();
  std::thread writer_;
};

}  // namespace tcpscope
