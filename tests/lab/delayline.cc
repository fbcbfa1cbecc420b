// tcpscope_delayline: a user-space network path between two TAP devices.
//
// The lab's kernel has no netem qdisc, so this program is the lab's "wire":
// it creates two TAP devices, A and B, and forwards every Ethernet frame read
// from one to the other, after a path model has had its way with it:
//
//   arrival ──loss──▶ bottleneck queue ──rate──▶ propagation delay (+jitter) ──▶ write
//
//   * loss: each frame is dropped with probability p (seeded RNG, so a run is
//     reproducible);
//   * bottleneck: a FIFO of bounded size (packets and/or bytes, tail drop, like
//     a router buffer) drained at `rate`: a frame leaves it at
//     max(arrival, previous departure) + frame_bits / rate;
//   * propagation: the frame then travels for `delay` ± uniform `jitter`;
//     frames keep their order unless `reorder=1` is given;
//   * the frame is written to the other TAP at that due time (a writer thread
//     per direction sleeps on CLOCK_MONOTONIC with 1 ns timer slack).
//
// The two directions (a-to-b, b-to-a) are independent and configured apart.
// The TAP devices are created in the namespace this program starts in; the
// lab moves each into its own network namespace afterwards (a TAP's file
// descriptor keeps working across the move). TAPs are not persistent: when
// this process exits, for whatever reason, both devices disappear.
//
// Usage: see kUsage below, and tests/lab/README.md.
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tcpscope {
namespace lab {
namespace {

const char kUsage[] =
    "usage: tcpscope_delayline --tap-a NAME --tap-b NAME [options]\n"
    "  --a-to-b SPEC      path model for frames read from A and written to B\n"
    "  --b-to-a SPEC      path model for frames read from B and written to A\n"
    "  --both SPEC        applied to both directions (before --a-to-b/--b-to-a)\n"
    "  --seed N           RNG seed for loss and jitter (default 1)\n"
    "  --rt-priority N    SCHED_FIFO priority of the forwarding threads (default 10, 0 = off)\n"
    "  --stats FILE       write per-direction counters as JSON here at exit\n"
    "  --ready FILE       create FILE once both TAP devices exist\n"
    "  --control PATH     UNIX stream socket taking one command per connection:\n"
    "                       'stats' -> counters as JSON\n"
    "                       'set a-to-b|b-to-a|both SPEC' -> change the model live\n"
    "SPEC: comma-separated key=value, e.g. delay=25ms,jitter=1ms,loss=0.5%,rate=50mbit,queue=250\n"
    "  delay, jitter  one-way propagation delay and its uniform +/- spread (ns, us, ms, s)\n"
    "  loss           drop probability: 0.01 or 1%\n"
    "  rate           bottleneck rate of Ethernet frame bits (kbit, mbit, gbit; 0 = none)\n"
    "  queue          bottleneck buffer in frames (0 = unbounded)\n"
    "  queue_bytes    bottleneck buffer in bytes (0 = unbounded)\n"
    "  reorder        1 lets jitter reorder frames (default 0)\n";

constexpr size_t kMaxFrame = 65536;
// Frames past the bottleneck are on the wire for `delay`; this bounds the
// memory they take when no rate limits them (a wire never holds more than
// rate * delay, but an unlimited rate has no such bound).
constexpr size_t kMaxInFlight = 200000;

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The path model of one direction.
struct PathSpec {
  int64_t delay_ns = 0;
  int64_t jitter_ns = 0;
  double loss = 0;
  uint64_t rate_bps = 0;  // 0: no bottleneck
  uint64_t queue_frames = 0;
  uint64_t queue_bytes = 0;
  bool reorder = false;
};

bool parse_duration_ns(const std::string& v, int64_t* out) {
  char* end = nullptr;
  double x = strtod(v.c_str(), &end);
  std::string unit(end);
  double mult;
  if (unit == "ns") mult = 1;
  else if (unit == "us") mult = 1e3;
  else if (unit == "ms") mult = 1e6;
  else if (unit == "s") mult = 1e9;
  else return false;  // a bare number is ambiguous; insist on a unit
  if (end == v.c_str() || x < 0) return false;
  *out = static_cast<int64_t>(x * mult + 0.5);
  return true;
}

bool parse_rate_bps(const std::string& v, uint64_t* out) {
  char* end = nullptr;
  double x = strtod(v.c_str(), &end);
  std::string unit(end);
  double mult;
  if (unit == "" || unit == "bit") mult = 1;
  else if (unit == "kbit") mult = 1e3;
  else if (unit == "mbit") mult = 1e6;
  else if (unit == "gbit") mult = 1e9;
  else return false;
  if (end == v.c_str() || x < 0) return false;
  *out = static_cast<uint64_t>(x * mult + 0.5);
  return true;
}

bool parse_probability(const std::string& v, double* out) {
  char* end = nullptr;
  double x = strtod(v.c_str(), &end);
  if (end == v.c_str()) return false;
  if (std::string(end) == "%") x /= 100;
  else if (*end != '\0') return false;
  if (x < 0 || x > 1) return false;
  *out = x;
  return true;
}

bool parse_count(const std::string& v, uint64_t* out) {
  char* end = nullptr;
  unsigned long long x = strtoull(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0') return false;
  *out = x;
  return true;
}

// Applies "key=value,key=value" to *spec; on error says which item and why.
bool apply_spec(const std::string& text, PathSpec* spec, std::string* why) {
  PathSpec s = *spec;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      *why = "'" + item + "' is not key=value";
      return false;
    }
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    bool ok;
    if (k == "delay") ok = parse_duration_ns(v, &s.delay_ns);
    else if (k == "jitter") ok = parse_duration_ns(v, &s.jitter_ns);
    else if (k == "loss") ok = parse_probability(v, &s.loss);
    else if (k == "rate") ok = parse_rate_bps(v, &s.rate_bps);
    else if (k == "queue") ok = parse_count(v, &s.queue_frames);
    else if (k == "queue_bytes") ok = parse_count(v, &s.queue_bytes);
    else if (k == "reorder") {
      ok = v == "0" || v == "1";
      s.reorder = v == "1";
    } else {
      *why = "unknown key '" + k + "'";
      return false;
    }
    if (!ok) {
      *why = "bad value for " + k + ": '" + v + "'";
      return false;
    }
  }
  *spec = s;
  return true;
}

std::string spec_json(const PathSpec& s) {
  char buf[320];
  snprintf(buf, sizeof buf,
           "{\"delay_ns\": %lld, \"jitter_ns\": %lld, \"loss\": %.9g, \"rate_bps\": %llu, "
           "\"queue_frames\": %llu, \"queue_bytes\": %llu, \"reorder\": %s}",
           static_cast<long long>(s.delay_ns), static_cast<long long>(s.jitter_ns), s.loss,
           static_cast<unsigned long long>(s.rate_bps),
           static_cast<unsigned long long>(s.queue_frames),
           static_cast<unsigned long long>(s.queue_bytes), s.reorder ? "true" : "false");
  return buf;
}

// Upper bounds of the lateness histogram (write time - due time); the last
// bucket takes everything above the one before it.
constexpr std::array<int64_t, 9> kLateBucketsNs{20000,  50000,   100000,   200000,  500000,
                                                 1000000, 5000000, 20000000, INT64_MAX};

struct Frame {
  int64_t due_ns;
  uint64_t seq;  // arrival order: breaks ties so equal due times keep order
  std::vector<uint8_t> data;
};

struct LaterFirst {
  bool operator()(const Frame& a, const Frame& b) const {
    return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.seq > b.seq;
  }
};

// One direction: a reader thread applies the model on arrival, a writer thread
// writes each frame at its due time.
class Direction {
 public:
  Direction(std::string name, int in_fd, int out_fd, uint64_t seed)
      : name_(std::move(name)), in_fd_(in_fd), out_fd_(out_fd), rng_(seed) {}

  void set_spec(const PathSpec& s) {
    std::lock_guard<std::mutex> g(mu_);
    spec_ = s;
  }

  void start(std::atomic<bool>* failed, int rt_priority) {
    reader_ = std::thread([this, failed] { read_loop(failed); });
    writer_ = std::thread([this] { write_loop(); });
    if (rt_priority > 0) {
      // A loaded machine otherwise makes frames milliseconds late: a runnable
      // compiler outranks a woken writer. Both threads block whenever there is
      // nothing to do, so they cannot starve the machine.
      sched_param sp{};
      sp.sched_priority = rt_priority;
      for (std::thread* t : {&reader_, &writer_}) {
        int err = pthread_setschedparam(t->native_handle(), SCHED_FIFO, &sp);
        if (err)
          fprintf(stderr, "delayline: %s: SCHED_FIFO %d refused (%s); timing will suffer under load\n",
                  name_.c_str(), rt_priority, strerror(err));
      }
    }
    reader_.detach();  // blocked in read(); the process exits under it
    writer_.detach();
  }

  std::string stats_json() {
    std::lock_guard<std::mutex> g(mu_);
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"frames_in\": %llu, \"bytes_in\": %llu, \"frames_out\": %llu, \"bytes_out\": %llu, "
             "\"dropped_loss\": %llu, \"dropped_queue\": %llu, \"dropped_write\": %llu, "
             "\"dropped_overflow\": %llu, \"max_frame_bytes\": %llu, \"max_queue_frames\": %llu, "
             "\"first_out_ns\": %lld, \"last_out_ns\": %lld, \"late_ns_max\": %lld, "
             "\"late_ns_sum\": %lld, \"late_hist\": %s, \"queued\": %zu, \"spec\": %s}",
             ull(frames_in_), ull(bytes_in_), ull(frames_out_), ull(bytes_out_), ull(dropped_loss_),
             ull(dropped_queue_), ull(dropped_write_), ull(dropped_overflow_), ull(max_frame_),
             ull(max_queue_), static_cast<long long>(first_out_ns_),
             static_cast<long long>(last_out_ns_), static_cast<long long>(late_max_ns_),
             static_cast<long long>(late_sum_ns_), late_hist_json().c_str(), wire_.size(),
             spec_json(spec_).c_str());
    return buf;
  }

 private:
  // {"le_20000": n, ..., "le_inf": n}: how late frames were written, in ns.
  std::string late_hist_json() const {
    std::string out = "{";
    for (size_t i = 0; i < kLateBucketsNs.size(); ++i) {
      if (i) out += ", ";
      out += "\"le_" + (kLateBucketsNs[i] == INT64_MAX ? std::string("inf")
                                                        : std::to_string(kLateBucketsNs[i])) +
             "\": " + std::to_string(late_hist_[i]);
    }
    return out + "}";
  }

  static unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

  void read_loop(std::atomic<bool>* failed) {
    std::vector<uint8_t> buf(kMaxFrame);
    for (;;) {
      ssize_t n = read(in_fd_, buf.data(), buf.size());
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        fprintf(stderr, "delayline: %s: read from TAP failed: %s\n", name_.c_str(), strerror(errno));
        failed->store(true);
        return;
      }
      if (n == 0) continue;
      admit(buf.data(), static_cast<size_t>(n), mono_ns());
    }
  }

  // The path model, applied once per frame at its arrival.
  void admit(const uint8_t* data, size_t len, int64_t now) {
    std::lock_guard<std::mutex> g(mu_);
    ++frames_in_;
    bytes_in_ += len;
    max_frame_ = std::max<uint64_t>(max_frame_, len);
    if (spec_.loss > 0 && uniform_(rng_) < spec_.loss) {
      ++dropped_loss_;
      return;
    }
    int64_t departure = now;
    if (spec_.rate_bps > 0) {
      // Frames still being serialised (departure in the future) occupy the buffer.
      while (!bottleneck_.empty() && bottleneck_.front().first <= now) {
        bottleneck_bytes_ -= bottleneck_.front().second;
        bottleneck_.pop_front();
      }
      if ((spec_.queue_frames && bottleneck_.size() >= spec_.queue_frames) ||
          (spec_.queue_bytes && bottleneck_bytes_ + len > spec_.queue_bytes)) {
        ++dropped_queue_;
        return;
      }
      const int64_t tx_ns = static_cast<int64_t>(
          (static_cast<unsigned __int128>(len) * 8 * 1000000000ULL) / spec_.rate_bps);
      departure = std::max(now, last_departure_) + tx_ns;
      last_departure_ = departure;
      bottleneck_.emplace_back(departure, len);
      bottleneck_bytes_ += len;
      max_queue_ = std::max<uint64_t>(max_queue_, bottleneck_.size());
    }
    int64_t due = departure + spec_.delay_ns;
    if (spec_.jitter_ns > 0) {
      std::uniform_int_distribution<int64_t> j(-spec_.jitter_ns, spec_.jitter_ns);
      due = std::max(departure, due + j(rng_));
    }
    if (!spec_.reorder) due = std::max(due, last_due_);
    last_due_ = due;
    if (wire_.size() >= kMaxInFlight) {
      ++dropped_overflow_;
      return;
    }
    const bool new_head = wire_.empty() || due < wire_.top().due_ns;
    wire_.push(Frame{due, seq_++, std::vector<uint8_t>(data, data + len)});
    if (new_head) cv_.notify_one();
  }

  void write_loop() {
    std::vector<Frame> batch;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (wire_.empty()) {
        cv_.wait(lk);
        continue;
      }
      const int64_t due = wire_.top().due_ns;
      const int64_t now = mono_ns();
      if (due > now) {
        // steady_clock is CLOCK_MONOTONIC: the same clock as the due times.
        cv_.wait_until(lk, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(due)));
        continue;
      }
      while (!wire_.empty() && wire_.top().due_ns <= now) {
        // priority_queue::top is const; the frame is popped right after.
        batch.push_back(std::move(const_cast<Frame&>(wire_.top())));
        wire_.pop();
      }
      lk.unlock();
      std::vector<std::pair<size_t, int64_t>> written;  // (bytes, lateness) of frames sent
      for (const Frame& f : batch) {
        ssize_t n = write(out_fd_, f.data.data(), f.data.size());
        const int64_t t = mono_ns();
        // EIO: the other TAP is down (its namespace is being built or torn down).
        written.emplace_back(n == static_cast<ssize_t>(f.data.size()) ? f.data.size() : 0,
                             t - f.due_ns);
      }
      const int64_t t_out = mono_ns();
      lk.lock();
      for (const auto& w : written) {
        if (w.first == 0) {
          ++dropped_write_;
          continue;
        }
        ++frames_out_;
        bytes_out_ += w.first;
        late_max_ns_ = std::max(late_max_ns_, w.second);
        late_sum_ns_ += w.second;
        size_t b = 0;
        while (b + 1 < kLateBucketsNs.size() && w.second > kLateBucketsNs[b]) ++b;
        ++late_hist_[b];
        if (!first_out_ns_) first_out_ns_ = t_out;
        last_out_ns_ = t_out;
      }
      batch.clear();
    }
  }

  const std::string name_;
  const int in_fd_, out_fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  PathSpec spec_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::deque<std::pair<int64_t, size_t>> bottleneck_;  // (departure, bytes)
  uint64_t bottleneck_bytes_ = 0;
  int64_t last_departure_ = 0, last_due_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<Frame, std::vector<Frame>, LaterFirst> wire_;
  uint64_t frames_in_ = 0, bytes_in_ = 0, frames_out_ = 0, bytes_out_ = 0;
  uint64_t dropped_loss_ = 0, dropped_queue_ = 0, dropped_write_ = 0, dropped_overflow_ = 0;
  uint64_t max_frame_ = 0, max_queue_ = 0;
  int64_t first_out_ns_ = 0, last_out_ns_ = 0, late_max_ns_ = 0, late_sum_ns_ = 0;
  std::array<uint64_t, kLateBucketsNs.size()> late_hist_{};
  std::thread reader_, writer_;
};

