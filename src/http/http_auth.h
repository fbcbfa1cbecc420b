// HTTP Basic authentication (RFC 7617) for the daemon's endpoint, checked
// against the SHA-256 of the password so that the config file never holds the
// password itself (config `http.basic_auth_password_sha256`).
//
// SHA-256 is implemented here (FIPS 180-4) rather than taken from OpenSSL:
// the daemon links no crypto library, and Debian's civetweb loads OpenSSL
// only at run time, if at all.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tcpscope {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
// 64 lower-case hex digits.
std::string to_hex(const Sha256Digest& digest);
// Exactly 64 hex digits (either case); nullopt otherwise.
std::optional<Sha256Digest> parse_sha256_hex(std::string_view hex);
// Standard base64 (RFC 4648 section 4) with the padding a length that is not a
// multiple of 4 needs; nullopt for any other character or a bad length.
std::optional<std::string> base64_decode(std::string_view text);

class BasicAuth {
 public:
  BasicAuth(const std::string& user, const Sha256Digest& password_sha256);

  // `authorization` is the Authorization request header, nullptr when absent.
  // True when it carries Basic credentials of the configured user whose
  // password hashes to the configured digest. Comparison time does not depend
  // on where a guess differs (digests are compared, in full, both always).
  bool accepts(const char* authorization) const;

 private:
  Sha256Digest user_sha256_;
  Sha256Digest password_sha256_;
};

}  // namespace tcpscope
