// Test helpers for data directories: a temporary directory removed at the
// end, and file surgery (copy, cut, flip a bit) to model crashes and rot.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/temp_dir.h"

namespace lockd::storage::test {

// mkdtemp() under $TMPDIR (or /tmp); removed with its contents by the
// destructor (tests/support/temp_dir.h).
using TempDir = lockd::testing::TempDir;

// Replaces `to` with a copy of directory `from` (files only).
void copy_dir(const std::string& from, const std::string& to);
std::uint64_t file_size(const std::string& path);
void truncate_file(const std::string& path, std::uint64_t size);
void flip_bit(const std::string& path, std::uint64_t offset, int bit);
std::string read_all(const std::string& path);
void write_all(const std::string& path, const std::string& bytes);
// Names in `dir` (files only), sorted.
std::vector<std::string> list_dir(const std::string& dir);

}  // namespace lockd::storage::test
