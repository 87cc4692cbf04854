// Device failures and directory locking, across real processes: wal_writer
// (a FileStorage in a tiny program) with liblockd_faultfs.so preloaded.
// A failed write or sync must stop the writer with one line and exit
// non-zero, without acknowledging the save; everything acknowledged before
// must be there after a restart.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <csignal>
#include <filesystem>
#include <regex>

#include "lockd_process.h"
#include "temp_dir.h"

namespace lockd::storage {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

class FaultProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_.sub("data");
    control_ = dir_.sub("fault");
  }
  void set_fault(const std::string& line) { std::ofstream(control_, std::ios::trunc) << line << "\n"; }

  // Starts wal_writer with the shim preloaded (env is inherited).
  void start(ChildProcess& p, const std::string& arg, bool preload = true) {
    if (preload) {
      setenv("LD_PRELOAD", LOCKD_FAULTFS_LIB, 1);
      setenv("LOCKD_FAULTFS_DIR", data_.c_str(), 1);
      setenv("LOCKD_FAULTFS_CONTROL", control_.c_str(), 1);
      // A sanitized wal_writer would refuse a preloaded library first in line.
      const char* asan = getenv("ASAN_OPTIONS");
      asan_saved_ = asan != nullptr ? asan : "";
      setenv("ASAN_OPTIONS", (asan_saved_.empty() ? "" : asan_saved_ + ":") .append("verify_asan_link_order=0").c_str(), 1);
    }
    ASSERT_TRUE(p.start({LOCKD_WAL_WRITER, data_, arg}));
    unsetenv("LD_PRELOAD");
    unsetenv("LOCKD_FAULTFS_DIR");
    unsetenv("LOCKD_FAULTFS_CONTROL");
    if (preload) {
      if (asan_saved_.empty()) {
        unsetenv("ASAN_OPTIONS");
      } else {
        setenv("ASAN_OPTIONS", asan_saved_.c_str(), 1);
      }
    }
  }

  // The highest "acked N" the writer printed.
  static std::uint64_t last_acked(const std::string& text) {
    std::uint64_t last = 0;
    static const std::regex re("acked ([0-9]+)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
      last = std::stoull((*it)[1]);
    }
    return last;
  }

  std::uint64_t last_on_disk() {
    ChildProcess check;
    start(check, "check", false);
    auto line = check.wait_for_line("last ", 10s);
    EXPECT_EQ(check.wait_exit(10s), 0) << check.stderr_text();
    if (!line) return 0;
    return std::stoull(line->substr(line->find("last ") + 5));
  }

  // Runs the writer until the fault stops it midway; checks the contract.
  void expect_stops_without_ack(const std::string& fault, const std::string& message) {
    ChildProcess p;
    start(p, "0");  // until a save fails
    ASSERT_TRUE(p.wait_for_line("acked 20", 20s)) << p.stderr_text();
    set_fault(fault);
    auto line = p.wait_for_line(message, 20s);
    ASSERT_TRUE(line) << p.stderr_text();
    EXPECT_NE(line->find("data dir " + data_ + ": wal-0000000000000001.log offset "), std::string::npos) << *line;
    EXPECT_EQ(p.wait_exit(10s), 1);
    const std::string text = p.stderr_text();
    // The failure is the last line: nothing acknowledged after it.
    EXPECT_EQ(text.substr(text.find(message)).find("acked"), std::string::npos) << text;
    const std::uint64_t acked = last_acked(text);
    EXPECT_GE(acked, 20u);
    set_fault("");
    // Everything acknowledged survived (the unacknowledged save may or may
    // not be there: it was written, never promised).
    const std::uint64_t on_disk = last_on_disk();
    EXPECT_GE(on_disk, acked);
    EXPECT_LE(on_disk, acked + 1);
  }

  test::TempDir dir_;
  std::string data_;
  std::string control_;
  std::string asan_saved_;
};

TEST_F(FaultProcess, FdatasyncEioStopsWithoutAck) {
  expect_stops_without_ack("fdatasync EIO", "fdatasync failed: Input/output error");
}

TEST_F(FaultProcess, WriteEnospcStopsWithoutAck) {
  expect_stops_without_ack("write ENOSPC", "write failed: No space left on device");
}

TEST_F(FaultProcess, WriteEioStopsWithoutAck) {
  expect_stops_without_ack("write EIO", "write failed: Input/output error");
}

TEST_F(FaultProcess, FsyncEioOfTheDirectoryFailsTheFirstSegment) {
  // Creating the first segment syncs the directory with fsync().
  set_fault("fsync EIO");
  ChildProcess p;
  start(p, "5");
  ASSERT_TRUE(p.wait_for_line("fsync of the directory failed: Input/output error", 20s)) << p.stderr_text();
  EXPECT_EQ(p.wait_exit(10s), 1);
  EXPECT_EQ(p.stderr_text().find("acked"), std::string::npos) << p.stderr_text();
}

TEST_F(FaultProcess, FdatasyncDelayIsApplied) {
  set_fault("fdatasync delay_us=200000");
  ChildProcess p;
  const auto t0 = std::chrono::steady_clock::now();
  start(p, "3");
  EXPECT_EQ(p.wait_exit(20s), 0) << p.stderr_text();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 600ms);
  EXPECT_EQ(last_acked(p.stderr_text()), 3u);
}

TEST_F(FaultProcess, FaultsOutsideTheDirectoryDoNotApply) {
  set_fault("fdatasync EIO");
  ChildProcess p;
  setenv("LOCKD_FAULTFS_DIR", dir_.sub("elsewhere").c_str(), 1);
  std::filesystem::create_directories(dir_.sub("elsewhere"));
  ASSERT_TRUE(p.start({"/usr/bin/env", "LD_PRELOAD=" LOCKD_FAULTFS_LIB, "LOCKD_FAULTFS_CONTROL=" + control_,
                       "ASAN_OPTIONS=verify_asan_link_order=0", LOCKD_WAL_WRITER, data_, "3"}));
  unsetenv("LOCKD_FAULTFS_DIR");
  EXPECT_EQ(p.wait_exit(20s), 0) << p.stderr_text();
  EXPECT_EQ(last_acked(p.stderr_text()), 3u);
}

TEST_F(FaultProcess, SecondProcessOnTheSameDataDirIsRefused) {
  ChildProcess holder;
  start(holder, "hold", false);
  ASSERT_TRUE(holder.wait_for_line("opened", 10s)) << holder.stderr_text();
  ChildProcess second;
  start(second, "1", false);
  EXPECT_EQ(second.wait_exit(10s), 2);
  EXPECT_NE(second.stderr_text().find("data dir " + data_ + ": locked by another process (LOCK)"), std::string::npos)
      << second.stderr_text();
  holder.signal(SIGKILL);
  holder.wait_exit(10s);
  // The lock dies with its process.
  ChildProcess third;
  start(third, "1", false);
  EXPECT_EQ(third.wait_exit(10s), 0) << third.stderr_text();
}

}  // namespace
}  // namespace lockd::storage
