#include "daemon/daemon.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include <prometheus/registry.h>

#include "aggregate/aggregator.h"
#include "pipeline/asn_ranking.h"
#include "aggregate/flow_distributions.h"
#include "aggregate/open_flows.h"
#include "config/config.h"
#include "config/config_reload.h"
#include "control/cc_controller.h"
#include "control/controller_store.h"
#include "enrich/asn_db.h"
#include "enrich/enricher.h"
#include "enrich/peer_classifier.h"
#include "export/flow_log.h"
#include "http/http_server.h"
#include "export/kafka_export.h"
#include "export/output_status.h"
#include "export/self_metrics.h"
#include "kernel/capabilities.h"
#include "kernel/flow_probe.h"
#include "kernel/flow_snapshot.h"
#include "kernel/installed_policy.h"
#include "kernel/ring_reader.h"
#include "os/background_job.h"
#include "os/cgroup_path.h"
#include "os/congestion_controls.h"
#include "pipeline/flow_pipeline.h"
#include "record/flow_decoder.h"
#include "record/flow_json.h"
#include "record/kernel_capabilities.h"
#include "record/transfer_json.h"
#include "record/transfer_sampling.h"

namespace tcpscope {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int kTickMs = 100;                  // periodic drain of the ring buffer
constexpr size_t kFlowLogQueueBytes = 64u << 20;
constexpr size_t kMaxBatchBytes = 4u << 20;       // NDJSON handed to the writer at a time
constexpr auto kClockRefresh = std::chrono::seconds(10);
constexpr auto kTopAsnRecompute = std::chrono::seconds(60);
constexpr auto kDrainDeadline = std::chrono::seconds(2);  // /healthz fails past this
constexpr int kReloadNiceIncrement = 10;                  // the reload worker vs the draining loop
// Namespace visits per open-flow snapshot. A visit walks the host's TCP table
// (measured: 0.57 ms with 2k sockets on the host), so some thousands of
// namespaces with sockets fit; empty ones cost about 20 µs each.
constexpr auto kSnapshotBudget = std::chrono::seconds(2);

void log_line(const std::string& msg) { std::fprintf(stderr, "tcpscope: %s\n", msg.c_str()); }

int fail(const std::string& msg, int code = 1) {
  log_line(msg);
  return code;
}

// libbpf's output behind a failed start (for a refused program, the
// verifier's log: often thousands of lines) does not belong in the one line
// that says what failed: it goes to a file of its own, which that line names.
// The logs directory systemd made (LogsDirectory=), else $TMPDIR, else /tmp.
std::string save_load_log(const std::string& log) {
  std::string dir = "/tmp";
  for (const char* var : {"LOGS_DIRECTORY", "TMPDIR"}) {
    const char* v = getenv(var);
    if (v && *v) {
      dir = std::string(v).substr(0, std::string(v).find(':'));
      break;
    }
  }
  std::string path = dir + "/tcpscope-load-XXXXXX.log";
  int fd = mkstemps(path.data(), 4);  // O_EXCL, mode 0600
  if (fd < 0) return std::string("libbpf/verifier log not saved: ") + dir + ": " + strerror(errno);
  FILE* f = fdopen(fd, "w");
  bool ok = f && std::fputs(log.c_str(), f) >= 0;
  if (f ? std::fclose(f) != 0 : close(fd) != 0) ok = false;
  if (!ok) return "libbpf/verifier log not saved: " + path + ": " + strerror(errno);
  return "full libbpf/verifier log in " + path;
}

ConfigOverrides overrides_of(const RunOptions& opts) {
  ConfigOverrides o;
  o.listen = opts.listen;
  o.flow_log = opts.flow_log;
  o.cgroup = opts.cgroup;
  o.transfer_sampling_rate = opts.transfer_sampling_rate;
  return o;
}

// Reads the config (file or embedded) and applies the command-line overrides
// (config.cc: load_effective_config). On failure *error is one line: the
// first problem, and where to see the others.
bool load_config(const RunOptions& opts, Config* out, std::string* error) {
  std::vector<ConfigError> errors;
  Config cfg = load_effective_config(opts.config_path, overrides_of(opts), kernel_congestion_controls(), &errors);
  if (!errors.empty()) {
    std::string line = errors.front().to_string();
    if (errors.size() > 1)
      line += " (and " + std::to_string(errors.size() - 1) + " more: tcpscope check-config " +
              opts.config_path + ")";
    *error = line;
    return false;
  }
  *out = std::move(cfg);
  return true;
}

bool build_tables(const Config& cfg, EnrichmentTables* out, std::string* error) {
  EnrichmentTables t;
  if (!cfg.asn.mmdb.empty() || !cfg.asn.prefix_file.empty()) {
    t.asn_db = AsnDatabase::load(cfg.asn, error);
    if (!t.asn_db) return false;
  }
  t.classifier = std::make_shared<const PeerClassifier>(cfg.peer_classes, cfg.default_peer_class);
  *out = std::move(t);
  return true;
}

class Daemon {
 public:
  explicit Daemon(RunOptions opts) : opts_(std::move(opts)) {}
  int run();

