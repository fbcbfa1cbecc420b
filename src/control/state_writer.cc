#include "control/state_writer.h"

#include <utility>

#include "control/state_fit.h"

namespace tcpscope {

StateWriter::StateWriter(const ControllerStore& store) : store_(store), thread_([this] { run(); }) {}

StateWriter::~StateWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StateWriter::save(nlohmann::json state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiting_) ++replaced_;
    waiting_ = std::move(state);
  }
  cv_.notify_all();
}

bool StateWriter::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return !waiting_ && !writing_; });
}

std::vector<std::string> StateWriter::take_messages() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(messages_, {});
}

uint64_t StateWriter::replaced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replaced_;
}

void StateWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || waiting_; });
    if (stopping_) return;
    nlohmann::json state = std::move(*waiting_);
    waiting_.reset();
    writing_ = true;
    lock.unlock();
    write(std::move(state));
    lock.lock();
    writing_ = false;
    cv_.notify_all();
  }
}

void StateWriter::write(nlohmann::json state) {
  const FittedState fitted = fit_state(std::move(state), ControllerStore::kMaxStateBytes);
  std::string error;
  const bool saved = store_.save(fitted.text, &error);
  std::vector<std::string> said;
  if (!fitted.trimmed.empty() && !trimming_)
    said.push_back("controller state trimmed to fit the " + std::to_string(ControllerStore::kMaxStateBytes >> 20) +
                   " MiB that loading accepts: " + fitted.trimmed + " (said once while it lasts)");
  trimming_ = !fitted.trimmed.empty();
  if (saved) error.clear();
  if (error != last_error_) {
    if (!error.empty()) said.push_back("controller state not saved: " + error);
    last_error_ = error;
  }
  if (said.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  messages_.insert(messages_.end(), said.begin(), said.end());
}

}  // namespace tcpscope
