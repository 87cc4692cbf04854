// The Ready cycle: the one loop that turns the Raft core's outputs into
// effects, shared by the daemon, lockd-sim and the scenario harness so that
// all three exercise the same order of operations.
//
// One cycle, for each Ready the core has:
//
//   send     rd.messages           (safe first: the core holds back every
//                                   message that depends on state not yet
//                                   durable, so sending before the sync lets
//                                   followers write while the leader writes)
//   apply    rd.committed, in order (without a snapshot in this Ready:
//                                   committed entries are always durable
//                                   from earlier Readies, so their answers
//                                   need not wait for this Ready's sync)
//   persist  snapshot, entries, hard state — one group commit, one sync
//   install  rd.snapshot           (restore the state machine from it)
//   apply    rd.committed, in order (only when a snapshot came: after it)
//   advance                        ("all of that is durable and applied")
//
// A failed persist stops the cycle before advance(): the node must stop
// (see storage.h). Runs on the node's loop thread.
//
// Pipelined (issue 23): start_ready() runs the same cycle up to the write
// and leaves the sync to someone else (the daemon's sync thread, the
// simulator's disk). While it runs the core takes input (raft.h
// "Pipelined"), and complete_ready() advances once it is done:
//
//   send, apply        as above
//   write              entries and hard state, handed to the disk, not synced
//   ... the loop keeps stepping peers' messages, ticks and proposals, and
//   send_while_syncing sends what they produced that may leave early ...
//   complete_ready     the sync finished: advance()
//
// A Ready with a snapshot is not pipelined: it is persisted, installed and
// applied in full inside start_ready().
#pragma once

#include <cstddef>
#include <vector>

#include "lockd/raft/raft.h"
#include "lockd/raft/storage.h"

namespace lockd::raft {

// The application's side of the cycle.
class ReadyHandler {
 public:
  virtual ~ReadyHandler() = default;
  // Hands messages to the transport. May move out of `messages`.
  virtual void send(std::vector<Message>& messages) = 0;
  // Makes the Ready's snapshot, entries and hard state durable. The usual
  // body is `return persist_ready(storage, rd);`; the simulator overrides it
  // to tear writes.
  virtual StorageStatus persist(const Ready& rd) = 0;
  // start_ready()'s write: hands `rd`'s entries and hard state to the disk
  // and sets `sync_pending` if they are not durable yet (the caller then
  // syncs them and calls complete_ready()). Never called with a snapshot.
  // The default persists in full (nothing left pending).
  virtual StorageStatus write(const Ready& rd, bool& sync_pending) {
    sync_pending = false;
    return persist(rd);
  }
  // Replaces the state machine with the snapshot's contents.
  virtual void install(const Snapshot& snapshot) = 0;
  // Applies one committed entry (no-ops included, so the handler can track
  // the applied index).
  virtual void apply(const Entry& entry) = 0;
};

// storage.save() for everything `rd` asks to persist.
StorageStatus persist_ready(Storage& storage, const Ready& rd);

// Runs Ready cycles while the core has one, at most `max_rounds` (a bound
// so one busy node cannot starve a loop turn). Returns the first failed
// persist (advance() was not called: stop the node), or ok.
StorageStatus drive_ready(Raft& raft, ReadyHandler& handler, std::size_t max_rounds);

// One pipelined cycle for the core's next Ready (the caller checked
// has_ready()). `syncing` comes back true when the write awaits its sync:
// the core stays mid-Ready (input allowed, no ready()) until
// complete_ready(). Otherwise the cycle is done and advanced. A failed
// write or persist returns its status without advance(): stop the node.
StorageStatus start_ready(Raft& raft, ReadyHandler& handler, bool& syncing);
// While the sync runs: sends what may leave before it ends
// (Raft::take_messages: the leader's appends of entries proposed since,
// so followers write them while its own sync runs).
void send_while_syncing(Raft& raft, ReadyHandler& handler);
// The outstanding Ready's sync completed: it is durable.
void complete_ready(Raft& raft);

}  // namespace lockd::raft
