// The durable half of the metadata: a RocksDB database holding the records
// of schema.proto. The server keeps everything in memory and writes through
// here; at start it reads it all back. Writes go to the WAL; with sync off
// they survive a kill -9 of the server (not a power loss).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "schema.pb.h"
#include "util/status.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace maru {

class MetaDb {
 public:
  struct Contents {
    std::vector<schema::Inode> inodes;
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

  Result<Contents> Load();
  Status Write(Batch &batch);

 private:
  MetaDb() = default;
  std::unique_ptr<rocksdb::DB> db_;
  bool sync_ = false;
};

}  // namespace maru
