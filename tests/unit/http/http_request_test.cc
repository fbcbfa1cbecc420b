#include "http/http_request.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

namespace tcpscope {
namespace {

HttpParse parse(const std::string& text, HttpRequest* r, size_t max = 8192) { return parse_http_request(text, max, r); }

int error_of(const std::string& text) {
  HttpRequest r;
  const HttpParse p = parse(text, &r);
  return p.status == HttpParse::kBad ? p.error : 0;
}

TEST(HttpRequestTest, ParsesAGetWithQueryAndHeaders) {
  HttpRequest r;
  const std::string text = "GET /api/v1/flows?peer_class=client&x=%C3%A9 HTTP/1.1\r\nHost: h\r\n"
                           "Authorization: Basic abc=\r\nConnection: keep-alive\r\n\r\nGET /next";
  const HttpParse p = parse(text, &r);
  ASSERT_EQ(p.status, HttpParse::kComplete);
  EXPECT_EQ(p.consumed, text.size() - 9);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/api/v1/flows");
  EXPECT_EQ(r.query, "peer_class=client&x=%C3%A9");
  EXPECT_EQ(r.authorization, "Basic abc=");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_FALSE(r.has_body);
}

TEST(HttpRequestTest, IncompleteUntilTheBlankLine) {
  HttpRequest r;
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nHost: h\r\n", &r).status, HttpParse::kIncomplete);
  EXPECT_EQ(parse("", &r).status, HttpParse::kIncomplete);
  EXPECT_EQ(parse("\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n", &r).status, HttpParse::kComplete);
}

// A flag of each request (complete, each parsed on its own) as it should read.
void expect_flag(bool HttpRequest::*flag, std::initializer_list<std::pair<const char*, bool>> cases) {
  for (const auto& [text, want] : cases) {
    HttpRequest r;
    ASSERT_EQ(parse(text, &r).status, HttpParse::kComplete) << text;
    EXPECT_EQ(r.*flag, want) << text;
  }
}

TEST(HttpRequestTest, ConnectionTokens) {
  expect_flag(&HttpRequest::keep_alive, {{"GET / HTTP/1.1\r\nConnection: Keep-Alive, close\r\n\r\n", false},
                                         {"GET / HTTP/1.0\r\n\r\n", false},
                                         {"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n", true}});
}

TEST(HttpRequestTest, BodiesAreSeen) {
  expect_flag(&HttpRequest::has_body, {{"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", false},
                                       {"GET / HTTP/1.1\r\nContent-Length: 100000000000\r\n\r\n", true},
                                       {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", true}});
}

// Shapes that two parsers (a proxy and this one) may read differently.
TEST(HttpRequestTest, AmbiguousRequestsAre400) {
  for (const char* bad : {
           "GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
           "GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
           "GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
           "GET / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
           "GET / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
           "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
           "GET / HTTP/1.1\r\nAuthorization: Basic a\r\nAuthorization: Basic b\r\n\r\n",
           "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
           "GET  / HTTP/1.1\r\n\r\n",
           "GET / HTTP/1.1 \r\n\r\n",
           "GET http://h/metrics HTTP/1.1\r\n\r\n",
           "GET healthz HTTP/1.1\r\n\r\n",
           "GARBAGE\r\n\r\n",
           "GET /a\x01 HTTP/1.1\r\n\r\n",
           "GET /%zz HTTP/1.1\r\n\r\n",
           "GET /%00 HTTP/1.1\r\n\r\n",
           "GET /x% HTTP/1.1\r\n\r\n",
       })
    EXPECT_EQ(error_of(bad), 400) << bad;
  EXPECT_EQ(error_of(std::string("\x00\x01\x02\r\n\r\n", 7)), 400);
}

TEST(HttpRequestTest, QueryMustDecodeToText) {
  EXPECT_EQ(error_of("GET /api/v1/flows?asn=%ff HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(error_of("GET /api/v1/flows?asn=%C0%AF HTTP/1.1\r\n\r\n"), 400);  // overlong '/'
  EXPECT_EQ(error_of("GET /api/v1/flows?asn=%ED%A0%80 HTTP/1.1\r\n\r\n"), 400);  // a surrogate
  EXPECT_EQ(error_of("GET /api/v1/flows?asn=%E2%82 HTTP/1.1\r\n\r\n"), 400);  // cut short
  EXPECT_EQ(error_of("GET /api/v1/flows?as_org=%E2%82%AC HTTP/1.1\r\n\r\n"), 0);
}

TEST(HttpRequestTest, PathIsDecoded) {
  HttpRequest r;
  ASSERT_EQ(parse("GET /%6detrics HTTP/1.1\r\n\r\n", &r).status, HttpParse::kComplete);
  EXPECT_EQ(r.path, "/metrics");
}

TEST(HttpRequestTest, VersionsOtherThan1xAre505) {
  EXPECT_EQ(error_of("GET / HTTP/9.9\r\n\r\n"), 505);
  EXPECT_EQ(error_of("GET / HTTP/1.2\r\n\r\n"), 505);
  EXPECT_EQ(error_of("GET / HTTP/2\r\n\r\n"), 505);
  EXPECT_EQ(error_of("GET / FTP/1.1\r\n\r\n"), 400);
}

TEST(HttpRequestTest, HeadsPastTheLimitAreRefusedBeforeTheyEnd) {
  HttpRequest r;
  const std::string long_target = "GET /" + std::string(100, 'a');
  HttpParse p = parse(long_target, &r, 64);
  EXPECT_EQ(p.status, HttpParse::kBad);
  EXPECT_EQ(p.error, 414);
  const std::string long_header = "GET / HTTP/1.1\r\nX: " + std::string(100, 'a');
  p = parse(long_header, &r, 64);
  EXPECT_EQ(p.status, HttpParse::kBad);
  EXPECT_EQ(p.error, 431);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX: " + std::string(30, 'a'), &r, 64).status, HttpParse::kIncomplete);
}

}  // namespace
}  // namespace tcpscope
