#include "text/json_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tcpscope {
namespace {

std::string json_string_of(std::string_view s) {
  std::string out;
  append_json_string(s, &out);
  return out;
}

const std::string kFffd = "\xEF\xBF\xBD";

TEST(JsonText, ValidUtf8IsWrittenAsItself) {
  EXPECT_EQ(json_string_of("cl\xC3\xAF" "ent-\xC3\xBCtf8"), "\"cl\xC3\xAF" "ent-\xC3\xBCtf8\"");
  EXPECT_EQ(json_string_of("Telef\xC3\xB3nica de Espa\xC3\xB1" "a"), "\"Telef\xC3\xB3nica de Espa\xC3\xB1" "a\"");
  EXPECT_EQ(json_string_of("\xE4\xB8\xAD\xE5\x9B\xBD\xE7\x94\xB5\xE4\xBF\xA1"), "\"\xE4\xB8\xAD\xE5\x9B\xBD\xE7\x94\xB5\xE4\xBF\xA1\"");
  EXPECT_EQ(json_string_of("\xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"), "\"\xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF\"");  // U+1F600, U+10FFFF
  EXPECT_EQ(json_string_of("\xC2\x80\xC2\x9F"), "\"\xC2\x80\xC2\x9F\"");  // C1 controls are text to JSON
}

TEST(JsonText, EachByteOfAnInvalidSequenceBecomesOneReplacementCharacter) {
  // A comm cut at 15 bytes: the last character's first byte(s) only.
  EXPECT_EQ(json_string_of("cut-name-abcde\xC3"), "\"cut-name-abcde" + kFffd + "\"");
  EXPECT_EQ(json_string_of("cut-name-abcd\xE4\xB8"), "\"cut-name-abcd" + kFffd + kFffd + "\"");
  EXPECT_EQ(json_string_of("cut-name-abc\xF0\x9F\x98"), "\"cut-name-abc" + kFffd + kFffd + kFffd + "\"");
  // Cut in the middle, text after it.
  EXPECT_EQ(json_string_of("a\xE4\xB8" "b"), "\"a" + kFffd + kFffd + "b\"");
  EXPECT_EQ(json_string_of("\x80\xBF"), "\"" + kFffd + kFffd + "\"");                       // lone continuation bytes
  EXPECT_EQ(json_string_of("\xC0\xAF"), "\"" + kFffd + kFffd + "\"");                       // overlong '/'
  EXPECT_EQ(json_string_of("\xE0\x80\xAF"), "\"" + kFffd + kFffd + kFffd + "\"");           // overlong, 3 bytes
  EXPECT_EQ(json_string_of("\xED\xA0\x80"), "\"" + kFffd + kFffd + kFffd + "\"");           // a surrogate
  EXPECT_EQ(json_string_of("\xF4\x90\x80\x80"), "\"" + kFffd + kFffd + kFffd + kFffd + "\"");  // past U+10FFFF
  EXPECT_EQ(json_string_of("\xFE\xFF"), "\"" + kFffd + kFffd + "\"");
  // The byte after a broken sequence starts afresh.
  EXPECT_EQ(json_string_of("\xC3\xC3\xA9"), "\"" + kFffd + "\xC3\xA9\"");
}

TEST(JsonText, ControlCharactersAreEscaped) {
  EXPECT_EQ(json_string_of(std::string("\0\x01\x1f\x7f", 4)), "\"\\u0000\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(json_string_of("\b\f\n\r\t\"\\/"), "\"\\b\\f\\n\\r\\t\\\"\\\\/\"");
  EXPECT_EQ(json_string_of("\x1b[2J"), "\"\\u001b[2J\"");
}

TEST(JsonText, WhatIsWrittenParsesBackAsTheSameText) {
  const std::string text = "w\xC3\xB6rker \xE2\x9C\x93 \"q\" \\ \t\x01\x7f \xE4\xB8\xAD";
  EXPECT_EQ(nlohmann::json::parse(json_string_of(text)).get<std::string>(), text);
  EXPECT_EQ(nlohmann::json::parse(json_string_of("ab\xE4\xB8")).get<std::string>(), "ab" + kFffd + kFffd);
}

TEST(JsonText, BoundHoldsForTheWorstCases) {
  for (const std::string& s : {std::string(64, '\x01'), std::string(64, '\x7f'), std::string(64, '\xff'),
                               std::string(64, '"'), std::string(64, '\xC3'), std::string("\xE4\xB8\xAD", 3)}) {
    const std::string q = json_string_of(s);
    EXPECT_LE(q.size(), json_string_bound(s));
  }
  EXPECT_EQ(json_string_of(std::string(64, '\x01')).size(), json_string_bound(std::string(64, '\x01')));
  std::string after;
  append_json_string("", &after);
  EXPECT_EQ(after, "\"\"");
}

// The same document as nlohmann's own dump() for text it writes the same way.
nlohmann::json sample_document() {
  return {{"metric", "fct"},
          {"groups", {{{"group", "64501"}, {"n_a", 12}, {"diff", -0.125}, {"ci", {-0.5, 1e-300}}, {"none", nullptr}}}},
          {"empty_object", nlohmann::json::object()},
          {"empty_array", nlohmann::json::array()},
          {"flags", {true, false}},
          {"big", 18446744073709551615ULL},
          {"negative", -9223372036854775807LL},
          {"third", 1.0 / 3},
          {"escapes", "tab\t nl\n quote\" back\\ bell\x07 \x1f"},
          {"nested", {{"a", {{"b", {1, {2, {3}}}}}}}}};
}

TEST(JsonText, LaysOutAsDumpDoes) {
  const nlohmann::json doc = sample_document();
  for (int indent : {-1, 0, 1, 2, 4}) EXPECT_EQ(json_text(doc, indent), doc.dump(indent)) << indent;
  EXPECT_EQ(json_text(nlohmann::json(7)), "7");
  EXPECT_EQ(json_text(nlohmann::json("x")), "\"x\"");
}

TEST(JsonText, InvalidUtf8InADocumentIsReplacedNotThrown) {
  nlohmann::json doc = {{"comm", "cut-name-abcd\xE4\xB8"}, {"as_org\xFF", "T\xC3\xBCrk Telekom\x7f"}};
  EXPECT_THROW(doc.dump(), nlohmann::json::type_error);  // why json_text exists
  const std::string text = json_text(doc, 2);
  const auto back = nlohmann::json::parse(text);
  EXPECT_EQ(back["comm"], "cut-name-abcd" + kFffd + kFffd);
  EXPECT_EQ(back["as_org" + kFffd], "T\xC3\xBCrk Telekom\x7f");
  EXPECT_NE(text.find("\\u007f"), std::string::npos) << text;
}

}  // namespace
}  // namespace tcpscope
