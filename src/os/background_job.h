// One job at a time on a thread of its own, its result handed back to the
// event loop through an eventfd the loop polls. For work that must not stall
// the ring buffer's drain: a config reload (files, ASN tables) and the
// open-flow snapshot (entering every network namespace).
#pragma once

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace tcpscope {

template <typename Result>
class BackgroundJob {
 public:
  // A job still running at destruction is waited for (as by wait()).
  BackgroundJob() : efd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), efd_errno_(efd_ < 0 ? errno : 0) {}
  ~BackgroundJob() {
    if (thread_.joinable()) thread_.join();
    if (efd_ >= 0) close(efd_);
  }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  // Readable when a result is waiting: add it to the loop's epoll set. -1 if
  // the eventfd could not be made (setup_errno() says why).
  int fd() const { return efd_; }
  int setup_errno() const { return efd_errno_; }
  bool running() const { return running_; }

  // Runs `work` on a new thread; false (and nothing started) while one runs.
  bool start(std::function<Result()> work) {
    if (running_) return false;
    if (thread_.joinable()) thread_.join();
    running_ = true;
    thread_ = std::thread([this, work = std::move(work)] {
      Result r = work();
      {
        std::lock_guard<std::mutex> lock(mu_);
        result_ = std::move(r);
      }
      const uint64_t one = 1;
      if (write(efd_, &one, sizeof(one)) < 0) {
      }  // cannot fail: the counter is far from overflowing
    });
    return true;
  }

  // Waits for a running job and drops its result: before what it uses goes away.
  void wait() {
    if (thread_.joinable()) thread_.join();
    uint64_t n;
    if (read(efd_, &n, sizeof(n)) < 0) {
    }  // EAGAIN when no job ran
    running_ = false;
    std::lock_guard<std::mutex> lock(mu_);
    result_.reset();
  }

  // On the loop, when fd() is readable: the finished job's result.
  std::optional<Result> take() {
    uint64_t n;
    if (read(efd_, &n, sizeof(n)) < 0) return std::nullopt;  // EAGAIN: nothing finished
    if (thread_.joinable()) thread_.join();
    running_ = false;
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<Result> r = std::move(result_);
    result_.reset();
    return r;
  }

 private:
  const int efd_;
  const int efd_errno_;
  bool running_ = false;  // the loop's view: set by start(), cleared by take()
  std::thread thread_;
  std::mutex mu_;
  std::optional<Result> result_;
};

}  // namespace tcpscope
