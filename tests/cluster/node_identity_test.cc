// The data dir's IDENTITY: its line format, and claim_data_dir() on real
// directories (the refusal by a real lockd is in cluster_test.cc).
#include "lockd/cluster/node_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace lockd::cluster {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "lockd-identity-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string read(const std::string& name) const {
    std::ifstream in(path_ + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name) << text;
  }

 private:
  std::string path_;
};

TEST(NodeIdentity, FormatsAndParsesOneLine) {
  const NodeIdentity id{2, {1, 2, 3}};
  EXPECT_EQ(format_identity(id), "lockd node 2 of members 1,2,3\n");
  EXPECT_EQ(parse_identity("lockd node 2 of members 1,2,3\n"), id);
  EXPECT_EQ(parse_identity("lockd node 7 of members 7\n"), (NodeIdentity{7, {7}}));
}

TEST(NodeIdentity, ParseRefusesAnythingElse) {
  for (const char* bad : {"", "lockd node 2 of members 1,2,3",  // no newline
                          "lockd node 2 of members 1,2,3\n\n", "lockd node 4 of members 1,2,3\n",
                          "lockd node 2 of members 3,2,1\n", "lockd node 2 of members 1,2,2\n",
                          "lockd node 0 of members 0,1\n", "lockd node 2 of members 1,,2\n",
                          "lockd node 2 of members 1,2,\n", "lockd node +2 of members 1,2\n",
                          "lockd node 2  of members 1,2\n", "lockd node 2 of members 1, 2\n",
                          "LOCKD node 2 of members 1,2\n", "lockd node 2 of members\n",
                          "lockd node 99999999999999999999 of members 1\n"}) {
    EXPECT_FALSE(parse_identity(bad)) << bad;
  }
}

TEST(NodeIdentity, FirstStartWritesItAndTheSameNodeMayStartAgain) {
  TempDir d;
  EXPECT_EQ(claim_data_dir(d.path(), {2, {1, 2, 3}}, false), "");
  EXPECT_EQ(d.read(kIdentityFile), "lockd node 2 of members 1,2,3\n");
  EXPECT_EQ(claim_data_dir(d.path(), {2, {1, 2, 3}}, false), "");
  EXPECT_FALSE(fs::exists(d.path() + "/" + kIdentityFile + ".new"));
}

TEST(NodeIdentity, TheCheckBeforeBindingWritesNothingButStillRefuses) {
  TempDir d;
  EXPECT_EQ(claim_data_dir(d.path(), {2, {1, 2, 3}}, false, /*write_if_absent=*/false), "");
  EXPECT_FALSE(fs::exists(d.path() + "/" + kIdentityFile));
  ASSERT_EQ(claim_data_dir(d.path(), {2, {1, 2, 3}}, false), "");
  const std::string err = claim_data_dir(d.path(), {1, {1, 2, 3}}, false, false);
  EXPECT_NE(err.find("belongs to node 2, not node 1"), std::string::npos) << err;
}

TEST(NodeIdentity, AnotherNodeIsRefusedAndTheFileIsKept) {
  TempDir d;
  ASSERT_EQ(claim_data_dir(d.path(), {1, {1, 2, 3}}, false), "");
  const std::string err = claim_data_dir(d.path(), {2, {1, 2, 3}}, false);
  EXPECT_NE(err.find("belongs to node 1, not node 2"), std::string::npos) << err;
  EXPECT_EQ(d.read(kIdentityFile), "lockd node 1 of members 1,2,3\n");
}

TEST(NodeIdentity, AnotherMemberListIsAcceptedAndTheFileIsKept) {
  // Membership lives in the log (issue 20): --peer is a bootstrap hint.
  TempDir d;
  ASSERT_EQ(claim_data_dir(d.path(), {1, {1, 2, 3}}, false), "");
  EXPECT_EQ(claim_data_dir(d.path(), {1, {1, 2, 3, 4, 5}}, false), "");
  EXPECT_EQ(d.read(kIdentityFile), "lockd node 1 of members 1,2,3\n");
  // The same number of members, another one of them: accepted here too;
  // a node whose group never recorded a configuration refuses it at start
  // (ClusterNode: there --peer still is the configuration), tested in
  // Membership.WipedMemberIsRefusedAndReplacedByANewOne.
  EXPECT_EQ(claim_data_dir(d.path(), {1, {1, 2, 4}}, false), "");
}

TEST(NodeIdentity, AnUnreadableFileIsRefusedNotRewritten) {
  TempDir d;
  d.write(kIdentityFile, "lockd node 1 of memb");  // cut short
  const std::string err = claim_data_dir(d.path(), {1, {1, 2, 3}}, false);
  EXPECT_NE(err.find("IDENTITY is not a lockd identity line"), std::string::npos) << err;
  EXPECT_EQ(d.read(kIdentityFile), "lockd node 1 of memb");
}

TEST(NodeIdentity, ADataDirFromBeforeTheFileIsClaimed) {
  TempDir d;
  d.write("wal-0000000000000001.log", "records");
  EXPECT_EQ(claim_data_dir(d.path(), {3, {1, 2, 3}}, false), "");
  EXPECT_EQ(d.read(kIdentityFile), "lockd node 3 of members 1,2,3\n");
}

TEST(NodeIdentity, AMissingDirectoryIsAnErrorLine) {
  const std::string err = claim_data_dir("/nonexistent/lockd-identity", {1, {1}}, false);
  EXPECT_NE(err.find("data dir /nonexistent/lockd-identity"), std::string::npos) << err;
}

}  // namespace
}  // namespace lockd::cluster