int open_tap(const std::string& name) {
  if (name.size() >= IFNAMSIZ) {
    fprintf(stderr, "delayline: TAP name '%s' is longer than %d characters\n", name.c_str(),
            IFNAMSIZ - 1);
    return -1;
  }
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "delayline: open /dev/net/tun: %s\n", strerror(errno));
    return -1;
  }
  ifreq ifr{};
  // No IFF_VNET_HDR and no TUNSETOFFLOAD: the kernel cannot hand us GSO
  // super-frames, so every frame is at most MTU-sized and pacing is real.
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    fprintf(stderr, "delayline: create TAP %s (TUNSETIFF): %s\n", name.c_str(), strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

bool write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (!f) {
    fprintf(stderr, "delayline: write %s: %s\n", tmp.c_str(), strerror(errno));
    return false;
  }
  fputs(text.c_str(), f);
  bool ok = fclose(f) == 0 && rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) fprintf(stderr, "delayline: write %s: %s\n", path.c_str(), strerror(errno));
  return ok;
}

struct Lab {
  std::unique_ptr<Direction> a_to_b, b_to_a;
  int64_t started_ns = mono_ns();

  std::string stats_json() {
    return "{\"a_to_b\": " + a_to_b->stats_json() + ", \"b_to_a\": " + b_to_a->stats_json() +
           ", \"uptime_ns\": " + std::to_string(mono_ns() - started_ns) + "}\n";
  }

