// Runs every script in tests/raft/testdata/ and compares its transcript.
//
// File format (after etcd's datadriven tests): a command line, then
// "----", then the expected output, then a blank line. Set
// LOCKD_REWRITE=1 to regenerate the expected output after a deliberate
// change — and read the diff before committing it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "scenario_harness.h"

namespace {

namespace fs = std::filesystem;

// One item of a script: a comment line kept verbatim, or a command with
// its expected output.
struct Item {
  bool comment = false;
  std::string text;
  std::string expected;
};

std::vector<Item> parse(const std::string& text) {
  std::vector<Item> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      out.push_back(Item{true, line, ""});
      continue;
    }
    Item c{false, line, ""};
    std::getline(in, line);  // "----"
    while (std::getline(in, line) && !line.empty()) c.expected += line + "\n";
    out.push_back(c);
  }
  return out;
}

class ScenarioTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScenarioTest, TranscriptMatches) {
  fs::path path = fs::path(LOCKD_RAFT_TESTDATA) / GetParam();
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  std::stringstream buf;
  buf << f.rdbuf();
  std::vector<Item> items = parse(buf.str());
  lockd::raft::testing::ScenarioCluster cluster;
  std::ostringstream rewritten;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Item& c = items[i];
    if (c.comment) {
      if (i > 0 && !items[i - 1].comment) rewritten << "\n";
      rewritten << c.text << "\n";
      continue;
    }
    std::string got = cluster.run(c.text);
    EXPECT_EQ(got, c.expected) << "in " << GetParam() << " at: " << c.text;
    if (i > 0 && !items[i - 1].comment) rewritten << "\n";
    rewritten << c.text << "\n----\n" << got;
  }
  if (std::getenv("LOCKD_REWRITE")) {
    std::ofstream out(path);
    out << rewritten.str();
  }
}

std::vector<std::string> scripts() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(LOCKD_RAFT_TESTDATA)) {
    if (e.path().extension() == ".txt") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Scripts, ScenarioTest, ::testing::ValuesIn(scripts()),
                         [](const auto& param_info) {
                           std::string n = param_info.param.substr(0, param_info.param.size() - 4);
                           for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
