#include "daemon/closed_loop.h"

#include <chrono>
#include <cstdio>

namespace tcpscope {

ClosedLoop::ClosedLoop(InstalledPolicy& policy, const Enricher& enricher, const Config& config_in_force,
                       std::shared_ptr<prometheus::Registry> registry, LogLine log)
    : policy_(policy),
      enricher_(enricher),
      config_(config_in_force),
      log_(std::move(log)),
      controller_(std::move(registry), [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }) {}

bool ClosedLoop::start(std::string* error) {
  controller_.configure(config_);
  if (!controller_.empty()) {
    std::string store_error;
    if (auto saved = store_.load(&store_error)) {
      if (!controller_.restore(*saved, &store_error))
        log_("controller state " + store_.path() + " ignored: " + store_error);
      else
        log_("controller state restored from " + store_.path());
    } else if (!store_error.empty()) {
      log_("controller state ignored: " + store_error);
    }
    policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &store_error);
  }
  return policy_.load(config_, enricher_.tables()->asn_db.get(), error);
}

bool ClosedLoop::reload(const Config& next, const AsnDatabase* asn_db, std::string* error) {
  const nlohmann::json before = controller_.save();
  std::string ignored;
  controller_.configure(next);
  policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &ignored);
  if (policy_.load(next, asn_db, error)) return true;
  controller_.configure(config_);
  controller_.restore(before, &ignored);
  policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &ignored);
  return false;
}

void ClosedLoop::tick(Clock::time_point) {
  if (controller_.empty()) return;
  const double now_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const CcController::StepResult step = controller_.step(now_s);
  if (step.changed) apply_cohorts();
  if (step.tested) save();
}

void ClosedLoop::close(std::chrono::milliseconds) {
  if (!controller_.empty()) save();
}

void ClosedLoop::apply_cohorts() {
  std::string error;
  switch (policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &error)) {
    case InstalledPolicy::CohortUpdate::kApplied:
      return;
    case InstalledPolicy::CohortUpdate::kNeedsInstall:
      if (policy_.load(config_, enricher_.tables()->asn_db.get(), &error)) return;
      break;
    case InstalledPolicy::CohortUpdate::kFailed:
      break;
  }
  log_("controller: applying cohort weights failed: " + error + "; the kernel keeps the previous ones");
}

void ClosedLoop::save() {
  std::string error;
  if (store_.save(controller_.save(), &error)) {
    store_error_.clear();
  } else if (error != store_error_) {
    log_("controller state not saved: " + error);
    store_error_ = error;
  }
}

}  // namespace tcpscope
