#include "toml_read.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace lockd::auth::detail {

namespace {

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

std::optional<std::string> read_file(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot read: " + std::strerror(errno);
    return std::nullopt;
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<toml::table> parse_toml(std::string_view text, const std::string& path,
                                      std::string& error) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    error = path + ":" + std::to_string(e.source().begin.line) + ": " +
            one_line(std::string(e.description()));
    return std::nullopt;
  }
}

std::string where(const std::string& path, const toml::node& node) {
  const auto& src = node.source();
  if (src.begin.line == 0) return path + ": ";
  return path + ":" + std::to_string(src.begin.line) + ": ";
}

}  // namespace lockd::auth::detail
