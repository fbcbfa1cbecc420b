#include "daemon/daemon.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>

#include <prometheus/registry.h>

#include "aggregate/aggregate_sinks.h"
#include "config/config.h"
#include "config/config_reload.h"
#include "daemon/closed_loop.h"
#include "daemon/config_reloader.h"
#include "daemon/kernel_counters.h"
#include "daemon/open_flow_snapshots.h"
#include "enrich/enricher.h"
#include "enrich/service_names.h"
#include "export/daemon_health.h"
#include "export/output_sinks.h"
#include "http/http_server.h"
#include "kernel/capability_drop.h"
#include "kernel/cgroups_made.h"
#include "kernel/flow_probe.h"
#include "kernel/handover.h"
#include "kernel/installed_policy.h"
#include "kernel/load_log.h"
#include "kernel/record_coverage.h"
#include "kernel/ring_reader.h"
#include "os/cgroup_path.h"
#include "os/fd_store.h"
#include "os/netns_path.h"
#include "pipeline/flow_pipeline.h"
#include "pipeline/record_fanout.h"
#include "record/flow_decoder.h"

namespace tcpscope {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int kTickMs = 100;  // periodic drain of the ring buffer
constexpr auto kClockRefresh = std::chrono::seconds(10);
constexpr auto kDrainDeadline = std::chrono::seconds(2);  // /healthz fails past this
constexpr auto kCloseTimeout = std::chrono::seconds(5);   // for the outputs at exit

void log_line(const std::string& msg) { std::fprintf(stderr, "tcpscope: %s\n", msg.c_str()); }

int fail(const std::string& msg, int code = 1) {
  log_line(msg);
  return code;
}

// Config ignore_netns into the probe; false and *error naming the first
// namespace that cannot be read, or the map.
bool ignore_namespaces(FlowProbe& probe, const Config& config, std::string* error) {
  std::vector<uint32_t> inodes;
  for (const auto& name : config.ignore_netns) {
    uint32_t inode = 0;
    if (!netns_inode(name, &inode, error)) {
      *error = "ignore_netns " + name + ": " + *error;
      return false;
    }
    inodes.push_back(inode);
  }
  return probe.set_ignored_netns(inodes, error);
}

// Wires the stages: kernel → pipeline → the record sinks (metrics,
// distributions, controller, flow log, Kafka), the HTTP server beside them,
// and runs the loop that drains the ring buffer.
class Daemon {
 public:
  explicit Daemon(RunOptions opts) : opts_(std::move(opts)) {}
  int run();

 private:
  int start();
  int start_kernel();
  void start_service_names();
  void log_service_cgroups_error(const std::string& error);
  int start_outputs();
  // One drain of the ring: its records to every sink, together.
  int drain_ring();
  // The timer's tick: the clock, the open-flow snapshots, then account().
  void on_tick();
  // What a tick does that starts nothing: the sinks' periodic work (the
  // closed loop's tests among them, until it stops) and the kernel's counters.
  void account(SteadyClock::time_point now);
  // One line when `config` follows no flow's transfers (transfers_followed()).
  void log_transfers_off(const Config& config);
  void apply_reload(PreparedReload& r);
  // /healthz, on an HTTP thread: reads only last_drain_ns_ and, under
  // failures_mu_, failures_, which the loop thread sets.
  std::pair<bool, std::string> health() const;

  RunOptions opts_;
  Config config_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<DaemonHealth> self_;
  std::unique_ptr<Enricher> enricher_;
  std::unique_ptr<FlowProbe> probe_;
  std::unique_ptr<RingReader> ring_;
  std::unique_ptr<InstalledPolicy> policy_;
  MonotonicToRealtime clock_;
  std::unique_ptr<ServiceNames> services_;  // null without a cgroup v2 hierarchy: owners unknown
  std::vector<ServiceCgroup> first_service_cgroups_;  // what the namer's first walk found, for the policy
  std::string service_cgroups_error_;                 // the last one logged
  std::unique_ptr<FlowPipeline> pipeline_;  // every record, finished or open, goes through it
  std::unique_ptr<RecordFanout> fanout_;    // and then to every sink
  // The sinks, in the order every record reaches them.
  std::unique_ptr<AggregatorSink> aggregator_;
  std::unique_ptr<DistributionsSink> distributions_;  // for `compare --server`
  std::unique_ptr<ClosedLoop> loop_;
  std::unique_ptr<FlowLogSink> flow_log_;
  std::unique_ptr<KafkaSink> kafka_;
  std::unique_ptr<ConfigReloader> reloader_;
  std::unique_ptr<OpenFlowSnapshots> snapshots_;

