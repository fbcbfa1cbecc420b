// libFuzzer target: a saved controller state (src/control/controller_store.h)
// of any bytes, as a restart reads it: the store loads the file, and the
// controller, configured with two controller rules, restores it or refuses
// it whole. What it refuses it says why, and the store sets the file aside
// whole (controller_store.h). Whatever it accepts has weights summing to
// 100 and open connections a table can hold (each in at most
// ConnectionTable::kSlots evidences, in each once, of one arm), is saved
// again, and that saved state is accepted again, saves the same (a restart
// after a restart changes nothing) and takes a step. The seeds
// (corpus/controller_state/) include one state of each kind restore refuses.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "config/config.h"
#include "control/cc_controller.h"
#include "control/connection_table.h"
#include "control/controller_store.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "controller_state_fuzz: %s\n", why.c_str());
  std::abort();
}

// The integration tests' rule (tests/integration/test_controller.py), whose
// saved states seed the corpus, and one of another cohort kind.
constexpr char kConfig[] = R"(
cc_policy:
  rules:
    - name: auto
      match: { peer_class: client, lports: [8080] }
      controller:
        arms: [bbr, cubic]
        cohort: asn
        control_percent: 10
        min_transfers: 1000000
        interval_s: 1
    - name: classes
      match: { lports: [9090] }
      controller:
        arms: [cubic, bbr, cubic]
        cohort: peer_class
)";

const tcpscope::Config& config() {
  static const tcpscope::Config c = [] {
    std::vector<tcpscope::ConfigError> errors;
    tcpscope::Config parsed = tcpscope::parse_config(kConfig, "fuzz.yaml", {"bbr", "cubic", "reno"}, &errors);
    if (!errors.empty()) fail("the fuzz config: " + errors.front().message);
    return parsed;
  }();
  return c;
}

// A directory of this process's own, as the store requires.
const std::string& state_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/tcpscope-state-fuzz.XXXXXX";
    if (!mkdtemp(tmpl)) fail("mkdtemp");
    return std::string(tmpl);
  }();
  return dir;
}

std::unique_ptr<tcpscope::CcController> controller() {
  auto c = std::make_unique<tcpscope::CcController>(std::make_shared<prometheus::Registry>(),
                                                    [](const std::string&) {});
  c->configure(config());
  return c;
}

// As the daemon does with a state it cannot use: it says why, and the
// file goes aside whole, under a name of its own, the newest few kept.
void set_aside(const tcpscope::ControllerStore& store, const std::string& bytes, const std::string& why) {
  if (why.empty()) fail("a state refused without a reason");
  std::string error;
  const std::string aside = store.set_aside(&error);
  if (aside.empty() || !error.empty()) fail("not set aside: " + error);
  std::ifstream in(aside, std::ios::binary);
  if (std::string(std::istreambuf_iterator<char>(in), {}) != bytes) fail("the state set aside is not the one read");
  size_t kept = 0;
  for (const auto& e : std::filesystem::directory_iterator(state_dir())) {
    if (e.path() == store.path()) fail("a state set aside is still in place");
    ++kept;
  }
  if (kept > tcpscope::ControllerStore::kKeptUnreadable) fail(std::to_string(kept) + " states set aside are kept");
}

// A state accepted holds connections as a table can: each in at most
// kSlots evidences, in each once (a connection twice in one evidence once
// made its next transfer write through a null pointer), of one arm.
void check_open_connections(const nlohmann::json& state) {
  struct Seen {
    size_t times = 0;
    std::set<std::string> evidences;  // cohort or candidate, and arm
    std::set<size_t> arms;
  };
  std::map<std::pair<std::string, uint64_t>, Seen> seen;  // by rule and key
  auto add = [&](const std::string& rule, const std::string& owner, const nlohmann::json& arms) {
    for (size_t a = 0; a < arms.size(); ++a)
      for (const auto& o : arms[a]["open"]) {
        Seen& c = seen[{rule, o[0].get<uint64_t>()}];
        ++c.times;
        c.evidences.insert(owner + "/" + std::to_string(a));
        c.arms.insert(a);
      }
  };
  for (const auto& [name, rule] : state["rules"].items()) {
    for (const auto& cohort : rule["cohorts"]) add(name, cohort["label"].get<std::string>(), cohort["evidence"]);
    for (const auto& [asn, arms] : rule["candidates"].items()) add(name, "candidate " + asn, arms);
  }
  for (const auto& [id, c] : seen)
    if (c.times > tcpscope::ConnectionTable::kSlots || c.evidences.size() != c.times || c.arms.size() != 1)
      fail("open connection " + std::to_string(id.second) + " of rule " + id.first + " accepted " +
           std::to_string(c.times) + " times in " + std::to_string(c.evidences.size()) + " evidences of " +
           std::to_string(c.arms.size()) + " arms");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tcpscope::ControllerStore store(state_dir());
  {
    std::ofstream f(store.path(), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::string error;
  const auto doc = store.load(&error);
  auto first = controller();
  if (!doc || !first->restore(*doc, &error)) {
    set_aside(store, std::string(reinterpret_cast<const char*>(data), size), error);
    return 0;
  }
  for (const auto& w : first->cohort_weights()) {
    uint64_t sum = 0;
    for (uint32_t p : w.percent) sum += p;
    if (sum != 100) fail("a restored cohort's weights sum to " + std::to_string(sum));
  }
  const nlohmann::json saved = first->save();
  check_open_connections(saved);
  auto second = controller();
  if (!second->restore(saved, &error)) fail("a state it saved is refused: " + error + "\n" + saved.dump());
  if (second->save() != saved) fail("a state restored twice saves differently:\n" + saved.dump());
  (void)second->status_json();
  second->step(1.8e9);  // a decision or revert from the restored evidence
  return 0;
}
