#include "daemon/closed_loop.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "os/netns_path.h"

namespace tcpscope {

ClosedLoop::ClosedLoop(InstalledPolicy& policy, const Enricher& enricher, const Config& config_in_force,
                       std::shared_ptr<prometheus::Registry> registry, LogLine log)
    : policy_(policy),
      enricher_(enricher),
      config_(config_in_force),
      log_(std::move(log)),
      controller_(std::move(registry), [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }) {}

ClosedLoop::~ClosedLoop() {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    closing_ = true;
  }
  inbox_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool ClosedLoop::start(std::string* error) {
  controller_.configure(config_);
  {
    std::lock_guard<std::mutex> lock(namespaces_mu_);
    watch_namespaces(config_);
  }
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
  if (!policy_.load(config_, enricher_.tables()->asn_db.get(), error)) return false;
  thread_ = std::thread([this] { run(); });
  return true;
}

bool ClosedLoop::reload(const Config& next, const AsnDatabase* asn_db, std::string* error) {
  std::string ignored;
  // Weights the thread worked out for the rules before this reload are not
  // applied after it: it publishes under this lock, from the rules in force.
  std::lock_guard<std::mutex> changed_lock(changed_mu_);
  changed_.reset();
  controller_.configure(next);
  {
    std::lock_guard<std::mutex> lock(namespaces_mu_);
    watch_namespaces(next);
  }
  policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &ignored);
  if (policy_.load(next, asn_db, error)) {
    controller_.confirm();
    return true;
  }
  controller_.revert(config_);
  policy_.set_cohorts(controller_.cohort_asns(), controller_.cohort_weights(), &ignored);
  return false;
}

void ClosedLoop::add(const RoutedFlow& flow) {
  const auto& e = flow.record.enrichment.experiment;
  if (e && *e == kControllerExperiment) drain_.emplace_back(flow.record);
}

void ClosedLoop::add(const RoutedTransfer& transfer) {
  const auto& e = transfer.record.enrichment.experiment;
  if (e && *e == kControllerExperiment && transfer.record.direction == TransferDirection::kSend)
    drain_.emplace_back(transfer.record);
}

void ClosedLoop::end_drain() {
  if (!drain_.empty()) hand_over(&drain_);
}

void ClosedLoop::forget_closed(SocketPass pass) {
  std::vector<Item> items;
  items.emplace_back(std::move(pass));
  hand_over(&items);
}

void ClosedLoop::hand_over(std::vector<Item>* items) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (inbox_.size() + items->size() > kMaxBacklog) {
      not_taken_ += items->size();
      items->clear();
      return;
    }
    if (inbox_.empty()) {
      inbox_.swap(*items);
    } else {
      inbox_.insert(inbox_.end(), std::make_move_iterator(items->begin()), std::make_move_iterator(items->end()));
      items->clear();
    }
  }
  inbox_cv_.notify_one();
}

void ClosedLoop::run() {
  using namespace std::chrono;
  auto next_step = Clock::now();
  std::vector<Item> taken;
  for (;;) {
    uint64_t not_taken = 0;
    bool closing = false;
    {
      std::unique_lock<std::mutex> lock(inbox_mu_);
      inbox_cv_.wait_until(lock, next_step, [&] { return closing_ || !inbox_.empty(); });
      taken.swap(inbox_);
      std::swap(not_taken, not_taken_);
      closing = closing_;
    }
    if (not_taken)
      log_("controller: " + std::to_string(not_taken) + " records not counted: the controller's thread is " +
           std::to_string(kMaxBacklog) + " records behind");
    for (Item& item : taken) {
      if (auto* t = std::get_if<TransferRecord>(&item))
        controller_.observe(*t);
      else if (auto* f = std::get_if<FlowRecord>(&item))
        controller_.observe(*f);
      else if (auto* pass = std::get_if<SocketPass>(&item))
        controller_.forget_closed(*pass);
    }
    taken.clear();
    if (closing) return;
    if (Clock::now() >= next_step) {
      next_step = Clock::now() + seconds(1);
      if (!stopped_) step();
    }
  }
}

void ClosedLoop::step() {
  if (controller_.empty()) return;
  const auto now = Clock::now();
  {
    // Addresses come and go (a VIP, a new interface): a local table is read
    // again when its namespace says a route changed, and once a minute anyway.
    std::lock_guard<std::mutex> lock(namespaces_mu_);
    bool changed = now >= next_routes_read_;
    for (auto& [_, ns] : namespaces_) changed = ns.routes->changed() || changed;
    if (changed) {
      next_routes_read_ = now + std::chrono::seconds(60);
      read_local_routes();
    }
  }
  const double now_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const CcController::StepResult result = controller_.step(now_s);
  if (result.changed) {
    std::lock_guard<std::mutex> lock(changed_mu_);
    changed_ = Cohorts{controller_.cohort_asns(), controller_.cohort_weights()};
  }
  if (result.tested) save();
}

void ClosedLoop::tick(Clock::time_point) {
  std::optional<Cohorts> changed;
  {
    std::lock_guard<std::mutex> lock(changed_mu_);
    changed.swap(changed_);
  }
  if (changed && !stopped_) apply_cohorts(*changed);
  log_writer_messages();
}

void ClosedLoop::close(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    closing_ = true;
  }
  inbox_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
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

void ClosedLoop::apply_cohorts(const Cohorts& cohorts) {
  std::string error;
  switch (policy_.set_cohorts(cohorts.asns, cohorts.weights, &error)) {
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

// The snapshot is taken here, on the controller's thread and under its
// lock; fitting, serialising and writing it are the writer's.
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
