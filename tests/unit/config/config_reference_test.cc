// The config reference in docs/configuration.md is the keys' tables, printed
// (config_reference_markdown()). To refresh it after changing a table:
//   TCPSCOPE_UPDATE_CONFIG_REFERENCE=1 ./build/tcpscope_unit_tests --gtest_filter='ConfigReference.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "config/config.h"

namespace tcpscope {
namespace {

const std::string kDoc = std::string(TCPSCOPE_TEST_DATA) + "/../../docs/configuration.md";
const std::string kBegin = "<!-- config-reference: generated from src/config/*_config.cc, do not edit -->\n";
const std::string kEnd = "<!-- config-reference end -->\n";

TEST(ConfigReference, DocHasTheTables) {
  std::ifstream in(kDoc);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  const size_t begin = doc.find(kBegin);
  const size_t end = doc.find(kEnd);
  ASSERT_NE(begin, std::string::npos) << kDoc << " has no " << kBegin;
  ASSERT_NE(end, std::string::npos) << kDoc << " has no " << kEnd;
  ASSERT_LT(begin, end);
  const size_t body = begin + kBegin.size();
  const std::string want = config_reference_markdown();
  if (std::getenv("TCPSCOPE_UPDATE_CONFIG_REFERENCE")) {
    doc.replace(body, end - body, want);
    std::ofstream(kDoc) << doc;
    return;
  }
  EXPECT_EQ(doc.substr(body, end - body), want)
      << kDoc << "'s config reference differs from the tables; refresh it with TCPSCOPE_UPDATE_CONFIG_REFERENCE=1";
}

TEST(ConfigReference, EveryKeyIsDocumentedOnce) {
  std::set<std::string> seen;
  for (const auto& row : config_reference()) {
    EXPECT_FALSE(row.doc.empty()) << row.key;
    EXPECT_FALSE(row.type.empty()) << row.key;
    EXPECT_FALSE(row.reload.empty()) << row.key << ": what a SIGHUP does with it";
    EXPECT_TRUE(seen.insert(row.key).second) << row.key;
  }
  for (const auto& key : config_top_level_keys()) EXPECT_TRUE(seen.count(key)) << key;
}

// A default the reference shows is one the parser accepts.
TEST(ConfigReference, DocumentedDefaultsAreAccepted) {
  const std::vector<std::string> cc = {"cubic", "bbr"};
  size_t checked = 0;
  for (const auto& row : config_reference()) {
    if (row.default_text.empty() || row.default_text == "\"\"" || row.type == "mapping" ||
        row.key.find("[]") != std::string::npos)
      continue;
    std::string yaml, indent;
    std::string path = row.key;
    for (size_t dot; (dot = path.find('.')) != std::string::npos; path = path.substr(dot + 1)) {
      yaml += indent + path.substr(0, dot) + ":\n";
      indent += "  ";
      if (yaml == "export:\n  kafka:\n" && row.key != "export.kafka.brokers") yaml += indent + "brokers: [\"kafka-1:9092\"]\n";
    }
    yaml += indent + path + ": " + row.default_text + "\n";
    std::vector<ConfigError> errors;
    parse_config(yaml, "test.yaml", cc, &errors);
    EXPECT_TRUE(errors.empty()) << yaml << (errors.empty() ? "" : errors[0].to_string());
    ++checked;
  }
  EXPECT_GT(checked, 20u);
}

}  // namespace
}  // namespace tcpscope
