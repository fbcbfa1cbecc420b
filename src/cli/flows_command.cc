#include "cli/flows_command.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "net/http_client.h"
#include "record/flow_identity.h"
#include "text/json_text.h"
#include "text/unit_text.h"
#include "text/url_query.h"
#include "text/utf8_text.h"

namespace tcpscope {

const char* const kFlowsUsage =
    "usage: tcpscope flows [--server URL] [--json] [--sort FIELD] [--reverse] [--limit N] [--filter SEL]\n"
    "                      [--watch SECONDS [--count N]] [--timeout-ms 5000]\n"
    "  --server URL   the daemon (default http://127.0.0.1:9810); Basic auth: http://USER:PASSWORD@HOST:PORT\n"
    "                 or TCPSCOPE_BASIC_AUTH=USER:PASSWORD in the environment\n"
    "  --sort FIELD   bytes (default), age, srtt, cwnd, retrans, rate, or any record field\n"
    "  --filter SEL   only flows matching SEL, e.g. cc=bbr,peer_class=client (see tcpscope compare)\n"
    "  --watch S      fetch again every S seconds (1-3600) until interrupted; --count N stops after N\n"
    "                 refreshes. The daemon's list itself changes every snapshot_interval_s (default 10 s).\n"
    "                 With --json: one JSON array per line per refresh.\n";

namespace {

constexpr const char* kDefaultServer = "http://127.0.0.1:9810";
constexpr const char* kFlowsPath = "/api/v1/flows";
constexpr size_t kMaxFlowsPages = 1000;  // 10M flows
constexpr size_t kMaxCountDigits = 9;   // --limit, --timeout-ms, --watch, --count

int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

double num(const nlohmann::json& rec, const char* key) {
  auto it = rec.find(key);
  return it != rec.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string text(const nlohmann::json& rec, const char* key) {
  auto it = rec.find(key);
  if (it == rec.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

std::string field_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "null";
  return v.dump();
}

// The sort key of a record: a number (sorted largest first) or text (A-Z).
struct SortKey {
  bool numeric = true;
  double n = 0;
  std::string s;
};

SortKey sort_key(const nlohmann::json& rec, const std::string& field, int64_t now_ns) {
  SortKey k;
  if (field == "bytes") {
    k.n = num(rec, "bytes_acked") + num(rec, "bytes_received");
  } else if (field == "age") {
    const double start = num(rec, "start_ns");
    k.n = start > 0 ? static_cast<double>(now_ns) - start : 0;
  } else if (field == "srtt") {
    k.n = num(rec, "srtt_us");
  } else if (field == "retrans") {
    k.n = num(rec, "retrans_segs");
  } else if (field == "rate") {
    k.n = num(rec, "delivery_rate_bps");
  } else {
    auto it = rec.find(field);
    if (it != rec.end() && it->is_number()) {
      k.n = it->get<double>();
    } else {
      k.numeric = false;
      k.s = it == rec.end() ? "" : field_text(*it);
    }
  }
  return k;
}

std::string human_bytes(double b) {
  return unit_text(b, {{1e3, 1, 0, "B"}, {1e6, 1e3, 1, "kB"}, {1e9, 1e6, 1, "MB"}, {kRestOfValues, 1e9, 2, "GB"}});
}

std::string human_age(double ns) {
  char buf[32];
  const double s = ns / 1e9;
  if (s < 0) return "0s";
  if (s < 60)
    std::snprintf(buf, sizeof(buf), "%.1fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else if (s < 86400)
    std::snprintf(buf, sizeof(buf), "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  else
    std::snprintf(buf, sizeof(buf), "%dd%02dh", static_cast<int>(s / 86400), static_cast<int>(s / 3600) % 24);
  return buf;
}

std::string human_us(double us) {
  return unit_text(us, {{1e3, 1, 0, "us"}, {1e6, 1e3, 1, "ms"}, {kRestOfValues, 1e6, 2, "s"}});
}

std::string human_rate(double bps) {
  return unit_text(bps, {{1e6, 1e3, 0, "kb/s"}, {1e9, 1e6, 1, "Mb/s"}, {kRestOfValues, 1e9, 2, "Gb/s"}});
}

std::string endpoint(const nlohmann::json& rec, const char* addr, const char* port) {
  const std::string a = text(rec, addr);
  const std::string p = text(rec, port);
  return a.find(':') != std::string::npos ? "[" + a + "]:" + p : a + ":" + p;
}

}  // namespace

nlohmann::json select_flows(const nlohmann::json& flows, const FlowsViewOptions& o) {
  if (!flows.is_array()) throw std::invalid_argument("expected a JSON array of flow records");
  std::vector<const nlohmann::json*> rows;
  for (const auto& rec : flows) {
    if (!rec.is_object()) continue;
    if (o.filter) {
      auto get = [&](const std::string& f) -> std::optional<std::string> {
        auto it = rec.find(f);
        if (it == rec.end()) return std::nullopt;
        return field_text(*it);
      };
      if (!o.filter->matches(get)) continue;
    }
    rows.push_back(&rec);
  }
  std::vector<std::pair<SortKey, const nlohmann::json*>> keyed;
  for (const auto* r : rows) keyed.emplace_back(sort_key(*r, o.sort, o.now_ns), r);
  // Numbers largest first, then text A-Z; --reverse flips the whole order.
  auto before = [](const SortKey& x, const SortKey& y) {
    if (x.numeric != y.numeric) return x.numeric;
    return x.numeric ? x.n > y.n : x.s < y.s;
  };
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return o.reverse ? before(y.first, x.first) : before(x.first, y.first);
  });
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [k, r] : keyed) {
    if (o.limit && out.size() >= o.limit) break;
    out.push_back(*r);
  }
  return out;
}

std::string format_flows_table(const nlohmann::json& flows, const FlowsViewOptions& o, size_t total) {
  const std::vector<std::string> header = {"LOCAL", "REMOTE", "DIR",  "CLASS", "ASN",     "CC",   "AGE",
                                           "SENT",  "RECV",   "SRTT", "CWND",  "RETRANS", "RATE", "PROCESS"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : flows) {
    std::string asn = text(r, "asn");
    const std::string org = text(r, "as_org");
    if (!org.empty()) asn += " " + (display_width(org) > 18 ? std::string(display_prefix(org, 17)) + "~" : org);
    const bool partial = r.value("partial", false);
    const double start = num(r, "start_ns");
    std::string cc = text(r, "cc");
    const std::string arm = text(r, "arm");
    if (!arm.empty()) cc += " (" + arm + ")";
    std::string process = text(r, "comm");
    if (num(r, "pid") > 0) process += "/" + text(r, "pid");
    rows.push_back({endpoint(r, "laddr", "lport"), endpoint(r, "raddr", "rport"), text(r, "dir"),
                    text(r, "peer_class"), asn, cc,
                    partial || start <= 0 ? "?" : human_age(static_cast<double>(o.now_ns) - start),
                    human_bytes(num(r, "bytes_acked")), human_bytes(num(r, "bytes_received")),
                    human_us(num(r, "srtt_us")), text(r, "cwnd"), text(r, "retrans_segs"),
                    human_rate(num(r, "delivery_rate_bps")), process});
    // Process and AS names are anyone's choice: shown, never obeyed.
    for (std::string& cell : rows.back()) cell = printable_text(cell);
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], display_width(row[c]));
  }
  auto right = [](size_t c) { return c >= 6 && c <= 12; };
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c) out += "  ";
      const std::string pad(width[c] - display_width(cells[c]), ' ');
      out += right(c) ? pad + cells[c] : cells[c] + (c + 1 == cells.size() ? "" : pad);
    }
    out += "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  out += std::to_string(flows.size()) + " of " + std::to_string(total) + " open flows, sorted by " + o.sort +
         (o.reverse ? " (reversed)" : "") + "; AGE ? = opened before tcpscope started\n";
  if (flows.empty()) out += empty_flows_note(o, total);
  return out;
}

