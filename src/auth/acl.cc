#include "lockd/auth/acl.h"

#include "lockd/auth/credentials.h"
#include "lockd/common/toml_file.h"

namespace lockd::auth {

namespace {

bool identity_or_star(const std::string& s) { return s == "*" || valid_identity(s); }

}  // namespace

std::optional<Acl> Acl::load(const std::string& path, std::string& error) {
  auto table = read_toml_file(path, error);
  if (!table) return std::nullopt;
  return from_table(*table, path, error);
}

std::optional<Acl> Acl::parse(std::string_view toml_text, const std::string& path,
                              std::string& error) {
  auto table = parse_toml_text(toml_text, path, error);
  if (!table) return std::nullopt;
  return from_table(*table, path, error);
}

std::optional<Acl> Acl::from_table(const toml::table& table, const std::string& path,
                                      std::string& error) {
  Acl acl;
  for (const auto& [key, node] : table) {
    if (key.str() != "admins" && key.str() != "rule") {
      error = toml_where(path, node.source()) + "unknown key '" + std::string(key.str()) +
              "' (expected admins and [[rule]] tables)";
      return std::nullopt;
    }
  }
  if (const toml::node* admins = table.get("admins")) {
    const toml::array* arr = admins->as_array();
    if (arr == nullptr) {
      error = toml_where(path, admins->source()) + "admins must be an array of identities";
      return std::nullopt;
    }
    for (const toml::node& n : *arr) {
      const auto id = n.value<std::string>();
      if (!id || !valid_identity(*id)) {
        error = toml_where(path, n.source()) + "admins: each entry must be an identity string";
        return std::nullopt;
      }
      acl.admins_.push_back(*id);
    }
  }
  if (const toml::node* rules = table.get("rule")) {
    const toml::array* arr = rules->as_array();
    if (arr == nullptr) {
      error = toml_where(path, rules->source()) + "'rule' must be an array of tables ([[rule]])";
      return std::nullopt;
    }
    for (const toml::node& n : *arr) {
      const toml::table* t = n.as_table();
      if (t == nullptr) {
        error = toml_where(path, n.source()) + "each rule must be a table ([[rule]])";
        return std::nullopt;
      }
      for (const auto& [key, v] : *t) {
        if (key.str() != "identity" && key.str() != "prefix" && key.str() != "verbs") {
          error = toml_where(path, v.source()) + "unknown key '" + std::string(key.str()) +
                  "' in [[rule]] (expected identity, prefix, verbs)";
          return std::nullopt;
        }
      }
      Rule r;
      const auto identity = (*t)["identity"].value<std::string>();
      const auto prefix = (*t)["prefix"].value<std::string>();
      if (!identity || !identity_or_star(*identity)) {
        error = toml_where(path, n.source()) + "[[rule]] needs identity = \"NAME\" or \"*\"";
        return std::nullopt;
      }
      if (!prefix) {
        error = toml_where(path, n.source()) + "[[rule]] needs prefix = \"...\" (\"\" for every key)";
        return std::nullopt;
      }
      r.identity = *identity;
      r.prefix = *prefix;
      const toml::array* verbs = (*t)["verbs"].as_array();
      if (verbs == nullptr) {
        error = toml_where(path, n.source()) + "[[rule]] needs verbs = [\"A\", \"S\", \"R\", \"K\"] (some of)";
        return std::nullopt;
      }
      for (const toml::node& v : *verbs) {
        const auto verb = v.value<std::string>();
        if (!verb || verb->size() != 1 || std::string_view("ASRKW").find((*verb)[0]) == std::string_view::npos) {
          error = toml_where(path, v.source()) + "verbs: each must be one of \"A\", \"S\", \"R\", \"K\", \"W\"";
          return std::nullopt;
        }
        r.verbs.push_back((*verb)[0]);
      }
      acl.rules_.push_back(std::move(r));
    }
  }
  return acl;
}

bool Acl::allows(std::string_view identity, char verb, std::string_view key) const {
  for (const Rule& r : rules_) {
    if ((r.identity == "*" || r.identity == identity) && key.substr(0, r.prefix.size()) == r.prefix &&
        r.verbs.find(verb) != std::string::npos) {
      return true;
    }
  }
  return false;
}

bool Acl::is_admin(std::string_view identity) const {
  for (const std::string& a : admins_) {
    if (a == identity) return true;
  }
  return false;
}

}  // namespace lockd::auth
