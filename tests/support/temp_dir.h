// Test support: a private temporary directory, removed with everything in
// it when the object goes away -- also when the test fails an ASSERT or
// throws, so a test leaves nothing behind in /tmp.
#pragma once

#include <string>

namespace lockd::testing {

class TempDir {
 public:
  // mkdtemp("<$TMPDIR or /tmp>/<prefix>-XXXXXX"); throws if it fails.
  explicit TempDir(const std::string& prefix = "lockd-test");
  ~TempDir();  // removes the directory and its contents
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // `path()/name` (not created).
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace lockd::testing
