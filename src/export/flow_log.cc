#include "export/flow_log.h"

#include "os/owned_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

namespace tcpscope {

namespace {

int open_path(const std::string& path, std::string* error) {
  if (path == "-") {
    int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) *error = std::string("flow log stdout: ") + strerror(errno);
    return fd;
  }
  int fd = open_owned_file(path, OwnedFileMode::kAppend, error);
  if (fd < 0) *error = "flow log " + *error;
  return fd;
}

constexpr int64_t kBlockedWriteNs = 3'000'000'000;  // a local disk answers long before

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

FlowLog::State::~State() {
  if (fd >= 0) ::close(fd);
  if (pending_fd >= 0) ::close(pending_fd);
}

std::unique_ptr<FlowLog> FlowLog::open(const std::string& path, size_t max_queued_bytes,
                                       std::string* error) {
  int fd = open_path(path, error);
  if (fd < 0) return nullptr;
  return std::unique_ptr<FlowLog>(new FlowLog(path, fd, max_queued_bytes));
}

FlowLog::FlowLog(std::string path, int fd, size_t max_queued_bytes)
    : path_(std::move(path)), max_queued_bytes_(max_queued_bytes) {
  st_->fd = fd;
  writer_ = std::thread(&FlowLog::writer_loop, st_);
}

FlowLog::~FlowLog() { close(2000); }

void FlowLog::submit(std::string&& lines, uint64_t records) {
  if (records == 0) return;
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    if (st_->stop || st_->queue.size() + lines.size() > max_queued_bytes_) {
      st_->dropped_records += records;
      return;
    }
    if (st_->queue.empty())
      st_->queue.swap(lines);
    else
      st_->queue.append(lines);
    st_->queued_records += records;
  }
  st_->cv.notify_one();
}

bool FlowLog::reopen(std::string* error) {
  if (path_ == "-") return true;
  int fd = open_path(path_, error);
  if (fd < 0) return false;
  std::lock_guard<std::mutex> lock(st_->mu);
  if (st_->pending_fd >= 0) ::close(st_->pending_fd);
  st_->pending_fd = fd;
  st_->cv.notify_one();
  return true;
}

void FlowLog::writer_loop(std::shared_ptr<State> st) {
  std::string batch;
  for (;;) {
    uint64_t records = 0;
    int fd;
    {
      std::unique_lock<std::mutex> lock(st->mu);
      st->writing = false;
      st->drained_cv.notify_all();
      st->cv.wait(lock, [&] { return st->stop || !st->queue.empty() || st->pending_fd >= 0; });
      if (st->pending_fd >= 0) {
        ::close(st->fd);
        st->fd = st->pending_fd;
        st->pending_fd = -1;
      }
      if (st->queue.empty() && st->stop) break;
      batch.clear();
      batch.swap(st->queue);
      records = st->queued_records;
      st->queued_records = 0;
      st->writing = true;
      fd = st->fd;
    }
    // Writes into a file someone deleted (or whose directory they removed)
    // succeed and reach nobody: count them as dropped instead.
    struct stat file;
    st->deleted = fstat(fd, &file) == 0 && S_ISREG(file.st_mode) && file.st_nlink == 0;
    if (st->deleted) {
      st->dropped_records += records;
      continue;
    }
    st->write_started_ns = steady_ns();
    const bool ok = write_all(fd, batch);
    st->write_started_ns = 0;
    if (ok) {
      st->written_records += records;
      st->write_errno = 0;
    } else {
      st->write_errno = errno;
      st->dropped_records += records;
    }
  }
}

std::string FlowLog::last_error() const {
  if (const int e = st_->write_errno.load()) return strerror(e);
  const int64_t since = st_->write_started_ns.load();
  if (since && steady_ns() - since > kBlockedWriteNs) return "a write is blocked (the file takes no data)";
  if (st_->deleted.load()) return "the file was deleted (a SIGHUP opens it anew)";
  return "";
}

void FlowLog::close(int timeout_ms) {
  if (!writer_.joinable()) return;
  bool stuck;
  {
    std::unique_lock<std::mutex> lock(st_->mu);
    st_->drained_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                             [this] { return st_->queue.empty() && !st_->writing; });
    st_->stop = true;
    if (!st_->queue.empty()) {  // the disk did not keep up within the deadline
      st_->dropped_records += st_->queued_records;
      st_->queue.clear();
      st_->queued_records = 0;
    }
    stuck = st_->writing;
  }
  st_->cv.notify_one();
  if (stuck)
    writer_.detach();  // blocked in write() on a dead disk: it keeps the state alive
  else
    writer_.join();
}

}  // namespace tcpscope
