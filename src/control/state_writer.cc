#include "control/state_writer.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

#include "control/state_fit.h"

namespace tcpscope {

struct StateWriter::Shared {
  explicit Shared(const ControllerStore& s) : store(s) {}
  const ControllerStore store;  // a copy: the thread may outlive the caller's
  std::mutex mu;
  std::condition_variable cv;
  std::optional<nlohmann::json> waiting;
  bool writing = false;
  bool stopping = false;
  std::vector<std::string> messages;
  // The writer thread's own, to say each once.
  std::string last_error;
  bool trimming = false;
};

StateWriter::StateWriter(const ControllerStore& store)
    : shared_(std::make_shared<Shared>(store)), thread_(run, shared_) {}

StateWriter::~StateWriter() {
  bool writing;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->waiting.reset();
    shared_->stopping = true;
    writing = shared_->writing;
  }
  shared_->cv.notify_all();
  if (writing)
    thread_.detach();
  else
    thread_.join();  // idle: it ends at once
}

void StateWriter::save(nlohmann::json state) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->waiting = std::move(state);
  }
  shared_->cv.notify_all();
}

bool StateWriter::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(shared_->mu);
  return shared_->cv.wait_for(lock, timeout, [this] { return !shared_->waiting && !shared_->writing; });
}

std::vector<std::string> StateWriter::take_messages() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return std::exchange(shared_->messages, {});
}

void StateWriter::run(const std::shared_ptr<Shared>& s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [&] { return s->stopping || s->waiting; });
    if (s->stopping) return;
    nlohmann::json state = std::move(*s->waiting);
    s->waiting.reset();
    s->writing = true;
    lock.unlock();
    write(*s, std::move(state));
    lock.lock();
    s->writing = false;
    s->cv.notify_all();
  }
}

void StateWriter::write(Shared& s, nlohmann::json state) {
  const FittedState fitted = fit_state(std::move(state), ControllerStore::kMaxStateBytes);
  std::string error;
  const bool saved = s.store.save(fitted.text, &error);
  // Not even trimmed does it fit, so it is not written: the state on disk
  // is older than what the controllers hold now, and a start must not bring
  // it back as if it were theirs. It goes aside.
  std::string aside, aside_error;
  if (!fitted.fits) aside = s.store.set_aside(&aside_error);
  std::vector<std::string> said;
  // Trimmed and still over the cap is not written: only the failure is said.
  const bool trimmed = fitted.fits && !fitted.trimmed.empty();
  if (trimmed && !s.trimming)
    said.push_back("controller state trimmed to fit the " + std::to_string(ControllerStore::kMaxStateBytes >> 20) +
                   " MiB that loading accepts, dropping " + fitted.trimmed + " (said once while it lasts)");
  s.trimming = trimmed;
  if (saved) error.clear();
  // A state over the cap names its size, which changes at every save: one
  // failure while it lasts all the same.
  const std::string failure = fitted.fits ? error : "over the cap" + aside_error;
  if (!error.empty() && (failure != s.last_error || !aside.empty()))
    said.push_back("controller state not saved: " + error +
                   (!aside.empty()         ? "; the previous state, now stale, moved to " + aside +
                                                 " so that no start restores it"
                    : !aside_error.empty() ? "; the previous state, now stale, cannot be moved aside (" +
                                                 aside_error + "): the next start would restore it"
                                           : ""));
  s.last_error = failure;
  if (said.empty()) return;
  std::lock_guard<std::mutex> lock(s.mu);
  s.messages.insert(s.messages.end(), said.begin(), said.end());
}

}  // namespace tcpscope