  std::atomic<int64_t> last_drain_ns_{0};
  SteadyClock::duration longest_pass_{};  // of the loop over one wake-up; the loop's
  SteadyClock::time_point last_clock_refresh_ = SteadyClock::now();
  // What /healthz (an HTTP thread) says of failing sinks, set on the loop.
  mutable std::mutex failures_mu_;
  std::string failures_;
  // Across a restart (kernel/handover.h): the service manager's descriptor
  // store, what the previous daemon handed over, and whether this one's
  // handover is stored (then the programs stay attached at stop).
  void store_handover();
  FdStore fd_store_;
  std::optional<Handover> previous_;
  bool handover_stored_ = false;
  std::string handover_error_;  // the last one logged
  // Its handlers read the members above: declared last, it is destroyed
  // first, so a start that fails halfway stops it before they go.
  std::unique_ptr<HttpServer> http_;
};

int Daemon::start() {
  std::string error;
  if (!load_config(opts_, &config_, &error)) return fail(error, 2);
  EnrichmentTables tables;
  if (!build_tables(config_, &tables, &error)) return fail("ASN data: " + error);
  enricher_ = std::make_unique<Enricher>(std::move(tables));
  self_ = std::make_unique<DaemonHealth>(registry_, TCPSCOPE_VERSION, libbpf_version_string(),
                                        probe_kernel_features().kernel_release);
  if (!config_.flow_log.empty() && !(flow_log_ = FlowLogSink::open(config_, *self_, log_line, &error)))
    return fail(error);
  aggregator_ = std::make_unique<AggregatorSink>(registry_, AggregatorOptions::from_config(config_));
  distributions_ = std::make_unique<DistributionsSink>(FlowDistributionsOptions::from_config(config_), log_line);

  http_ = HttpServer::start(config_.listen, config_.http, &error);
  if (!http_) return fail(error);
  http_->serve_metrics(registry_);
  http_->handle_json("/api/v1/distributions",
                     [this](const std::string& q) { return distributions_->distributions().handle_query(q); });
  if (int rc = start_kernel()) return rc;
  // /healthz says "starting" until the programs are attached and the ring reader made.
  http_->set_health([this] { return health(); });
  if (int rc = start_outputs()) return rc;
  // Stored now so that a crash hands over too; again at every reload (the
  // policy's links and names change) and at stop.
  store_handover();

  std::string attached;
  for (const auto& p : probe_->attached()) attached += (attached.empty() ? "" : ",") + p;
  log_line("running: " + std::to_string(probe_->attached().size()) + " BPF programs attached (" + attached +
           "), metrics on http://" + config_.listen + "/metrics" +
           (config_.flow_log.empty() ? "" : ", flow log " + config_.flow_log) +
           (kafka_ ? ", records to Kafka " + kafka_broker_list(config_.export_.kafka) + " as " +
                         config_.export_.kafka.format
                   : ""));
  for (const auto& d : probe_->degraded()) log_line("warning: this kernel has no tracepoint " + d);
  // libbpf's output behind a refusal (the verifier's log: often thousands of
  // lines) goes to a file of its own, which the line names.
  for (const auto& p : probe_->left_out())
    log_line("warning: the kernel refused BPF program '" + p.program + "'" +
             " (" + p.reason + "); running without it: " + p.loses + "; " +
             save_load_log(p.log));
  for (const auto& c : record_coverage(probe_->missing_tracepoints())) log_line("kernel: " + c);
  log_transfers_off(config_);
  return 0;
}

void Daemon::log_transfers_off(const Config& config) {
  if (!transfers_followed(config))
    log_line("transfers: off (transfer_sampling_rate 0, no rule follows transfers): no per-call hook is "
             "attached; flow records place the receive side's end at the kernel's tick");
}

// The programs, the policy with the controllers' cohorts, the pipeline and
// the ring reader; then the capabilities go.
int Daemon::start_kernel() {
  std::string error, details;
  FlowProbeOptions popts;
  popts.ring_buffer_bytes = config_.ring_buffer_bytes;
  popts.transfer_sampling_rate = config_.transfer_sampling_rate;
  popts.per_call_hooks = transfers_followed(config_);
  // The policy programs go on the cgroup v2 root unless told otherwise; a
  // host without cgroup v2 can still observe, only not steer.
  popts.cgroup_path = config_.cgroup.empty() ? cgroup2_mount_point() : config_.cgroup;
  if (popts.cgroup_path.empty()) {
    if (!config_.cc_policy.rules.empty()) return fail("cc_policy has rules but no cgroup v2 hierarchy is mounted");
    log_line("no cgroup v2 hierarchy mounted: congestion-control policy, setsockopt and sysctl hooks disabled");
  }
  fd_store_ = FdStore::from_environment();
  previous_ = take_handover(fd_store_, &error);
  if (!error.empty()) log_line(error + "; starting afresh");
  popts.previous = previous_ ? &*previous_ : nullptr;
  error.clear();
  probe_ = FlowProbe::open_and_attach(popts, &error, &details);
  if (!probe_) return fail(details.empty() ? error : error + "; " + save_load_log(details));
  if (!probe_->takeover_note().empty()) log_line("restart: " + probe_->takeover_note());
  if (!ignore_namespaces(*probe_, config_, &error)) return fail(error);
  policy_ = std::make_unique<InstalledPolicy>(*probe_, registry_);
  if (probe_->took_over() && !policy_->take_over(previous_->policy, &error))
    log_line("restart: " + error + "; flows open across the restart close without their rule's name");
  previous_.reset();
  loop_ = std::make_unique<ClosedLoop>(*policy_, *enricher_, config_, registry_, log_line);
  if (!loop_->start(&error)) return fail(error);  // names cc_policy (InstalledPolicy::load)
  const auto sends = send_transfer_delimiter(probe_->missing_tracepoints());
  loop_->controller().set_send_transfers(sends.has_value());
  start_service_names();
  pipeline_ = std::make_unique<FlowPipeline>(clock_, *enricher_, policy_->rule_names(),
                                             sends.value_or(TransferDelimiter::kWrite), services_.get());
  fanout_ = std::make_unique<RecordFanout>(*pipeline_, config_);
  snapshots_ = std::make_unique<OpenFlowSnapshots>(config_.snapshot_interval_s ? probe_->snapshot_link_fd() : -1,
                                                   clock_, *pipeline_, aggregator_->aggregator(), *self_, log_line);
  snapshots_->on_pass([this](SocketPass pass) { loop_->forget_closed(std::move(pass)); });
  http_->handle_json("/api/v1/flows", [this](const std::string& q) { return snapshots_->json(q); });
  http_->handle_json("/api/v1/policy", std::function<std::string()>([this] { return policy_->to_json(); }));
  http_->handle_json("/api/v1/controller",
                     std::function<std::string()>([this] { return loop_->controller().status_json(); }));
  RingReader::Handlers handlers;
  handlers.flow = [this](const tcpscope_flow_event& ev) { fanout_->on_flow(ev); };
  handlers.transfer = [this](const tcpscope_transfer_event& ev) { fanout_->on_transfer(ev); };
  handlers.close = [this](const tcpscope_close_event& ev) { fanout_->on_close(ev); };
  ring_ = RingReader::create(probe_->ring_buffer_fd(), probe_->ring_buffer_bytes(), std::move(handlers), &error);
  if (!ring_) return fail(error);
  if (!drop_capabilities_after_start(*probe_, config_.snapshot_interval_s > 0, &error)) return fail(error);
  return 0;
}

// Who owns each socket, from the cgroup tree: without it the daemon still
// measures, with every record's service empty.
void Daemon::start_service_names() {
  ServiceNamesOptions options;
  options.cgroup_root = cgroup2_mount_point();
  options.names = config_.services.names;
  options.grace = std::chrono::seconds(config_.services.grace_seconds);
  options.take_made = [fd = probe_->cgroups_made_fd()](uint64_t id) { return take_made_cgroup(fd, id); };
  options.forget_made = [fd = probe_->cgroups_made_fd()](uint64_t id) { forget_made_cgroup(fd, id); };
  options.warn = log_line;
  // The policy's rules that name services follow their cgroups: all those
  // the first walk finds at once, then each as it comes and goes.
  options.on_named = [this](uint64_t id, const ServiceIdentity& owner) {
    if (!services_) {
      first_service_cgroups_.push_back({id, owner.name});
      return;
    }
    std::string error;
    if (!policy_->add_service_cgroup({id, owner.name}, &error)) log_service_cgroups_error(error);
  };
  options.on_forgotten = [this](uint64_t id) {
    std::string error;
    if (!policy_->remove_service_cgroup(id, &error)) log_service_cgroups_error(error);
  };
  if (options.cgroup_root.empty()) {
    log_line("no cgroup v2 hierarchy mounted: records name no service, and rules naming services match nothing");
    return;
  }
  std::string error;
  services_ = ServiceNames::create(std::move(options), &error);
  if (!services_) {
    log_line("services: " + error + "; records name no service, and rules naming services match nothing");
    return;
  }
  if (!policy_->set_service_cgroups(first_service_cgroups_, &error)) log_service_cgroups_error(error);
  first_service_cgroups_.clear();
  first_service_cgroups_.shrink_to_fit();
}

// Once per kind of failure: a full map refuses every new cgroup alike.
void Daemon::log_service_cgroups_error(const std::string& error) {
  if (error == service_cgroups_error_) return;
  service_cgroups_error_ = error;
  log_line("cc_policy: the services' cgroups: " + error);
}

// The sinks, in the order each record reaches them.
int Daemon::start_outputs() {
  std::string error;
  // After the drop: librdkafka's threads block every signal, so they could
  // not be told to drop theirs, and they need no capability to connect.
  if (config_.export_.kafka.enabled() &&
      !(kafka_ = KafkaSink::open(config_.export_.kafka, registry_, log_line, &error)))
    return fail(error);
  for (RecordSink* sink : std::initializer_list<RecordSink*>{aggregator_.get(), distributions_.get(), loop_.get(),
                                                             flow_log_.get(), kafka_.get()})
    if (sink) fanout_->add_sink(sink);
  reloader_ = std::make_unique<ConfigReloader>(opts_, [this](std::string* error) {
    return !flow_log_ || flow_log_->reopen(error);
  });
  return 0;
}

void Daemon::store_handover() {
  if (!fd_store_.usable() || !probe_ || !policy_) return;
  Handover h = probe_->handover();
  h.policy = policy_->handover_state();
  std::string error;
  handover_stored_ = tcpscope::store_handover(fd_store_, h, &error);
  if (!handover_stored_ && error != handover_error_)
    log_line("restart: the next daemon cannot take over (" + error + "): a restart loses what runs meanwhile");
  handover_error_ = handover_stored_ ? "" : error;
}

int Daemon::drain_ring() {
  const auto now = SteadyClock::now();
  fanout_->begin_drain(now);
  const int n = ring_->drain();
  fanout_->end_drain();
  last_drain_ns_ = SteadyClock::now().time_since_epoch().count();
  return n;
}

void Daemon::on_tick() {
  const auto now = SteadyClock::now();
  if (now - last_clock_refresh_ >= kClockRefresh) {
    clock_.refresh();
    last_clock_refresh_ = now;
  }
  snapshots_->tick(now, std::chrono::seconds(config_.snapshot_interval_s));
  if (services_) services_->expire(now);
  policy_->update_metrics();
  account(now);
}

void Daemon::account(SteadyClock::time_point now) {
  fanout_->tick(now);
  sample_kernel_counters(*probe_, *ring_, *pipeline_, *self_);
  self_->set_loop_longest_pass(std::chrono::duration<double>(longest_pass_).count());
  if (services_) {
    const auto c = services_->counts();
    self_->set_service_cgroups(c.known_cgroups - c.removed_in_grace, c.removed_in_grace, c.unresolved_lookups);
  }
  std::lock_guard<std::mutex> lock(failures_mu_);
  failures_ = fanout_->failures();
}

void Daemon::apply_reload(PreparedReload& r) {
  std::string error;
  if (!r.flow_log_error.empty()) log_line("reload: " + r.flow_log_error);
  if (!r.ok) {
    log_line("reload: " + r.error);
    log_line("reload failed: keeping the previous config and data");
    self_->count_reload(false);
    return;
  }
  std::vector<std::string> next_start;
  Config merged = merge_reload(config_, r.config, &next_start);
  if (!loop_->reload(merged, r.tables.asn_db.get(), &error)) {
    log_line("reload failed: " + error + "; keeping the previous config and data");
    self_->count_reload(false);
    return;
  }
  // The parser has checked the digest; should this still refuse it, the old credentials stay.
  if (!http_->set_basic_auth(merged.http, &error)) log_line("reload: " + error + "; the previous credentials stay");
  enricher_->replace(std::move(r.tables));
  fanout_->apply_config(merged);
  if (services_) services_->update(merged.services);
  if (!probe_->set_transfer_sampling_rate(merged.transfer_sampling_rate, &error))
    log_line("reload: " + error + "; transfer_sampling_rate stays as it was");
  if (transfers_followed(merged) != transfers_followed(config_)) {
    if (!probe_->set_per_call_hooks(transfers_followed(merged), &error))
      log_line("reload: " + error + "; transfers stay as they were");
    else if (transfers_followed(merged))
      log_line("transfers: on: the per-call hooks are attached again");
    else
      log_transfers_off(merged);
  }
  if (!ignore_namespaces(*probe_, merged, &error)) log_line("reload: " + error + "; the namespaces ignored before stay");
  for (const auto& key : next_start) log_line("reload: " + key + " takes effect at the next start");
  config_ = std::move(merged);
  self_->count_reload(true);
  store_handover();
  char took[32];
  std::snprintf(took, sizeof(took), "%.2f", r.seconds);
  log_line("reloaded " + (opts_.config_path.empty() ? std::string("<embedded>") : opts_.config_path) +
           " (read and built in " + took + " s off the event loop)");
}

std::pair<bool, std::string> Daemon::health() const {
  const int64_t now = SteadyClock::now().time_since_epoch().count();
  if (now - last_drain_ns_.load() > std::chrono::duration_cast<std::chrono::nanoseconds>(kDrainDeadline).count())
    return {false, "ring buffer not drained in time"};
  std::lock_guard<std::mutex> lock(failures_mu_);
  if (!failures_.empty()) return {true, "failing outputs: " + failures_};
  return {true, ""};
}

int Daemon::run() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  // Block before any thread starts so that only the signalfd sees them.
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (int rc = start()) return rc;

