// apply_config_file(); see config_file.h.
#include "lockd/daemon/config_file.h"

#include <algorithm>
#include <set>
#include <vector>

#include "lockd/common/toml_file.h"

namespace lockd::daemon {

namespace {

// The TOML type a flag's value must have.
enum class Want {
  kInteger,  // a number flag (CLI11 type INT/UINT): `max-keys = 10_000`
  kBoolean,  // an on/off flag: `client-tls = true`
  kString,   // everything else, in quotes: `admin = "127.0.0.1:7071"`
};

// Flags that are not settings: they cannot be keys.
const std::set<std::string> kNotKeys = {"help", "version", "config"};

Want wanted(const CLI::Option& opt) {
  if (opt.get_expected_max() == 0) return Want::kBoolean;  // a flag: takes no value
  const std::string type = opt.get_type_name();
  if (type.starts_with("INT") || type.starts_with("UINT")) return Want::kInteger;
  if (type.starts_with("BOOLEAN")) return Want::kBoolean;
  return Want::kString;
}

std::string_view want_name(Want w) {
  switch (w) {
    case Want::kInteger: return "an integer (no quotes)";
    case Want::kBoolean: return "true or false";
    case Want::kString: return "a string in quotes";
  }
  return "";
}

std::string_view type_name(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time: return "a date/time";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// One TOML value as the command line would spell it; false if its type is
// not `want`.
bool to_arg(const toml::node& v, Want want, std::string& out) {
  switch (want) {
    case Want::kInteger:
      if (!v.is_integer()) return false;
      out = std::to_string(v.as_integer()->get());
      return true;
    case Want::kBoolean:
      if (!v.is_boolean()) return false;
      out = v.as_boolean()->get() ? "true" : "false";
      return true;
    case Want::kString:
      if (!v.is_string()) return false;
      out = v.as_string()->get();
      return true;
  }
  return false;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string unknown_key(CLI::App& app, const std::string& name) {
  std::string msg = "unknown key '" + name + "'";
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  if (dashed != name && !kNotKeys.contains(dashed) &&
      app.get_option_no_throw("--" + dashed) != nullptr) {
    return msg + " (did you mean '" + dashed + "'? keys are the long flags without the dashes)";
  }
  return msg + " (keys are lockd's long flags without the dashes; lockd --help lists them)";
}

}  // namespace

std::string apply_config_file(CLI::App& app, const std::string& path, ConfigOrigins& origins) {
  std::string error;
  const std::optional<toml::table> table = read_toml_file(path, error);
  if (!table) return error;
  for (auto&& [key, node] : *table) {
    const std::string name(key.str());
    const std::string at = toml_where(path, key.source());
    if (node.is_table() || node.is_array_of_tables()) {
      return at + "'" + name +
             "' is a table; lockd's config file has none: write each setting at the top "
             "level, named like its long flag (max-keys = 10000)";
    }
    CLI::Option* opt = kNotKeys.contains(name) ? nullptr : app.get_option_no_throw("--" + name);
    if (opt == nullptr) return at + unknown_key(app, name);
    const Want want = wanted(*opt);
    std::vector<std::string> args;
    if (const toml::array* arr = node.as_array()) {
      if (opt->get_items_expected_max() <= 1) {
        return at + name + ": takes one value, not an array";
      }
      if (arr->empty()) return at + name + ": an empty array; leave the key out instead";
      for (const toml::node& v : *arr) {
        if (!to_arg(v, want, args.emplace_back())) {
          return at + name + ": each value must be " + std::string(want_name(want)) + ", not " +
                 std::string(type_name(v));
        }
      }
    } else if (!to_arg(node, want, args.emplace_back())) {
      return at + name + ": expected " + std::string(want_name(want)) + ", not " +
             std::string(type_name(node));
    }
    if (opt->count() > 0) continue;  // given on the command line: that wins
    opt->add_result(std::move(args));
    try {
      opt->run_callback();
    } catch (const CLI::Error& e) {
      // CLI11 starts with the flag's name ("--mode: triple not in {…}").
      std::string what = one_line(e.what());
      const std::string flag = opt->get_name() + ": ";
      if (what.starts_with(flag)) what.erase(0, flag.size());
      return at + name + ": " + what;
    }
    origins[opt->get_name()] = at.substr(0, at.size() - 2);  // without ": "
  }
  return "";
}

}  // namespace lockd::daemon
