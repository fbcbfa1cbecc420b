// packaging/clickhouse/tcpscope.proto, flows.sql and transfers.sql say what
// the record tables (record/record_fields.h) say: the same fields in the
// same order, with the same numbers and types. The files are written by
// hand for their readers; this holds them to the one place a field is named.
#include "record/record_fields.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tcpscope {
namespace {

std::string read_file(const std::string& name) {
  const std::string path = std::string(TCPSCOPE_CLICKHOUSE_DIR) + "/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The text between `opening` and the next line that is `closing` alone.
std::string block(const std::string& text, const std::string& opening, const std::string& closing) {
  const size_t start = text.find(opening);
  if (start == std::string::npos) return "";
  const size_t end = text.find("\n" + closing + "\n", start);
  return text.substr(start + opening.size(), end == std::string::npos ? std::string::npos : end - start - opening.size());
}

// "kind", which every line and message starts with, then the table's rows,
// as "key number proto_type" or "key clickhouse_type".
std::vector<std::string> expected_proto(const RecordField* begin, const RecordField* end) {
  std::vector<std::string> out{"kind 1 string"};
  for (const RecordField* f = begin; f != end; ++f)
    out.push_back(std::string(f->key) + " " + std::to_string(f->number) + " " + std::string(f->proto_type));
  return out;
}
std::vector<std::string> expected_columns(const RecordField* begin, const RecordField* end) {
  std::vector<std::string> out{"kind String"};
  for (const RecordField* f = begin; f != end; ++f)
    out.push_back(std::string(f->key) + " " + std::string(f->clickhouse_type));
  return out;
}

std::vector<std::string> proto_fields(const std::string& message) {
  const std::string body = block(read_file("tcpscope.proto"), "message " + message + " {\n", "}");
  EXPECT_FALSE(body.empty()) << "tcpscope.proto has no message " << message;
  static const std::regex field(R"(^\s*((?:optional )?\w+) (\w+) = (\d+);)");
  std::vector<std::string> out;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, field)) out.push_back(m[2].str() + " " + m[3].str() + " " + m[1].str());
  }
  return out;
}

std::vector<std::string> kafka_table_columns(const std::string& file, const std::string& table) {
  const std::string body = block(read_file(file), "CREATE TABLE IF NOT EXISTS " + table + "\n(\n", ")");
  EXPECT_FALSE(body.empty()) << file << " has no column list for " << table;
  static const std::regex column(R"(^\s*(\w+) ([\w()]+),?\s*$)");
  std::vector<std::string> out;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, column)) out.push_back(m[1].str() + " " + m[2].str());
  }
  return out;
}

TEST(RecordFields, TheProtoMessagesAreTheTables) {
  EXPECT_EQ(proto_fields("FlowRecord"), expected_proto(std::begin(kFlowFields), std::end(kFlowFields)));
  EXPECT_EQ(proto_fields("TransferRecord"), expected_proto(std::begin(kTransferFields), std::end(kTransferFields)));
}

TEST(RecordFields, TheClickHouseColumnsAreTheTables) {
  EXPECT_EQ(kafka_table_columns("flows.sql", "tcpscope.flows_kafka"),
            expected_columns(std::begin(kFlowFields), std::end(kFlowFields)));
  EXPECT_EQ(kafka_table_columns("transfers.sql", "tcpscope.transfers_kafka"),
            expected_columns(std::begin(kTransferFields), std::end(kTransferFields)));
}

TEST(RecordFields, KeysAndNumbersAreEachUsedOnce) {
  for (const auto* table : {&kFlowFields[0], &kTransferFields[0]}) {
    const size_t n = table == kFlowFields ? std::size(kFlowFields) : std::size(kTransferFields);
    std::set<std::string_view> keys{"kind"};
    std::set<uint32_t> numbers{1};
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(keys.insert(table[i].key).second) << table[i].key << " twice";
      EXPECT_TRUE(numbers.insert(table[i].number).second) << table[i].key << ": number " << table[i].number << " twice";
    }
  }
}

}  // namespace
}  // namespace tcpscope
