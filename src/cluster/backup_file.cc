// The backup file; see backup_file.h.
#include "lockd/cluster/backup_file.h"

#include <algorithm>
#include <limits>

#include "lockd/common/byte_io.h"
#include "lockd/common/crc32c.h"

namespace lockd::cluster {

std::string encode_backup(const BackupMeta& meta, std::string_view data) {
  std::string out;
  out.reserve(kBackupHeaderBytes + data.size() + 4);
  out.append(kBackupMagic);
  ByteWriter w(out);
  w.u32(kBackupVersion);
  w.u32(static_cast<std::uint32_t>(meta.source));
  w.u64(meta.cluster_id);
  w.u64(meta.index);
  w.u64(meta.term);
  w.u64(meta.token_floor);
  w.u64(meta.taken_unix_ms);
  w.u64(data.size());
  out.append(data);
  w.u32(crc32c(out));
  return out;
}

std::optional<DecodedBackup> decode_backup(std::string_view bytes, std::string& error) {
  if (bytes.size() < kBackupMagic.size() || bytes.substr(0, kBackupMagic.size()) != kBackupMagic) {
    error = "not a lockd snapshot (no LOCKDBAK magic)";
    return std::nullopt;
  }
  if (bytes.size() < kBackupHeaderBytes + 4) {
    error = "cut short: " + std::to_string(bytes.size()) + " bytes, shorter than the header";
    return std::nullopt;
  }
  enum class E { kOk, kShort };
  ByteReader<E> r(bytes.substr(kBackupMagic.size(), kBackupHeaderBytes - kBackupMagic.size()), E::kOk,
                  E::kShort);
  const std::uint32_t version = r.u32();
  const std::uint32_t source = r.u32();
  DecodedBackup d;
  d.meta.cluster_id = r.u64();
  d.meta.index = r.u64();
  d.meta.term = r.u64();
  d.meta.token_floor = r.u64();
  d.meta.taken_unix_ms = r.u64();
  const std::uint64_t n = r.u64();
  // The CRC first: a flipped bit anywhere is "damaged", whatever field it hit.
  if (n != bytes.size() - kBackupHeaderBytes - 4) {
    error = "cut short or padded: header says " + std::to_string(n) + " bytes of data, file has " +
            std::to_string(bytes.size() - kBackupHeaderBytes - 4);
    return std::nullopt;
  }
  ByteReader<E> tail(bytes.substr(bytes.size() - 4), E::kOk, E::kShort);
  const std::uint32_t want = tail.u32();
  if (crc32c(bytes.substr(0, bytes.size() - 4)) != want) {
    error = "bad checksum: the file is damaged";
    return std::nullopt;
  }
  if (version != kBackupVersion) {
    error = "format version " + std::to_string(version) + " is not this build's " +
            std::to_string(kBackupVersion);
    return std::nullopt;
  }
  if (source != static_cast<std::uint32_t>(BackupSource::kSingle) &&
      source != static_cast<std::uint32_t>(BackupSource::kCluster)) {
    error = "unknown source " + std::to_string(source);
    return std::nullopt;
  }
  d.meta.source = static_cast<BackupSource>(source);
  if (d.meta.index == 0) {
    error = "index 0: not a state machine snapshot";
    return std::nullopt;
  }
  d.data = bytes.substr(kBackupHeaderBytes, n);
  return d;
}

bool load_backup(const DecodedBackup& backup, LockStateMachine& sm, BackupSummary& summary,
                 std::string& error) {
  if (!sm.restore(backup.data, backup.meta.index, error)) return false;
  summary = BackupSummary{};
  summary.keys = sm.table().key_count();
  sm.table().for_each([&](std::string_view, const locks::KeyState& s) {
    s.for_each_holder([&](const locks::Holder& h) {  // every shared holder too (§5b)
      ++summary.holders;
      summary.largest_token = std::max(summary.largest_token, h.token);
    });
  });
  if (summary.largest_token > backup.meta.token_floor ||
      sm.table().next_token() > backup.meta.token_floor + 1) {
    error = "token floor " + std::to_string(backup.meta.token_floor) +
            " is below a token the state holds";
    return false;
  }
  return true;
}

locks::Limits unbounded_limits() {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  return locks::Limits{kMax, kMax, kMax};
}

}  // namespace lockd::cluster
