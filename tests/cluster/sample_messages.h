// One message of every Raft type with every field its type uses set to
// something distinctive, for round-trip tests of the peer transport.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockd/raft/message.h"

namespace lockd::cluster::testing {

inline std::vector<raft::Message> every_message_type(raft::NodeId from, raft::NodeId to) {
  std::vector<raft::Message> out;
  for (std::uint64_t t = 1; t <= raft::kMaxMessageType; ++t) {
    raft::Message m;
    m.type = static_cast<raft::MessageType>(t);
    m.from = from;
    m.to = to;
    m.term = 100 + t;
    m.log_term = 50 + t;
    m.index = 1000 + t;
    m.commit = 900 + t;
    m.reject = (t % 2) == 0;
    m.reject_hint = 7 * t;
    m.transfer = t == static_cast<std::uint64_t>(raft::MessageType::kVote);
    if (m.type == raft::MessageType::kAppend) {
      m.entries.push_back(raft::Entry{150, 1001 + t, raft::EntryType::kNoop, ""});
      m.entries.push_back(raft::Entry{150, 1002 + t, raft::EntryType::kCommand, std::string("payload\0bytes", 13)});
    }
    if (m.type == raft::MessageType::kSnapshot || m.type == raft::MessageType::kSnapshotResp) {
      m.snapshot = raft::SnapshotMeta{500 + t, 40 + t};
      m.offset = 4096;
      m.total_bytes = 10000;
      m.done = true;
      if (m.type == raft::MessageType::kSnapshot) m.chunk = std::string(3000, 's');
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace lockd::cluster::testing
