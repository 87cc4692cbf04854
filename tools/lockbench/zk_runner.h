// The ZooKeeper backend (issue 23): lock+unlock pairs through the
// ZooKeeper C client's asynchronous API, with the standard lock recipe.
//
// Built only when CMake finds libzookeeper_mt (LOCKBENCH_HAVE_ZOOKEEPER);
// the core build never needs it.
//
// The recipe (ZooKeeper's "Locks" recipe, as Curator's InterProcessMutex
// runs it), for a lock on KEY:
//   1. create /lockbench/KEY/lock- EPHEMERAL|SEQUENTIAL; if the parent does
//      not exist (ZNONODE: a key nobody locked before), create
//      /lockbench/KEY as a container node (the server deletes it once it is
//      empty, as Curator's creatingParentContainersIfNeeded does) and
//      create the child again;
//   2. get the children of /lockbench/KEY;
//   3. ours is the lowest sequence number: the lock is held; else set a
//      watch on the node just below ours (exists with a watcher) and go
//      back to 2 when it is deleted (or already gone);
//   4. release: delete our node.
// Each of --connections sessions runs one pair at a time (like an etcd or
// lockd client with one request in flight). The latency histogram holds
// the lock (steps 1-3) and the release (4) as two requests, like
// lockbench's lockd figures; `released` counts the pairs.
#pragma once

#include "config.h"
#include "runner.h"

namespace lockbench {

// --addr HOST:PORT (repeated, or --cluster) names the ensemble; the client
// spreads sessions over its members. Workloads: uncontended, contended.
Results run_zookeeper(const Config& cfg);

}  // namespace lockbench