 private:
  int start();
  void on_event(const tcpscope_flow_event& ev);
  void on_transfer(const tcpscope_transfer_event& ev);
  void on_close(const tcpscope_close_event& ev);
  void handle_flow(const FlowRecord& flow);
  void handle_transfer(TransferRecord transfer);
  // A record's line was appended to batch_: counts it, and hands the batch
  // to the flow log once it is large.
  void batched_line();
  void flush_batch();
  int drain_ring();
  // The record to the flow log (its JSON line) and to Kafka (in
  // export.kafka.format: the same line, serialized once, for json).
  template <class Record>
  void export_record(const Record& record, bool to_flow_log);
  void on_tick();
  void update_recursion_metrics();
  struct PreparedReload {
    bool ok = false;
    Config config;
    EnrichmentTables tables;
    std::string error;
    std::string flow_log_error;  // the reopen failed (the reload itself may not have)
    double seconds = 0;
  };
  void start_reload();
  void finish_reload();
  void apply_reload(PreparedReload& r);
  void start_snapshot();
  void finish_snapshot();
  // The controllers' cohorts into the kernel (a new ASN cohort reinstalls
  // the policy, so the trie names it), and their state to disk.
  void apply_cohorts();
  void step_controllers();
  void save_controllers();
  std::string open_flows_json(const std::string& query) const;
  std::pair<bool, std::string> health() const;

  RunOptions opts_;
  Config config_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<AsnRanking> asn_ranking_;  // labels flows for both outputs below
  std::unique_ptr<Aggregator> aggregator_;
  std::unique_ptr<FlowDistributions> distributions_;  // for `compare --server`
  std::unique_ptr<SelfMetrics> self_;
  std::unique_ptr<Enricher> enricher_;
  std::unique_ptr<FlowLog> flow_log_;
  OutputStatus flow_log_status_{"flow log"};
  std::unique_ptr<KafkaExport> kafka_;
  OutputStatus kafka_status_{"kafka export"};
  // What /healthz (an HTTP thread) says of failing outputs, set on the loop.
  mutable std::mutex outputs_mu_;
  std::string failing_outputs_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<FlowProbe> probe_;
  std::unique_ptr<RingReader> ring_;
  std::unique_ptr<InstalledPolicy> policy_;
  std::unique_ptr<CcController> controller_;
  ControllerStore controller_store_;
  std::string controller_store_error_;  // the last one logged, so a lasting one is logged once
  MonotonicToRealtime clock_;
  std::unique_ptr<FlowPipeline> pipeline_;  // every record, finished or open, goes through it

