// The Ready cycle shared by the daemon, the simulator and the scenario tests.
#include "lockd/raft/driver.h"

namespace lockd::raft {

StorageStatus persist_ready(Storage& storage, const Ready& rd) {
  if (!rd.snapshot && rd.entries.empty() && !rd.hard_state) return StorageStatus::Ok();
  return storage.save(rd.hard_state, rd.entries, rd.snapshot ? &*rd.snapshot : nullptr);
}

StorageStatus drive_ready(Raft& raft, ReadyHandler& handler, std::size_t max_rounds) {
  for (std::size_t round = 0; round < max_rounds && raft.has_ready(); ++round) {
    Ready rd = raft.ready();
    handler.send(rd.messages);
    // Committed entries never lie past what earlier Readies made durable
    // (raft.h), so without a snapshot they are applied before this Ready's
    // sync: their answers do not wait for the next batch's fdatasync.
    if (!rd.snapshot) {
      for (const Entry& e : rd.committed) handler.apply(e);
    }
    StorageStatus st = handler.persist(rd);
    if (!st.ok()) return st;
    if (rd.snapshot) {
      handler.install(*rd.snapshot);
      for (const Entry& e : rd.committed) handler.apply(e);
    }
    raft.advance();
  }
  return StorageStatus::Ok();
}

StorageStatus start_ready(Raft& raft, ReadyHandler& handler, bool& syncing) {
  syncing = false;
  Ready rd = raft.ready();
  handler.send(rd.messages);
  if (rd.snapshot) {
    // Rare (a follower far behind): done in full, in drive_ready's order.
    StorageStatus st = handler.persist(rd);
    if (!st.ok()) return st;
    handler.install(*rd.snapshot);
    for (const Entry& e : rd.committed) handler.apply(e);
    raft.advance();
    return StorageStatus::Ok();
  }
  // Apply and write before returning: the Ready's views do not outlive the
  // next input (raft.h).
  for (const Entry& e : rd.committed) handler.apply(e);
  bool pending = false;
  StorageStatus st = handler.write(rd, pending);
  if (!st.ok()) return st;
  if (pending) {
    syncing = true;
    return StorageStatus::Ok();
  }
  raft.advance();
  return StorageStatus::Ok();
}

void send_while_syncing(Raft& raft, ReadyHandler& handler) {
  std::vector<Message> messages = raft.take_messages();
  if (!messages.empty()) handler.send(messages);
}

void complete_ready(Raft& raft) { raft.advance(); }

}  // namespace lockd::raft
