// The metadata replication log: a ring of records in a region of the pool
// that the leading maru-server appends to (one record per metadata write:
// the bytes of its RocksDB WriteBatch) and that hot standbys on every host
// tail into their own RocksDB. Every host maps the pool anyway, so a
// standby follows the leader without a message (docs/notes/replication.md).
//
// The region is group-writable memory: a reader validates every record
// (magic, crc, lengths, seq continuity, epochs that never go back) and the
// writer keeps its own copy of the layout, never reading it back. A crc
// proves no author: with a key shared by the pool's servers (Authenticate)
// every record also carries a MAC, and a record a member of the pool's
// group forged is refused rather than applied as metadata.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "alloc/superblock.h"
#include "util/status.h"

namespace maru {

// Where a reader stands: the record it read last (seq) and where the next
// one starts (pos, a byte count since the log was formatted). `generation`
// names one formatting of the log: positions of another mean nothing.
struct OpLogPosition {
  uint64_t generation = 0;
  uint64_t seq = 0;
  uint64_t pos = 0;
};

struct OpLogRecord {
  uint64_t generation = 0;  // of the log it was read from
  uint64_t seq = 0;
  uint64_t epoch = 0;
  uint64_t next_pos = 0;  // where the record after it starts
  std::string data;
};

class OpLog {
 public:
  // The header's bytes; records fill the rest of the region.
  static constexpr uint64_t kHeaderBytes = 4096;
  // The smallest region: the header and a ring of 64 KiB.
  static constexpr uint64_t kMinBytes = kHeaderBytes + (64 << 10);

  // A log over [base, base+bytes), mapped by the caller for as long as the
  // log lives. Nothing is read or written yet.
  static Result<OpLog> Attach(uint8_t *base, uint64_t bytes, Coherence coherence);

  // Records are signed (the writer) and must be (the readers) with `key`:
  // HMAC-SHA256 over the generation, seq, epoch and bytes, 16 bytes kept.
  // Empty: neither (a log only this host's servers can be trusted with).
  void Authenticate(std::string key) { key_ = std::move(key); }
  bool authenticated() const { return !key_.empty(); }
  static constexpr size_t kMacBytes = 16;

  // --- the leader ---
  // Takes the log over as its writer. `last` is what the leader's database
  // holds: when the log's head is that record, appends continue after it;
  // otherwise (a new region, another database) the log is formatted anew
  // with a new generation and standbys of the old one need a snapshot.
  // `fence` is asked before every append: false means this server no
  // longer leads, and nothing is written.
  Status StartWriter(const OpLogPosition &last, uint64_t epoch, std::function<bool()> fence);
  // What a reader holds once it has read the next record, of `len` bytes:
  // its seq and where the one after it starts. The leader writes it into
  // the record itself, so that a standby records it in the same write.
  OpLogPosition After(size_t len) const;
  // Appends one record and publishes it; EPERM when the fence says no,
  // EMSGSIZE when it is larger than max_record_bytes().
  Status Append(std::string_view data);

  // --- the standbys ---
  // The published head (the position after the last whole record), read
  // from shared memory: bounded, but only a hint until records verify.
  OpLogPosition Head() const;
  // Reads the record after `at` (at.seq + 1, starting at at.pos).
  // ENODATA: none yet. ESTALE: the ring overwrote it (or the log was
  // formatted anew): the reader needs a snapshot. EBADMSG: it does not
  // verify (corrupted, or lying): not applied.
  Result<OpLogRecord> ReadNext(const OpLogPosition &at) const;

  uint64_t ring_bytes() const { return ring_; }
  uint64_t max_record_bytes() const { return ring_ / 4; }

 private:
  struct Header;
  OpLog(uint8_t *base, uint64_t bytes, Coherence c);
  Header *header() const;
  uint8_t *ring() const { return base_ + kHeaderBytes; }
  void Publish(const void *p, size_t len) const;
  void Refresh(const void *p, size_t len) const;
  void Format(uint64_t generation, uint64_t first_seq);
  uint64_t Placed(size_t len) const;
  // A record's bytes for `len` bytes of data: the MAC follows them.
  size_t Stored(size_t len) const { return len + (key_.empty() ? 0 : kMacBytes); }
  std::string Mac(uint64_t generation, uint64_t seq, uint64_t epoch, std::string_view data) const;

  uint8_t *base_;
  uint64_t bytes_;
  uint64_t ring_;
  Coherence coherence_;
  // The writer's own state (never read back from the region).
  uint64_t generation_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t pos_ = 0;
  uint64_t epoch_ = 0;
  std::function<bool()> fence_;
  std::string key_;
};

}  // namespace maru
