// The A and B selections of `tcpscope compare`: which flows form each arm.
//
//   SEL   := TERM ("," TERM)*           every term must hold
//   TERM  := FIELD "=" VALUES | FIELD "!=" VALUES
//   VALUES:= VALUE ("|" VALUE)*         any of the values
//
// e.g. "cc=cubic", "cc=bbr,peer_class=client", "asn=64501|64502",
// "arm=bbr,experiment=bbr-vs-cubic", "cc!=bbr". FIELD is any flow-record
// field (compared as text: numbers in decimal, null as "null", booleans as
// true/false) or the derived "size_class". The daemon's distributions keep
// only some fields (see FlowDistributions), so --server mode accepts fewer.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tcpscope {

class Selection {
 public:
  struct Term {
    std::string field;
    std::vector<std::string> values;
    bool negate = false;
  };
  // The flow's value of a field as text, or nullopt when it has no such field.
  using FieldGetter = std::function<std::optional<std::string>(const std::string& field)>;

  // nullopt and *why (e.g. "term \"cc\" has no '='") when malformed.
  static std::optional<Selection> parse(const std::string& text, std::string* why);

  // A flow without a field a term names does not match that term (and
  // matches its negation: "arm!=bbr" keeps flows with no arm).
  bool matches(const FieldGetter& get) const;

  const std::string& text() const { return text_; }
  const std::vector<Term>& terms() const { return terms_; }
  // Whether a term names `field`.
  bool uses(const std::string& field) const {
    for (const Term& t : terms_)
      if (t.field == field) return true;
    return false;
  }

 private:
  std::string text_;
  std::vector<Term> terms_;
};

// True for names made of [a-z0-9_] (record fields, group-by names).
bool valid_field_name(const std::string& name);

}  // namespace tcpscope
