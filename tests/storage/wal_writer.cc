// wal_writer: a tiny program around FileStorage for process-level tests
// (device faults through liblockd_faultfs.so, two processes on one data
// dir). Everything goes to stderr, one line per event:
//
//   wal_writer DIR COUNT   appends COUNT entries after the last one, one
//                          save() each; "acked N" after each durable save.
//                          COUNT 0: until a save fails.
//   wal_writer DIR hold    opens, prints "opened", waits to be killed.
//   wal_writer DIR check   opens, prints "last N commit C".
//
// Exit status: 0 done; 2 open() refused (the message is the line); 1 a
// save failed (the message is the line, nothing after it is acked) — the
// same contract as lockd's --data-dir.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockd/storage/file_storage.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: wal_writer DIR COUNT|hold|check\n");
    return 64;
  }
  lockd::storage::FileStorage st({.dir = argv[1], .segment_bytes = 1u << 20, .sync = true});
  if (lockd::raft::StorageStatus s = st.open(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message.c_str());
    return 2;
  }
  for (const std::string& note : st.recovery().notes) std::fprintf(stderr, "%s\n", note.c_str());
  const std::string mode = argv[2];
  if (mode == "hold") {
    std::fprintf(stderr, "opened\n");
    for (;;) pause();
  }
  if (mode == "check") {
    std::fprintf(stderr, "last %llu commit %llu\n", static_cast<unsigned long long>(st.last_index()),
                 static_cast<unsigned long long>(st.hard_state().commit));
    return 0;
  }
  const unsigned long long count = std::strtoull(argv[2], nullptr, 10);
  for (unsigned long long n = 0; count == 0 || n < count; ++n) {
    const lockd::raft::Index i = st.last_index() + 1;
    const lockd::raft::Entry e{1, i, lockd::raft::EntryType::kCommand, "entry " + std::to_string(i)};
    const lockd::raft::StorageStatus s = st.save(lockd::raft::HardState{1, 1, i}, {&e, 1}, nullptr);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message.c_str());
      return 1;
    }
    std::fprintf(stderr, "acked %llu\n", static_cast<unsigned long long>(i));
  }
  return 0;
}
