// Acl: the `--acl` file (interfaces.md "Security files"): which identity
// may use which verb on which key prefix, and which identities are admins.
//
//   admins = ["ops"]                 # may use the mutating admin endpoints
//   [[rule]]
//   identity = "billing"             # "*" = any authenticated identity
//   prefix = "billing/"              # "" = every key
//   verbs = ["A", "S", "R", "K"]
//
// A request is allowed when some rule's identity matches, the key starts
// with its prefix and its verbs include the request's verb; nothing else
// is. Immutable once loaded; a reload builds a new one.
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockd::auth {

class Acl {
 public:
  static std::optional<Acl> load(const std::string& path, std::string& error);
  static std::optional<Acl> parse(std::string_view toml, const std::string& path,
                                  std::string& error);

  // `verb` is the request's letter: 'A', 'S', 'R' or 'K'.
  bool allows(std::string_view identity, char verb, std::string_view key) const;
  bool is_admin(std::string_view identity) const;
  std::size_t rules() const { return rules_.size(); }

 private:
  // Checks a parsed file (both load() and parse() end here).
  static std::optional<Acl> from_table(const toml::table& table, const std::string& path,
                                         std::string& error);

  struct Rule {
    std::string identity;  // "*": any
    std::string prefix;
    std::string verbs;     // letters, e.g. "ARK"
  };
  std::vector<Rule> rules_;
  std::vector<std::string> admins_;
};

}  // namespace lockd::auth