std::string empty_flows_note(const FlowsViewOptions& o, size_t total) {
  if (total > 0)
    return "none of the " + std::to_string(total) + " open flows matches --filter " +
           (o.filter ? o.filter->text() : std::string()) + "\n";
  return "no open flows in the daemon's answer. It lists open flows only from its periodic snapshot "
         "(snapshot_interval_s, default 10 s): with snapshot_interval_s: 0 snapshots are disabled and this list "
         "stays empty; otherwise the host has no TCP flow open, or the daemon started less than one interval "
         "ago. /api/v1/flows serves only the list, not the daemon's snapshot_interval_s, so which of these "
         "applies cannot be told from here: see the daemon's config (finished flows are recorded either way).\n";
}

int flows_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string server = kDefaultServer;
  bool json = false;
  int timeout_ms = 5000;
  int watch = 0;       // seconds between refreshes; 0 = one fetch
  uint64_t count = 0;  // refreshes under --watch; 0 = until interrupted
  FlowsViewOptions o;
  bool help = false;
  CommandLine cl;
  cl.stop_flag("--help", &help)
      .stop_flag("-h", &help)
      .flag("--json", &json)
      .flag("--reverse", &o.reverse)
      .option("--server", &server)
      .option("--sort",
              [&](const std::string& v) -> std::string {
                if (!valid_field_name(v)) return "--sort \"" + v + "\" is not a field name";
                o.sort = v;
                return "";
              })
      .count_option("--limit", kMaxCountDigits, 0, UINT64_MAX, "a count", [&](uint64_t n) { o.limit = n; })
      .count_option("--timeout-ms", kMaxCountDigits, 1, UINT64_MAX, "a positive count",
                    [&](uint64_t n) { timeout_ms = static_cast<int>(n); })
      .count_option("--watch", kMaxCountDigits, kMinWatchSeconds, kMaxWatchSeconds,
                    "whole seconds in [" + std::to_string(kMinWatchSeconds) + ", " +
                        std::to_string(kMaxWatchSeconds) + "]",
                    [&](uint64_t n) { watch = static_cast<int>(n); })
      .count_option("--count", kMaxCountDigits, 1, UINT64_MAX, "a positive count", [&](uint64_t n) { count = n; })
      .option("--filter", [&](const std::string& v) -> std::string {
        std::string why;
        o.filter = Selection::parse(v, &why);
        return o.filter ? "" : "--filter: " + why;
      });
  auto incomplete = [](const std::string& arg) { return "unknown or incomplete option '" + arg + "'"; };
  cl.on_unknown(incomplete).on_missing_value(incomplete);
  if (const auto error = cl.parse(args)) {
    err << "tcpscope flows: " << error->message << "\n";
    if (error->kind != CommandLine::Error::kBadValue) err << kFlowsUsage;
    return 2;
  }
  if (help) {
    out << kFlowsUsage;
    return 0;
  }
  if (count && !watch) {
    err << "tcpscope flows: --count applies to --watch\n";
    return 2;
  }
  const std::string url = join_url(server, kFlowsPath);
  // One fetch and render; false (after printing why) when the daemon could
  // not be read.
  auto once = [&](bool watching) -> bool {
    // The daemon answers kMaxFlowsPage flows at a time in identity order;
    // each next page starts after the last flow of the one before, so a flow
    // comes once even when the snapshot changes between pages. A page that
    // is not full is the last.
    nlohmann::json flows = nlohmann::json::array();
    std::string after;  // the last flow's identity_text
    for (size_t page = 0; page < kMaxFlowsPages; ++page) {
      const std::string page_url = url + "?limit=" + std::to_string(kMaxFlowsPage) +
                                   (after.empty() ? "" : "&after=" + url_encode(after));
      HttpResponse resp;
      std::string error;
      if (!http_get(page_url, timeout_ms, &resp, &error)) {
        err << "tcpscope flows: " << error << "\n";
        return false;
      }
      if (resp.status == 401) {
        err << "tcpscope flows: GET " << redact_url(url) << ": 401: the daemon wants credentials: give --server "
            << "http://USER:PASSWORD@HOST:PORT or set TCPSCOPE_BASIC_AUTH=USER:PASSWORD\n";
        return false;
      }
      if (resp.status != 200) {
        err << "tcpscope flows: GET " << redact_url(url) << ": HTTP " << resp.status << "\n";
        return false;
      }
      nlohmann::json part = nlohmann::json::parse(resp.body, nullptr, false);
      if (!part.is_array()) {
        err << "tcpscope flows: GET " << redact_url(url) << ": answer is not a JSON array\n";
        return false;
      }
      const size_t n = part.size();
      if (n) {
        const nlohmann::json& last = part.back();
        after = text(last, "netns") + "," + text(last, "dir") + "," + text(last, "laddr") + "," +
                text(last, "lport") + "," + text(last, "raddr") + "," + text(last, "rport");
      }
      for (auto& f : part) flows.push_back(std::move(f));
      if (n != kMaxFlowsPage) break;
    }
    o.now_ns = realtime_ns();
    const nlohmann::json shown = select_flows(flows, o);
    if (json) {
      // Watching: one compact document per line, so each refresh is one
      // record for a script; the reason for an empty list goes to stderr.
      out << json_text(shown, watching ? -1 : 2) << "\n";
      if (shown.empty()) err << "tcpscope flows: " << empty_flows_note(o, flows.size());
    } else {
      out << format_flows_table(shown, o, flows.size());
    }
    out.flush();
    return true;
  };
  if (!watch) return once(false) ? 0 : 1;

  // Clear the screen between refreshes only on a terminal; piped output
  // gets the frames one after another.
  const bool clear = !json && &out == &std::cout && isatty(STDOUT_FILENO);
  bool ok = true;
  for (uint64_t i = 0; count == 0 || i < count; ++i) {
    if (i) {
      timespec ts{watch, 0};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    if (!json) {
      if (clear) out << "\033[H\033[2J";
      const time_t now = time(nullptr);
      char stamp[32];
      tm t{};
      gmtime_r(&now, &t);
      std::strftime(stamp, sizeof(stamp), "%H:%M:%S UTC", &t);
      out << "every " << watch << " s, " << stamp << " (" << redact_url(server) << ")";
      if (count) out << ", refresh " << (i + 1) << " of " << count;
      out << "\n";
    }
    // A daemon that is restarting does not end the watch; the last answer decides the exit code.
    ok = once(true);
  }
  return ok ? 0 : 1;
}

}  // namespace tcpscope
