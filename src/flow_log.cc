#include "flow_log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
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
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) *error = "flow log " + path + ": " + strerror(errno);
  return fd;
}

}  // namespace

std::unique_ptr<FlowLog> FlowLog::open(const std::string& path, size_t max_queued_bytes,
                                       std::string* error) {
  int fd = open_path(path, error);
  if (fd < 0) return nullptr;
  return std::unique_ptr<FlowLog>(new FlowLog(path, fd, max_queued_bytes));
}

FlowLog::FlowLog(std::string path, int fd, size_t max_queued_bytes)
    : path_(std::move(path)), max_queued_bytes_(max_queued_bytes), fd_(fd) {
  writer_ = std::thread([this] { writer_loop(); });
}

FlowLog::~FlowLog() { close(2000); }

void FlowLog::submit(std::string&& lines, uint64_t records) {
  if (records == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() + lines.size() > max_queued_bytes_) {
      dropped_records_ += records;
      return;
    }
    if (queue_.empty())
      queue_.swap(lines);
    else
      queue_.append(lines);
    queued_records_ += records;
  }
  cv_.notify_one();
}

bool FlowLog::reopen(std::string* error) {
  if (path_ == "-") return true;
  int fd = open_path(path_, error);
  if (fd < 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_fd_ >= 0) ::close(pending_fd_);
  pending_fd_ = fd;
  cv_.notify_one();
  return true;
}

bool FlowLog::write_all(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd_, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

void FlowLog::writer_loop() {
  std::string batch;
  for (;;) {
    uint64_t records = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      writing_ = false;
      drained_cv_.notify_all();
      cv_.wait(lock, [this] { return stop_ || !queue_.empty() || pending_fd_ >= 0; });
      if (pending_fd_ >= 0) {
        ::close(fd_);
        fd_ = pending_fd_;
        pending_fd_ = -1;
      }
      if (queue_.empty() && stop_) break;
      batch.clear();
      batch.swap(queue_);
      records = queued_records_;
      queued_records_ = 0;
      writing_ = true;
    }
    if (write_all(batch))
      written_records_ += records;
    else
      dropped_records_ += records;
  }
}

void FlowLog::close(int timeout_ms) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!writer_.joinable()) return;
    drained_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                         [this] { return queue_.empty() && !writing_; });
    stop_ = true;
    if (!queue_.empty()) {  // the disk did not keep up within the deadline
      dropped_records_ += queued_records_;
      queue_.clear();
      queued_records_ = 0;
    }
  }
  cv_.notify_one();
  bool stuck;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stuck = writing_;
  }
  if (stuck) {
    // Blocked in write() on a dead disk: leave it rather than hang the exit.
    writer_.detach();
    return;
  }
  writer_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace tcpscope