  std::string batch_;  // NDJSON lines of the current drain
  uint64_t batch_records_ = 0;
  std::atomic<int64_t> last_drain_ns_{0};
  SteadyClock::time_point last_clock_refresh_ = SteadyClock::now();
  SteadyClock::time_point drain_time_ = SteadyClock::now();  // of the drain in progress
  SteadyClock::time_point last_top_asn_ = SteadyClock::now();
  SteadyClock::time_point last_snapshot_{};
  // SIGHUP: the reload being prepared off the loop (see start_reload).
  BackgroundJob<std::unique_ptr<PreparedReload>> reload_;
  bool reload_again_ = false;
  // Open-flow snapshots, read off the loop; the one that a time budget cut
  // short is continued from snapshot_rotation_ (touched only by the job).
  BackgroundJob<FlowSnapshot> snapshot_;
  size_t snapshot_rotation_ = 0;
  SteadyClock::time_point next_skip_log_{};
  // The latest snapshot of open flows, read by HTTP threads.
  std::shared_ptr<const OpenFlows> open_flows_ = std::make_shared<OpenFlows>();
};

int Daemon::start() {
  std::string error;
  if (!load_config(opts_, &config_, &error)) return fail(error, 2);

  EnrichmentTables tables;
  if (!build_tables(config_, &tables, &error)) return fail("ASN data: " + error);
  enricher_ = std::make_unique<Enricher>(std::move(tables));

  if (!config_.flow_log.empty()) {
    flow_log_ = FlowLog::open(config_.flow_log, kFlowLogQueueBytes, &error);
    if (!flow_log_) return fail(error);
  }

  asn_ranking_ = std::make_unique<AsnRanking>(AsnRankingOptions::from_config(config_));
  aggregator_ = std::make_unique<Aggregator>(registry_, AggregatorOptions::from_config(config_));
  distributions_ = std::make_unique<FlowDistributions>(FlowDistributionsOptions::from_config(config_));
  auto features = probe_kernel_features();
  self_ = std::make_unique<SelfMetrics>(registry_, TCPSCOPE_VERSION, libbpf_version_string(),
                                        features.kernel_release);

  http_ = HttpServer::start(config_.listen, config_.http, &error);
  if (!http_) return fail(error);
  http_->serve_metrics(registry_);
  http_->set_health([this] { return health(); });
  http_->handle_json("/api/v1/flows", [this](const std::string& q) { return open_flows_json(q); });
  http_->handle_json("/api/v1/distributions",
                     [this](const std::string& q) { return distributions_->handle_query(q); });

  FlowProbeOptions popts;
  popts.ring_buffer_bytes = config_.ring_buffer_bytes;
  // The policy programs go on the cgroup v2 root unless told otherwise; a
  // host without cgroup v2 can still observe, only not steer.
  popts.cgroup_path = config_.cgroup.empty() ? cgroup2_mount_point() : config_.cgroup;
  if (popts.cgroup_path.empty()) {
    if (!config_.cc_policy.rules.empty()) return fail("cc_policy has rules but no cgroup v2 hierarchy is mounted");
    log_line("no cgroup v2 hierarchy mounted: congestion-control policy, setsockopt and sysctl hooks disabled");
  }
  std::string details;
  probe_ = FlowProbe::open_and_attach(popts, &error, &details);
  if (!probe_) return fail(details.empty() ? error : error + "; " + save_load_log(details));
  policy_ = std::make_unique<InstalledPolicy>(*probe_, registry_);
  controller_ = std::make_unique<CcController>(registry_, [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  });
  controller_->configure(config_);
  if (!controller_->empty()) {
    if (auto saved = controller_store_.load(&error)) {
      if (!controller_->restore(*saved, &error))
        log_line("controller state " + controller_store_.path() + " ignored: " + error);
      else
        log_line("controller state restored from " + controller_store_.path());
    } else if (!error.empty()) {
      log_line("controller state ignored: " + error);
    }
    policy_->set_cohorts(controller_->cohort_asns(), controller_->cohort_weights(), &error);
  }
  if (!policy_->load(config_, enricher_->tables()->asn_db.get(), &error)) return fail("cc_policy: " + error);
  const auto sends = send_transfer_delimiter(probe_->missing_tracepoints());
  controller_->set_send_transfers(sends.has_value());
  pipeline_ = std::make_unique<FlowPipeline>(clock_, *enricher_, policy_->rule_names(),
                                             sends.value_or(TransferDelimiter::kWrite));
  http_->handle_json("/api/v1/policy", [this](const std::string&) { return policy_->to_json(); });
  http_->handle_json("/api/v1/controller", [this](const std::string&) { return controller_->status_json(); });
  RingReader::Handlers handlers;
  handlers.flow = [this](const tcpscope_flow_event& ev) { on_event(ev); };
  handlers.transfer = [this](const tcpscope_transfer_event& ev) { on_transfer(ev); };
  handlers.close = [this](const tcpscope_close_event& ev) { on_close(ev); };
  ring_ = RingReader::create(probe_->ring_buffer_fd(), probe_->ring_buffer_bytes(), std::move(handlers), &error);
  if (!ring_) return fail(error);
  if (!drop_capabilities_after_start(*probe_, config_.snapshot_interval_s > 0, &error)) return fail(error);
  // After the drop: librdkafka's threads block every signal, so they could
  // not be told to drop theirs, and they need no capability to connect.
  if (config_.export_.kafka.enabled()) {
    kafka_ = KafkaExport::open(config_.export_.kafka, registry_, &error);
    if (!kafka_) return fail(error);
  }

  std::string attached;
  for (const auto& p : probe_->attached()) attached += (attached.empty() ? "" : ",") + p;
  log_line("running: " + std::to_string(probe_->attached().size()) + " BPF programs attached (" + attached +
           "), metrics on http://" + config_.listen + "/metrics" +
           (config_.flow_log.empty() ? "" : ", flow log " + config_.flow_log) +
           (kafka_ ? ", records to Kafka " + kafka_broker_list(config_.export_.kafka) + " as " +
                         config_.export_.kafka.format
                   : ""));
  for (const auto& d : probe_->degraded()) log_line("warning: this kernel has no tracepoint " + d);
  for (const auto& c : record_capabilities(probe_->missing_tracepoints())) log_line("kernel: " + c);
  return 0;
}

// The record's path: decode, enrich, name the rule that chose its CC, then
// metrics, distributions, controller and outputs.
void Daemon::on_event(const tcpscope_flow_event& ev) { handle_flow(pipeline_->record_of(ev)); }

void Daemon::on_transfer(const tcpscope_transfer_event& ev) { handle_transfer(pipeline_->record_of(ev)); }

// The transfers first, as the kernel ended them before the flow; enriched
// once, with the flow.
void Daemon::on_close(const tcpscope_close_event& ev) {
  const FlowRecord flow = pipeline_->record_of(ev.flow);
  for (uint32_t i = 0; i < ev.n_transfers; ++i) handle_transfer(pipeline_->record_of(ev.transfers[i], flow));
  handle_flow(flow);
}

void Daemon::handle_flow(const FlowRecord& flow) {
  const AsnRanking::Counted asn = asn_ranking_->add(flow.enrichment.asn, flow.bytes_acked + flow.bytes_received);
  aggregator_->add(flow, asn.label);
  // Sketches are keyed by the raw ASN (as the flow log); the label only
  // decides whether a new key may still be added when the table is full.
  distributions_->add_at(flow, asn.label, drain_time_);
  if (asn.reranked) aggregator_->retire_series(*asn_ranking_);
  controller_->observe(flow);
  export_record(flow, flow_log_ != nullptr);
}

// A transfer takes the same path as its flow's record, but its bytes are the
// flow's: it is labelled by the ASN ranking without being counted in it. The
// metrics count every transfer; the outputs carry a sample of the flows'
// (transfer_sampling_rate), each such flow with all its transfers.
void Daemon::handle_transfer(TransferRecord transfer) {
  const AsnLabel label = asn_ranking_->label(transfer.enrichment.asn);
  aggregator_->add(transfer, label);
  distributions_->add_at(transfer, label, drain_time_);
  controller_->observe(transfer);
  if (!transfer_sampled(transfer.flow_start_ns, config_.transfer_sampling_rate)) return;
  transfer.sampling_rate = config_.transfer_sampling_rate;
  export_record(transfer, flow_log_ && config_.flow_log_transfers);
}

template <class Record>
void Daemon::export_record(const Record& r, bool to_flow_log) {
  std::string_view line;
  if (to_flow_log) {
    const size_t start = batch_.size();
    append_json(r, &batch_);
    line = std::string_view(batch_).substr(start);
  }
  // Before batched_line(), which may hand the batch (and the line) on.
  if (kafka_) kafka_->produce(r, line);
  if (to_flow_log) batched_line();
}

void Daemon::batched_line() {
  ++batch_records_;
  // Under sustained overload one drain can last long: hand the writer
  // bounded batches instead of letting this one grow without limit.
  if (batch_.size() >= kMaxBatchBytes) flush_batch();
}

// One drain's records reach the metrics together (Aggregator::begin_batch),
// and the distributions at the drain's time: one clock read per drain, not
// per record (a drain lasts milliseconds, their windows minutes).
int Daemon::drain_ring() {
  drain_time_ = SteadyClock::now();
  aggregator_->begin_batch();
  const int n = ring_->drain();
  aggregator_->end_batch();
  return n;
}

void Daemon::flush_batch() {
  if (flow_log_ && batch_records_) {
    flow_log_->submit(std::move(batch_), batch_records_);
    batch_.clear();
    batch_records_ = 0;
  }
  if (kafka_) kafka_->send();
  last_drain_ns_ = SteadyClock::now().time_since_epoch().count();
}

void Daemon::on_tick() {
  auto now = SteadyClock::now();
  if (now - last_clock_refresh_ >= kClockRefresh) {
    clock_.refresh();
    last_clock_refresh_ = now;
  }
  if (now - last_top_asn_ >= kTopAsnRecompute) {
    asn_ranking_->recompute();
    aggregator_->retire_series(*asn_ranking_);
    last_top_asn_ = now;
  }
  if (config_.snapshot_interval_s &&
      now - last_snapshot_ >= std::chrono::seconds(config_.snapshot_interval_s)) {
    start_snapshot();
    last_snapshot_ = now;
  }
  policy_->update_metrics();
  step_controllers();
  // A socket whose storage could not be created is never tracked: its record is lost too.
  self_->set_records_lost(probe_->counter(TCPSCOPE_CNT_RECORDS_LOST) +
                          probe_->counter(TCPSCOPE_CNT_STORAGE_FAILED));
  self_->set_transfer_records_lost(probe_->counter(TCPSCOPE_CNT_TRANSFERS_LOST));
  update_recursion_metrics();
  self_->set_ring_buffer_fill(ring_->fill_ratio());
  self_->set_records(ring_->records());
  self_->set_transfer_records(ring_->transfers());
  self_->set_enrichment_lookups(pipeline_->lookups());
  std::string failing;
  if (flow_log_) {
    const uint64_t dropped = flow_log_->dropped_records();
    self_->set_flow_log_dropped(dropped);
    for (const auto& line : flow_log_status_.update(flow_log_->last_error(), dropped, now)) log_line(line);
    failing = flow_log_status_.health();
  }
  if (kafka_) {
    kafka_->update_metrics();
    for (const auto& line : kafka_status_.update(kafka_->last_error(), kafka_->lost(), now)) log_line(line);
    const std::string h = kafka_status_.health();
    if (!h.empty()) failing += (failing.empty() ? "" : "; ") + h;
  }
  if (flow_log_ || kafka_) {
    std::lock_guard<std::mutex> lock(outputs_mu_);
    failing_outputs_ = std::move(failing);
  }
}

// Every program's recursion misses, and the state changes neither
// state-change program saw: skips of the first copy the nested one did not
// pick up (an interrupt in the kernel's bookkeeping just before the first
// copy marks its CPU busy or just after it clears the mark). Most are
// intermediate states that cost nothing; a missed first or last transition
// costs the record, so they are exported on their own rather than guessed
// into the records lost. Skips of the nested copy itself cost nothing: it is
// only skipped while it checks an event the first copy has handled.
void Daemon::update_recursion_metrics() {
  uint64_t first_copy_misses = 0;
  for (const auto& [program, misses] : probe_->recursion_misses()) {
    self_->set_recursion_misses(program, misses);
    if (program == "on_state_change") first_copy_misses = misses;
  }
  // Read after the misses: a skip counted there is already caught here.
  const uint64_t caught = probe_->counter(TCPSCOPE_CNT_NESTED_TRANSITIONS);
  self_->set_state_changes_missed(first_copy_misses > caught ? first_copy_misses - caught : 0);
}

// SIGHUP. Reading the config and building the ASN tables can take a second
// (a 1M-line prefix file, a full MaxMind DB); doing it on this thread would
// stop the ring buffer's drain for that long, and a busy host fills the ring
// and loses records. So a worker thread builds everything immutable
// (prepare_reload: config, AsnDatabase, PeerClassifier) and wakes the loop
// through reload_efd_; apply_reload() then swaps it in on the loop, where
// everything else (aggregator, policy maps, flow log) is touched. A SIGHUP
// while a reload is being prepared runs one more reload after it, so the
// last signal always sees the files as they are after it was sent.
void Daemon::start_reload() {
  if (reload_.running()) {
    reload_again_ = true;
    return;
  }
  reload_.start([this] {
    // Below the loop's priority: on a busy host the drain must win the CPU
    // over a reload that can wait (Linux: the nice value is per thread).
    const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    const int nice_now = getpriority(PRIO_PROCESS, tid);
    if (errno == 0 && setpriority(PRIO_PROCESS, tid, std::min(nice_now + kReloadNiceIncrement, 19)) != 0) {
    }
    auto r = std::make_unique<PreparedReload>();
    const auto t0 = SteadyClock::now();
    std::string err;
    // Whatever the config says, a SIGHUP is logrotate's too. The open
    // checks the path (owned_file.h) and never blocks, off the loop anyway.
    std::string log_err;
    if (flow_log_ && !flow_log_->reopen(&log_err))
      r->flow_log_error = log_err + "; the flow log stays on the file it had";
    if (!load_config(opts_, &r->config, &err))
      r->error = err;
    else if (!build_tables(r->config, &r->tables, &err))
      r->error = "ASN data: " + err;
    else
      r->ok = true;
    r->seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    return r;
  });
}

void Daemon::finish_reload() {
  auto r = reload_.take();
  if (!r) return;
  if (*r) apply_reload(**r);
  if (reload_again_) {
    reload_again_ = false;
    start_reload();
  }
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
  // A controller rule that changed starts afresh, one removed is gone: its
  // flows get the new policy's weights from the install on.
  const nlohmann::json controllers_before = controller_->save();
  controller_->configure(merged);
  policy_->set_cohorts(controller_->cohort_asns(), controller_->cohort_weights(), &error);
  if (!policy_->load(merged, r.tables.asn_db.get(), &error)) {
    log_line("reload failed: cc_policy: " + error + "; keeping the previous config and data");
    controller_->configure(config_);
    controller_->restore(controllers_before, &error);
    policy_->set_cohorts(controller_->cohort_asns(), controller_->cohort_weights(), &error);
    self_->count_reload(false);
    return;
  }
  // The parser has checked the digest; should this still refuse it, the old credentials stay.
  if (!http_->set_basic_auth(merged.http, &error)) log_line("reload: " + error + "; the previous credentials stay");
  enricher_->replace(std::move(r.tables));
  aggregator_->update_options(AggregatorOptions::from_config(merged));
  if (asn_ranking_->update_options(AsnRankingOptions::from_config(merged))) aggregator_->retire_series(*asn_ranking_);
  if (distributions_->update_options(FlowDistributionsOptions::from_config(merged)))
    log_line("reload: new size classes: the compare --server distributions start empty");
  for (const auto& key : next_start) log_line("reload: " + key + " takes effect at the next start");
  config_ = std::move(merged);
  self_->count_reload(true);
  char took[32];
  std::snprintf(took, sizeof(took), "%.2f", r.seconds);
  log_line("reloaded " + (opts_.config_path.empty() ? std::string("<embedded>") : opts_.config_path) +
           " (read and built in " + took + " s off the event loop)");
}

void Daemon::apply_cohorts() {
  std::string error;
  switch (policy_->set_cohorts(controller_->cohort_asns(), controller_->cohort_weights(), &error)) {
    case InstalledPolicy::CohortUpdate::kApplied:
      return;
    case InstalledPolicy::CohortUpdate::kNeedsInstall:
      if (policy_->load(config_, enricher_->tables()->asn_db.get(), &error)) return;
      break;
    case InstalledPolicy::CohortUpdate::kFailed:
      break;
  }
  log_line("controller: applying cohort weights failed: " + error + "; the kernel keeps the previous ones");
}

void Daemon::step_controllers() {
  if (controller_->empty()) return;
  const double now_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const CcController::StepResult step = controller_->step(now_s);
  if (step.changed) apply_cohorts();
  if (step.tested) save_controllers();
}

void Daemon::save_controllers() {
  std::string error;
  if (controller_store_.save(controller_->save(), &error)) {
    controller_store_error_.clear();
  } else if (error != controller_store_error_) {
    log_line("controller state not saved: " + error);
    controller_store_error_ = error;
  }
}

// Long-lived flows must not be invisible until they close: every
// snapshot_interval_s the open flows are read through the socket iterator
// (off the loop: it enters every network namespace), then enriched like
// finished ones here and counted into tcpscope_active_flows.
void Daemon::start_snapshot() {
  const int link = probe_->snapshot_link_fd();
  if (link < 0 || snapshot_.running()) return;
  snapshot_.start([link, rotation = &snapshot_rotation_] {
    FlowSnapshot snap = snapshot_all_namespaces(link, kSnapshotBudget, rotation);
    sort_by_flow_identity(&snap.flows);  // here, off the ring's loop
    return snap;
  });
}

void Daemon::finish_snapshot() {
  auto snap = snapshot_.take();
  if (!snap) return;
  auto flows = std::make_shared<OpenFlows>(clock_);
  flows->reserve(snap->flows.size());
  Aggregator::ActiveFlows active;
  for (const auto& ev : snap->flows) {
    const FlowRecord f = pipeline_->record_of(ev);
    ++active[{f.enrichment.peer_class, f.cc}];
    flows->add(ev, f);
  }
  aggregator_->set_active_flows(active);
  self_->set_snapshot({static_cast<int64_t>(flows->size()), snap->namespaces, snap->namespaces_empty,
                       snap->namespaces_skipped, snap->namespace_errors, snap->seconds});
  std::atomic_store(&open_flows_, std::shared_ptr<const OpenFlows>(std::move(flows)));
  const auto now = SteadyClock::now();
  if (snap->namespaces_skipped && now >= next_skip_log_) {
    log_line("snapshot: " + std::to_string(snap->namespaces_skipped) +
             " network namespaces not reached within the snapshot's time budget; the next one starts with them");
    next_skip_log_ = now + std::chrono::minutes(1);
  }
}

std::string Daemon::open_flows_json(const std::string& query) const {
  return std::atomic_load(&open_flows_)->to_json(parse_flows_query(query));
}

std::pair<bool, std::string> Daemon::health() const {
  if (!probe_ || !ring_) return {false, "BPF programs not attached"};
  int64_t last = last_drain_ns_.load();
  int64_t now = SteadyClock::now().time_since_epoch().count();
  if (now - last > std::chrono::duration_cast<std::chrono::nanoseconds>(kDrainDeadline).count())
    return {false, "ring buffer not drained in time"};
  std::lock_guard<std::mutex> lock(outputs_mu_);
  if (!failing_outputs_.empty()) return {true, "failing outputs: " + failing_outputs_};
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
  for (int e : {reload_.setup_errno(), snapshot_.setup_errno()})
    if (e) return fail(std::string("event loop: eventfd: ") + strerror(e));
  for (int fd : {sfd, tfd, ring_->epoll_fd(), reload_.fd(), snapshot_.fd()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) return fail(std::string("epoll_ctl: ") + strerror(errno));
  }
  flush_batch();
  start_snapshot();
  last_snapshot_ = SteadyClock::now();

  bool stop = false;
  bool more_queued = false;
  while (!stop) {
    epoll_event events[8];
    // A drain that used its whole budget left records queued: look at the
    // timer and signals without blocking, then drain again.
    int n = epoll_wait(ep, events, 8, more_queued ? 0 : -1);
    if (n < 0 && errno != EINTR) return fail(std::string("epoll_wait: ") + strerror(errno));
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == tfd) {
        uint64_t expirations;
        if (read(tfd, &expirations, sizeof(expirations)) < 0) {
        }
        on_tick();
      } else if (fd == sfd) {
        signalfd_siginfo si{};
        if (read(sfd, &si, sizeof(si)) != sizeof(si)) continue;
        if (si.ssi_signo == SIGHUP)
          start_reload();
        else
          stop = true;
      } else if (fd == reload_.fd()) {
        finish_reload();
      } else if (fd == snapshot_.fd()) {
        finish_snapshot();
      }
    }
    more_queued = drain_ring() == RingReader::kDefaultDrainBudget;
    flush_batch();
  }

  // The jobs read the iterator's link and reopen the flow log: done before those go.
  snapshot_.wait();
  reload_.wait();
  // Detach first so nothing new arrives, then write out what the kernel queued.
  if (!controller_->empty()) save_controllers();
  policy_->unload();
  probe_->detach();
  // Nothing new can arrive now: the queue is finite, drain it to the end.
  while (drain_ring() == RingReader::kDefaultDrainBudget) flush_batch();
  flush_batch();
  on_tick();
  ring_.reset();
  probe_.reset();
  if (flow_log_) flow_log_->close(5000);
  if (kafka_) kafka_->close(5000);
  http_.reset();
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
