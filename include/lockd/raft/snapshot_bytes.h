// SnapshotBytes: where the bytes of the latest snapshot live while the
// core may have to send them to a follower that fell behind its log.
//
// The core only ever reads them a chunk at a time (Raft::Config's
// snapshot_chunk_bytes), so they need not sit in memory: with 1 M held
// locks a snapshot is ~60 MB, and keeping it resident on every node for a
// transfer that rarely happens cost each node ~60 bytes per held lock
// (docs/benchmarks/membership.md, "Memory at 1 M locks"). The daemon hands the core
// its snapshot file (storage/file_snapshot_bytes.h): chunks are read from
// it when sent, through a descriptor opened when the snapshot was made,
// so that a newer snapshot replacing the file does not cut a transfer
// short. Tests and the simulator keep the bytes in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lockd::raft {

class SnapshotBytes {
 public:
  virtual ~SnapshotBytes() = default;
  virtual std::uint64_t size() const = 0;
  // Bytes [offset, offset + len), with offset + len <= size(). An
  // implementation that cannot read them does not return: what it reads
  // is the node's own durable snapshot, and a node whose disk fails stops
  // (as on a failed sync).
  virtual std::string read(std::uint64_t offset, std::size_t len) const = 0;
};

class InMemorySnapshotBytes final : public SnapshotBytes {
 public:
  explicit InMemorySnapshotBytes(std::string data) : data_(std::move(data)) {}
  std::uint64_t size() const override { return data_.size(); }
  std::string read(std::uint64_t offset, std::size_t len) const override { return data_.substr(offset, len); }
  const std::string& data() const { return data_; }

 private:
  std::string data_;
};

inline std::shared_ptr<const SnapshotBytes> in_memory_snapshot_bytes(std::string data) {
  return std::make_shared<const InMemorySnapshotBytes>(std::move(data));
}

}  // namespace lockd::raft
