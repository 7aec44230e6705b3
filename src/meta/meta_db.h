// The durable half of the metadata: a RocksDB database holding the records
// of schema.proto. The server keeps everything in memory and writes through
// here; at start it reads it all back. Writes go to the WAL; with sync off
// they survive a kill -9 of the server (not a power loss).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ha/op_log.h"
#include "meta/schema.pb.h"
#include "util/mutex.h"
#include "util/status.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace maru {

// Serialized records back to back, decoded one at a time by whoever reads
// them: a load of ten million inodes holds their bytes (about 100 each)
// rather than ten million decoded messages (several heap objects each).
template <typename Message>
class Records {
 public:
  void Add(std::string_view bytes) {
    offsets_.push_back(data_.size());
    data_.append(bytes);
  }
  // Room for about `n` records of `bytes` in all, so that a load of
  // millions copies none of them again as it grows.
  void Reserve(size_t n, size_t bytes) {
    offsets_.reserve(n);
    data_.reserve(bytes);
  }
  // Moves `other`'s records in after these.
  void Append(Records &&other) {
    const size_t base = data_.size();
    if (offsets_.empty()) {
      *this = std::move(other);
      return;
    }
    data_.append(other.data_);
    offsets_.reserve(offsets_.size() + other.offsets_.size());
    for (size_t o : other.offsets_) offsets_.push_back(base + o);
    other = Records();
  }
  size_t size() const { return offsets_.size(); }
  bool empty() const { return offsets_.empty(); }
  std::string_view bytes(size_t i) const {
    const size_t end = i + 1 < offsets_.size() ? offsets_[i + 1] : data_.size();
    return std::string_view(data_).substr(offsets_[i], end - offsets_[i]);
  }
  // Decodes record `i` into `out` (reusing what it holds); false if corrupt.
  bool Parse(size_t i, Message *out) const {
    const std::string_view b = bytes(i);
    return out->ParseFromArray(b.data(), static_cast<int>(b.size()));
  }
  // Decoded copies, for callers that want messages (tests, tools).
  class const_iterator {
   public:
    const_iterator(const Records *r, size_t i) : r_(r), i_(i) {}
    Message operator*() const {
      Message m;
      r_->Parse(i_, &m);
      return m;
    }
    const_iterator &operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const const_iterator &o) const { return i_ != o.i_; }

   private:
    const Records *r_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

 private:
  std::string data_;
  std::vector<size_t> offsets_;
};

class MetaDb {
 public:
  struct Contents {
    Records<schema::Inode> inodes;  // not decoded yet: EIO from the reader if one is corrupt
    std::vector<schema::Retired> retired;
    std::optional<schema::PoolIdentity> identity;
    schema::Counters counters;
    std::vector<schema::Quota> quotas;
  };

  // A set of changes applied atomically by Write().
  class Batch {
   public:
    Batch();
    ~Batch();
    void PutInode(const schema::Inode &inode);
    void DeleteInode(uint64_t ino);
    void PutRetired(const schema::Retired &retired);
    void DeleteRetired(uint64_t gen);
    void PutIdentity(const schema::PoolIdentity &identity);
    void PutCounters(const schema::Counters &counters);
    void PutQuota(const schema::Quota &quota);
    void DeleteQuota(bool by_uid, uint64_t id);
    bool empty() const;

   private:
    friend class MetaDb;
    std::unique_ptr<rocksdb::WriteBatch> batch_;
  };

  static Result<std::unique_ptr<MetaDb>> Open(const std::string &dir, bool sync_writes);
  ~MetaDb();

  // Opened with compactions off (they would slow the start down); on from here.
  void StartCompactions();
  Result<Contents> Load();
  // Writes `batch`; with a replication log attached, appends it there
  // first (and records its position in the same write), so that a standby
  // never holds a write the log lost.
  Status Write(Batch &batch);

  // --- replication (src/ha) ---
  // The replication log position of the last write this database holds
  // (all zero when none).
  Result<OpLogPosition> LogPosition();
  // Leads `log` from this database's position (OpLog::StartWriter); from
  // here on every Write is appended to it first. `fence` is asked before
  // each append (false: this server no longer leads; nothing is written).
  Status AttachLog(OpLog *log, uint64_t epoch, std::function<bool()> fence);
  // A standby's write: the batch of a record read from the log (validated
  // here: only our own keys, well formed), with `at` (the position after
  // it) in the same write.
  Status ApplyLogged(const OpLogRecord &record, const OpLogPosition &at);
  // A snapshot for a standby: every record, in key order, to `emit`
  // (false stops), from one consistent view; its log position is among
  // them, so that the standby tails on from there.
  Status Scan(const std::function<bool(std::string_view key, std::string_view value)> &emit);
  // Replaces everything with `records` (a snapshot's), in one write; the
  // same validation as ApplyLogged.
  Status ReplaceWith(const std::vector<std::pair<std::string, std::string>> &records);

 private:
  MetaDb() = default;
  std::unique_ptr<rocksdb::DB> db_;
  bool sync_ = false;
  Mutex log_mu_;  // one append and its write at a time: the log's order is the database's
  OpLog *log_ GUARDED_BY(log_mu_) = nullptr;
};

}  // namespace maru
