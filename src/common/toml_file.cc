// read_toml_file(); see toml_file.h.
#include "lockd/common/toml_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace lockd {

namespace {

// A config or security file is small; a larger one is a mistake (a log
// file passed by accident), refused before it is read into memory.
constexpr std::size_t kMaxTomlFileBytes = 4 * 1024 * 1024;

}  // namespace

std::string toml_where(const std::string& path, const toml::source_region& where) {
  if (where.begin.line == 0) return path + ": ";
  return path + ":" + std::to_string(where.begin.line) + ": ";
}

std::optional<toml::table> read_toml_file(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot read: " + std::strerror(errno);
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    error = path + ": cannot read: " + std::strerror(errno);
    return std::nullopt;
  }
  const std::string content = std::move(text).str();
  if (content.size() > kMaxTomlFileBytes) {
    error = path + ": larger than " + std::to_string(kMaxTomlFileBytes) + " bytes; not a config file?";
    return std::nullopt;
  }
  return parse_toml_text(content, path, error);
}

std::optional<toml::table> parse_toml_text(std::string_view text, const std::string& path,
                                           std::string& error) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::string what(e.description());
    for (char& ch : what) {
      if (ch == '\n' || ch == '\r') ch = ' ';
    }
    while (!what.empty() && what.back() == ' ') what.pop_back();
    error = toml_where(path, e.source()) + what;
    return std::nullopt;
  }
}

}  // namespace lockd