  // One command per connection, one line of answer.
  std::string command(const std::string& line) {
    std::stringstream ss(line);
    std::string verb, which, text;
    ss >> verb >> which >> text;
    if (verb == "stats") return stats_json();
    if (verb != "set") return "error: unknown command '" + verb + "'\n";
    const bool ab = which == "a-to-b" || which == "both";
    const bool ba = which == "b-to-a" || which == "both";
    if (!ab && !ba) return "error: direction must be a-to-b, b-to-a or both, not '" + which + "'\n";
    // A command changes only the keys it names; nothing changes if any is bad.
    PathSpec new_ab = spec_a_to_b, new_ba = spec_b_to_a;
    std::string why;
    if ((ab && !apply_spec(text, &new_ab, &why)) || (ba && !apply_spec(text, &new_ba, &why)))
      return "error: " + why + "\n";
    spec_a_to_b = new_ab;
    spec_b_to_a = new_ba;
    a_to_b->set_spec(spec_a_to_b);
    b_to_a->set_spec(spec_b_to_a);
    return "ok\n";
  }

  PathSpec spec_a_to_b, spec_b_to_a;
};

void control_loop(int lfd, Lab* lab, std::mutex* mu) {
  for (;;) {
    int c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "delayline: control socket accept: %s\n", strerror(errno));
      return;
    }
    std::string line;
    char ch;
    while (line.size() < 4096 && read(c, &ch, 1) == 1 && ch != '\n') line.push_back(ch);
    std::string reply;
    {
      std::lock_guard<std::mutex> g(*mu);
      reply = lab->command(line);
    }
    size_t off = 0;
    while (off < reply.size()) {
      ssize_t n = write(c, reply.data() + off, reply.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(c);
  }
}

