#include "daemon/closed_loop.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "os/netns_path.h"

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
  watch_namespaces(config_);
  if (!controller_.empty()) {
    std::string store_error;
    if (auto saved = store_.load(&store_error)) {
      if (!controller_.restore(*saved, &store_error))
        set_aside(store_.path() + ": " + store_error);
      else
        log_("controller state restored from " + store_.path());
    } else if (!store_error.empty()) {
      set_aside(store_error);
    }
    policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &store_error);
  }
  return policy_.load(config_, enricher_.tables()->asn_db.get(), error);
}

bool ClosedLoop::reload(const Config& next, const AsnDatabase* asn_db, std::string* error) {
  const nlohmann::json before = controller_.save();
  std::string ignored;
  controller_.configure(next);
  watch_namespaces(next);
  policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &ignored);
  if (policy_.load(next, asn_db, error)) return true;
  controller_.configure(config_);
  controller_.restore(before, &ignored);
  policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &ignored);
  return false;
}

void ClosedLoop::tick(Clock::time_point now) {
  if (stopped_ || controller_.empty()) return;
  // Addresses come and go (a VIP, a new interface): a local table is read
  // again when its namespace says a route changed, and once a minute anyway.
  bool changed = now >= next_routes_read_;
  for (auto& [_, ns] : namespaces_) changed = ns.routes->changed() || changed;
  if (changed) {
    next_routes_read_ = now + std::chrono::seconds(60);
    read_local_routes();
  }
  const double now_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const CcController::StepResult step = controller_.step(now_s);
  if (step.changed) apply_cohorts();
  if (step.tested) save();
  log_writer_messages();
}

void ClosedLoop::close(std::chrono::milliseconds timeout) {
  if (controller_.empty()) return;
  save();
  if (!writer_.flush(timeout))
    log_("controller state not saved: the write did not finish within " + std::to_string(timeout.count()) + " ms");
  log_writer_messages();
}

void ClosedLoop::watch_namespaces(const Config& config) {
  std::vector<std::string> names;
  for (const auto& rule : config.cc_policy.rules)
    if (rule.controller)
      names.insert(names.end(), rule.controller->evidence_netns.begin(), rule.controller->evidence_netns.end());
  // The host's own addresses are local to every rule's sockets (evidence_gate.h).
  if (!names.empty()) names.push_back("self");
  for (const auto& name : names) {
    if (namespaces_.count(name)) continue;
    uint32_t inode = 0;
    std::string error;
    if (!netns_inode(name, &inode, &error)) {
      log_("controller: evidence_netns " + name + ": " + error + "; no record of it counts");
      continue;
    }
    auto routes = LocalRoutes::open(name == "self" ? "" : netns_path(name), &error);
    if (!routes)
      log_("controller: evidence_netns " + name + ": its local routing table cannot be read (" + error +
           "); no record of it counts until the next start");
    else
      namespaces_[name] = {inode, std::move(routes)};
  }
  read_local_routes();
}

void ClosedLoop::read_local_routes() {
  std::map<std::string, uint32_t> inodes;
  auto local = std::make_shared<LocalAddresses>();
  std::string errors;
  for (auto& [name, ns] : namespaces_) {
    std::vector<Prefix> routes;
    std::string error;
    if (!ns.routes->read(&routes, &error)) {
      errors += (errors.empty() ? "" : "; ") + name + ": " + error;
      continue;  // its records do not count while its own addresses are unknown
    }
    auto trie = std::make_shared<PrefixTrie<uint8_t>>();
    for (const auto& p : routes) trie->insert(p.addr, p.len, 1);
    local->by_netns[ns.inode] = std::move(trie);
    inodes[name] = ns.inode;
  }
  if (auto self = namespaces_.find("self"); self != namespaces_.end()) local->host_netns = self->second.inode;
  if (errors != routes_error_) {
    if (!errors.empty()) log_("controller: local routing table unreadable (" + errors + "); its records do not count");
    routes_error_ = errors;
  }
  controller_.set_namespaces(std::move(inodes), std::move(local));
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

// The snapshot is taken here, under the controller's lock; fitting,
// serialising and writing it are the writer's, off this thread.
void ClosedLoop::save() {
  if (saving_) writer_.save(controller_.save());
}

void ClosedLoop::set_aside(const std::string& why) {
  std::string error;
  const std::string aside = store_.set_aside(&error);
  if (!aside.empty()) {
    log_("controller state ignored: " + why + "; moved to " + aside + ", the controllers start afresh" +
         (error.empty() ? "" : " (" + error + ")"));
    return;
  }
  saving_ = false;
  log_("controller state ignored: " + why + "; it cannot be moved aside (" + error +
       "), so it is not overwritten either: the controllers run without saving until it is removed");
}

void ClosedLoop::log_writer_messages() {
  for (const std::string& m : writer_.take_messages()) log_(m);
}

}  // namespace tcpscope
