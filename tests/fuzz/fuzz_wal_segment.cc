// libFuzzer target: arbitrary bytes loaded as a WAL segment. Recovery must
// end in exactly one of "recovered" (clean or a torn tail truncated) or
// "refused" (corrupt, newer version) — never crash, hang or guess. The
// bytes go through the pure scanner + replay (as the last and as a middle
// segment, with and without a snapshot), then through FileStorage::open()
// on a real directory, which must agree with the scanner and, when it
// recovers, produce a contiguous log that takes a new save.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "lockd/storage/file_storage.h"
#include "lockd/storage/wal_format.h"

using namespace lockd;
using namespace lockd::storage;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

// One scratch dir for the run, removed when the fuzzer exits.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    path = (std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp") + std::string("/lockd-fuzz-wal-XXXXXX");
    require(::mkdtemp(path.data()) != nullptr);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

ScanEnd replay(std::string_view bytes, bool last, raft::SnapshotMeta snap) {
  LogReplay r(snap);
  SegmentScan scan = scan_segment(bytes, last, [&](raft::WalRecord& rec, std::size_t, std::string& what) {
    return r.feed(rec, what);
  });
  require(scan.valid_bytes <= bytes.size());
  if (scan.end == ScanEnd::kClean || scan.end == ScanEnd::kTornTail) {
    r.finish();
    for (std::size_t i = 0; i < r.entries().size(); ++i) require(r.entries()[i].index == snap.index + 1 + i);
  } else {
    require(!scan.what.empty());
  }
  if (!last) require(scan.end != ScanEnd::kTornTail);
  return scan.end;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const ScanEnd as_last = replay(bytes, true, {0, 0});
  replay(bytes, false, {0, 0});
  replay(bytes, true, {3, 1});

  const std::string& dir = scratch_dir();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/" + segment_name(1), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(size));
  }
  FileStorage st({dir, 1u << 20, false});
  const raft::StorageStatus s = st.open();
  switch (as_last) {
    case ScanEnd::kClean:
    case ScanEnd::kTornTail:
      // A segment with a valid header must carry sequence 1 to match its name.
      if (!s.ok()) {
        require(s.error == raft::StorageError::kCorrupt);
        require(s.message.find("not the one in its name") != std::string::npos);
        break;
      }
      for (std::size_t i = 0; i < st.entries().size(); ++i) {
        require(st.entries()[i].index == st.snapshot().meta.index + 1 + i);
      }
      {
        const raft::Entry e{st.hard_state().term, st.last_index() + 1, raft::EntryType::kCommand, "next"};
        require(st.save(raft::HardState{e.term, 0, 0}, {&e, 1}, nullptr).ok());
      }
      break;
    case ScanEnd::kCorrupt:
      require(s.error == raft::StorageError::kCorrupt);
      require(s.message.find('\n') == std::string::npos);
      break;
    case ScanEnd::kVersion:
      require(s.error == raft::StorageError::kVersion);
      break;
  }
  return 0;
}