int open_control(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof sa.sun_path) {
    fprintf(stderr, "delayline: control socket %s: %s\n", path.c_str(),
            fd < 0 ? strerror(errno) : "path too long");
    return -1;
  }
  strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0 || listen(fd, 16) < 0) {
    fprintf(stderr, "delayline: control socket %s: %s\n", path.c_str(), strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

int run(int argc, char** argv) {
  std::string tap_a, tap_b, stats_path, ready_path, control_path;
  std::vector<std::pair<std::string, std::string>> specs;  // (direction, spec) in order given
  uint64_t seed = 1, rt_priority = 10;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "delayline: %s needs a value\n%s", a.c_str(), kUsage);
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--tap-a") tap_a = v;
    else if (a == "--tap-b") tap_b = v;
    else if (a == "--a-to-b" || a == "--b-to-a" || a == "--both") specs.emplace_back(a.substr(2), v);
    else if (a == "--seed") {
      if (!parse_count(v, &seed)) {
        fprintf(stderr, "delayline: bad --seed '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--rt-priority") {
      if (!parse_count(v, &rt_priority) || rt_priority > 99) {
        fprintf(stderr, "delayline: bad --rt-priority '%s' (0..99)\n", v.c_str());
        return 2;
      }
    } else if (a == "--stats") stats_path = v;
    else if (a == "--ready") ready_path = v;
    else if (a == "--control") control_path = v;
    else {
      fprintf(stderr, "delayline: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (tap_a.empty() || tap_b.empty()) {
    fprintf(stderr, "delayline: --tap-a and --tap-b are required\n%s", kUsage);
    return 2;
  }
  Lab lab;
  // --both first, then the per-direction ones, whatever the order on the line.
  std::stable_sort(specs.begin(), specs.end(),
                   [](const auto& x, const auto& y) { return x.first == "both" && y.first != "both"; });
  for (const auto& [dir, text] : specs) {
    std::string why;
    bool ok = true;
    if (dir != "b-to-a") ok = ok && apply_spec(text, &lab.spec_a_to_b, &why);
    if (dir != "a-to-b") ok = ok && apply_spec(text, &lab.spec_b_to_a, &why);
    if (!ok) {
      fprintf(stderr, "delayline: --%s %s: %s\n", dir.c_str(), text.c_str(), why.c_str());
      return 2;
    }
  }

  // Signals are taken synchronously by the main thread (sigtimedwait), so
  // every thread must block them before it is created.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Due times are met to within tens of microseconds only if the kernel does
  // not batch our wake-ups; threads inherit this slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

  const int fd_a = open_tap(tap_a);
  if (fd_a < 0) return 1;
  const int fd_b = open_tap(tap_b);
  if (fd_b < 0) return 1;
  lab.a_to_b = std::make_unique<Direction>("a-to-b", fd_a, fd_b, seed * 2);
  lab.b_to_a = std::make_unique<Direction>("b-to-a", fd_b, fd_a, seed * 2 + 1);
  lab.a_to_b->set_spec(lab.spec_a_to_b);
  lab.b_to_a->set_spec(lab.spec_b_to_a);

  std::mutex control_mu;
  if (!control_path.empty()) {
    int lfd = open_control(control_path);
    if (lfd < 0) return 1;
    std::thread(control_loop, lfd, &lab, &control_mu).detach();
  }
  std::atomic<bool> failed{false};
  lab.a_to_b->start(&failed, static_cast<int>(rt_priority));
  lab.b_to_a->start(&failed, static_cast<int>(rt_priority));
  if (!ready_path.empty() && !write_file_atomically(ready_path, std::to_string(getpid()) + "\n"))
    return 1;

  int rc = 0;
  for (;;) {
    timespec tick{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig > 0) break;
    if (failed.load()) {
      rc = 1;  // a TAP went away under us: its namespace was deleted first
      break;
    }
  }
  if (!stats_path.empty()) {
    std::lock_guard<std::mutex> g(control_mu);
    if (!write_file_atomically(stats_path, lab.stats_json())) rc = 1;
  }
  if (!control_path.empty()) unlink(control_path.c_str());
  // Reader threads sit in read(); leaving without joining them is the point
  // of detaching them, and closing the fds removes both TAP devices.
  fflush(stdout);
  _exit(rc);
}

}  // namespace
}  // namespace lab
}  // namespace tcpscope

int main(int argc, char** argv) { return tcpscope::lab::run(argc, argv); }
