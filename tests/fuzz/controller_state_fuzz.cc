// libFuzzer target: a saved controller state (src/control/controller_store.h)
// of any bytes, as a restart reads it: the store loads the file, and the
// controller, configured with two controller rules, restores it or refuses
// it whole. Whatever it accepts it saves again, and that saved state is
// accepted again and saves the same (a restart after a restart changes
// nothing).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/registry.h>

#include "config/config.h"
#include "control/cc_controller.h"
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tcpscope::ControllerStore store(state_dir());
  {
    std::ofstream f(store.path(), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::string error;
  const auto doc = store.load(&error);
  if (!doc) return 0;
  auto first = controller();
  if (!first->restore(*doc, &error)) return 0;
  const nlohmann::json saved = first->save();
  auto second = controller();
  if (!second->restore(saved, &error)) fail("a state it saved is refused: " + error + "\n" + saved.dump());
  if (second->save() != saved) fail("a state restored twice saves differently:\n" + saved.dump());
  (void)second->status_json();
  return 0;
}
