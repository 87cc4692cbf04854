#include "temp_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace lockd::storage::test {

void copy_dir(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), fs::path(to) / e.path().filename());
  }
}

std::uint64_t file_size(const std::string& path) { return fs::file_size(path); }

void truncate_file(const std::string& path, std::uint64_t size) { fs::resize_file(path, size); }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void flip_bit(const std::string& path, std::uint64_t offset, int bit) {
  std::string b = read_all(path);
  b.at(offset) = static_cast<char>(b.at(offset) ^ (1 << bit));
  write_all(path, b);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace lockd::storage::test