  int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  itimerspec its{};
  its.it_interval.tv_nsec = its.it_value.tv_nsec = kTickMs * 1000000L;
  timerfd_settime(tfd, 0, &its, nullptr);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (sfd < 0 || tfd < 0 || ep < 0) return fail(std::string("event loop: ") + strerror(errno));
  for (int e : {reloader_->setup_errno(), snapshots_->setup_errno()})
    if (e) return fail(std::string("event loop: eventfd: ") + strerror(e));
  for (int fd : {sfd, tfd, ring_->epoll_fd(), reloader_->fd(), snapshots_->fd(), services_ ? services_->fd() : -1}) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) return fail(std::string("epoll_ctl: ") + strerror(errno));
  }
  last_drain_ns_ = SteadyClock::now().time_since_epoch().count();
  snapshots_->start(SteadyClock::now());

  bool stop = false;
  bool more_queued = false;
  while (!stop) {
    epoll_event events[8];
    // A drain that used its whole budget left records queued: look at the
    // timer and signals without blocking, then drain again.
    int n = epoll_wait(ep, events, 8, more_queued ? 0 : -1);
    if (n < 0 && errno != EINTR) return fail(std::string("epoll_wait: ") + strerror(errno));
    const auto woke = SteadyClock::now();
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == tfd) {
        uint64_t expirations;
        if (read(tfd, &expirations, sizeof(expirations)) < 0) {
        }  // EAGAIN: the tick is taken anyway
        on_tick();
      } else if (fd == sfd) {
        signalfd_siginfo si{};
        if (read(sfd, &si, sizeof(si)) != sizeof(si)) continue;
        if (si.ssi_signo == SIGHUP)
          reloader_->request();
        else
          stop = true;
      } else if (fd == reloader_->fd()) {
        reloader_->finish([this](PreparedReload& r) { apply_reload(r); });
      } else if (fd == snapshots_->fd()) {
        snapshots_->finish();
      } else if (services_ && fd == services_->fd()) {
        services_->on_readable();
      }
    }
    more_queued = drain_ring() == RingReader::kDefaultDrainBudget;
    longest_pass_ = std::max(longest_pass_, SteadyClock::now() - woke);
  }

  // No request in flight and none accepted from here on: the handlers read
  // the probe's maps, the policy and the sinks, which are detached, closed
  // and freed below.
  http_.reset();
  // The jobs read the iterator's link and reopen the flow log: done before those go.
  snapshots_->wait();
  reloader_->wait();
  // Nothing starts, attaches or changes the policy from here on: the
  // handover below stores what the next daemon takes over.
  loop_->stop();
  // Under a service manager that keeps descriptors across a restart, the
  // programs stay attached for the next daemon (docs/packaging.md "Restarts"), the
  // policy's sysctl guard with them: it reads on where this one stops, and
  // a stop for good releases them. Records keep arriving, so the drain
  // ends within a second; what it leaves is the next daemon's. Otherwise
  // detach first so nothing new arrives, then write out what the kernel
  // queued: the queue is finite, drain it to the end.
  store_handover();
  if (!handover_stored_) {
    policy_->unload();
    probe_->detach();
  }
  const auto drain_until = SteadyClock::now() + std::chrono::seconds(1);
  while (drain_ring() == RingReader::kDefaultDrainBudget && (!handover_stored_ || SteadyClock::now() < drain_until)) {
  }
  account(SteadyClock::now());
  fanout_->close(kCloseTimeout);
  ring_.reset();
  probe_.reset();
  close(ep);
  close(tfd);
  close(sfd);
  log_line("stopped");
  return 0;
}

}  // namespace

int run_daemon(const RunOptions& options) {
  Daemon d(options);
  return d.run();
}

}  // namespace tcpscope
