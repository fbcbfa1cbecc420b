// `http:` the endpoint's basic authentication (docs/security.md "Security").
#include "config/config_sections.h"

namespace tcpscope {

const ConfigSection<HttpConfig>& http_section() {
  static const ConfigSection<HttpConfig> kSection{
      {
          refused_key<HttpConfig>("tls_certificate",
                                  "tcpscope serves plain HTTP only; keep listen on a loopback address and put a "
                                  "TLS proxy in front (docs/security.md \"Security\")",
                                  "not accepted: TLS is a proxy's job"),
          with_reload(string_key("basic_auth_user", &HttpConfig::basic_auth_user,
                                 "basic authentication for /metrics and /api/* (not /healthz); \"\" = none",
                                 [](const std::string& s) -> std::string {
                                   if (s.empty()) return " must not be empty";
                                   if (s.find(':') != std::string::npos) return " must not contain ':' (RFC 7617)";
                                   return "";
                                 }),
                      ConfigReload::kApplied),
          with_reload(string_key("basic_auth_password_sha256", &HttpConfig::basic_auth_password_sha256,
                                 "the password's SHA-256 in hex (printf %s 'PASSWORD' | sha256sum)",
                                 [](const std::string& s) -> std::string {
                                   const bool hex = s.size() == 64 &&
                                                    s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
                                   if (hex) return "";
                                   return " must be 64 hex digits, the SHA-256 of the password (printf %s 'PASSWORD' "
                                          "| sha256sum), got " +
                                          std::to_string(s.size()) + " characters";
                                 }),
                      ConfigReload::kApplied),
          refused_key<HttpConfig>("basic_auth_password",
                                  "a password is never written in the config; give basic_auth_password_sha256, its "
                                  "SHA-256 in hex (printf %s 'PASSWORD' | sha256sum)",
                                  "not accepted: give basic_auth_password_sha256"),
      },
      // Each needs the other; reported once, where the one given is.
      [](ConfigReader& r, const std::map<std::string, int>& given, int, const std::string&, HttpConfig*) {
        const bool user = given.count("basic_auth_user"), digest = given.count("basic_auth_password_sha256");
        if (user && !digest)
          r.error(given.at("basic_auth_user"), "http.basic_auth_user needs http.basic_auth_password_sha256");
        else if (digest && !user)
          r.error(given.at("basic_auth_password_sha256"), "http.basic_auth_password_sha256 needs http.basic_auth_user");
      }};
  return kSection;
}

}  // namespace tcpscope
