#include "meta/meta_db.h"

#include <algorithm>
#include <thread>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "util/log.h"

namespace maru {
namespace {

constexpr char kInodePrefix = 'i';
constexpr char kRetiredPrefix = 'f';
constexpr const char *kIdentityKey = "m:identity";
constexpr const char *kCountersKey = "m:counters";
constexpr char kQuotaPrefix = 'q';
// The replication log position of the write that holds it.
constexpr const char *kLogPositionKey = "m:oplog";

std::string NumberKey(char prefix, uint64_t n) {
  std::string key(9, '\0');
  key[0] = prefix;
  for (int i = 0; i < 8; ++i) key[1 + i] = static_cast<char>(n >> (56 - 8 * i));
  return key;
}

// "q", then 'd' or 'u', then the id: 10 bytes.
std::string QuotaKey(bool by_uid, uint64_t id) {
  return std::string(1, kQuotaPrefix) + NumberKey(by_uid ? 'u' : 'd', id);
}

std::string Serialize(const google::protobuf::MessageLite &m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

Status FromRocks(const rocksdb::Status &s, const char *what) {
  if (s.ok()) return Status::Ok();
  return Status::Error(EIO, std::string(what) + ": " + s.ToString());
}

}  // namespace

MetaDb::Batch::Batch() : batch_(std::make_unique<rocksdb::WriteBatch>()) {}
MetaDb::Batch::~Batch() = default;

void MetaDb::Batch::PutInode(const schema::Inode &inode) {
  batch_->Put(NumberKey(kInodePrefix, inode.ino()), Serialize(inode));
}
void MetaDb::Batch::DeleteInode(uint64_t ino) {
  batch_->Delete(NumberKey(kInodePrefix, ino));
}
void MetaDb::Batch::PutQuota(const schema::Quota &q) {
  batch_->Put(QuotaKey(q.by_uid(), q.id()), Serialize(q));
}
void MetaDb::Batch::DeleteQuota(bool by_uid, uint64_t id) {
  batch_->Delete(QuotaKey(by_uid, id));
}
void MetaDb::Batch::PutRetired(const schema::Retired &r) {
  batch_->Put(NumberKey(kRetiredPrefix, r.gen()), Serialize(r));
}
void MetaDb::Batch::DeleteRetired(uint64_t gen) {
  batch_->Delete(NumberKey(kRetiredPrefix, gen));
}
void MetaDb::Batch::PutIdentity(const schema::PoolIdentity &id) {
  batch_->Put(kIdentityKey, Serialize(id));
}
void MetaDb::Batch::PutCounters(const schema::Counters &c) {
  batch_->Put(kCountersKey, Serialize(c));
}
bool MetaDb::Batch::empty() const {
  return batch_->Count() == 0;
}

Result<std::unique_ptr<MetaDb>> MetaDb::Open(const std::string &dir, bool sync_writes) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.IncreaseParallelism(2);
  options.keep_log_file_num = 4;
  options.max_log_file_size = 8 << 20;
  // No compaction while the start reads everything: on two cores one
  // would take half the machine from the load (each start leaves a small
  // file at level 0, so every few starts one would begin). StartCompactions
  // turns them on once the server is loaded.
  options.disable_auto_compactions = true;
  rocksdb::DB *raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    int err = s.IsIOError() && s.ToString().find("lock") != std::string::npos ? EBUSY : EIO;
    return Status::Error(err, "cannot open metadata database " + dir + ": " + s.ToString());
  }
  std::unique_ptr<MetaDb> db(new MetaDb());
  db->db_.reset(raw);
  db->sync_ = sync_writes;
  return db;
}

MetaDb::~MetaDb() {
  // What the log holds goes into a table now: a start replays the log into
  // a memtable (a skiplist insert, and at the end a table written, for each
  // record), which at a million chunks was a fifth of the start's CPU; a
  // table is only read. After a crash the log is still replayed.
  if (!db_) return;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  rocksdb::Status s = db_->Flush(flush);
  if (!s.ok()) LOG_WARN("metadata database: flush at close: %s", s.ToString().c_str());
}

void MetaDb::StartCompactions() {
  rocksdb::Status s = db_->SetOptions({{"disable_auto_compactions", "false"}});
  if (!s.ok()) LOG_WARN("metadata database: compactions stay off: %s", s.ToString().c_str());
}

namespace {

// What one iterator found in its key range.
struct Part {
  MetaDb::Contents c;
  bool counters = false;  // c.counters was read (not only its defaults)
  Status status;
};

// Reads the keys in [lower, upper) (an empty bound: no bound) into `part`,
// with room for about `inodes` inode records up front.
void ReadRange(rocksdb::DB *db, const std::string &lower, const std::string &upper, uint64_t inodes,
               Part *part) {
  MetaDb::Contents &c = part->c;
  // One sequential pass: read ahead, and keep the blocks out of the cache
  // (nothing reads them again).
  rocksdb::ReadOptions options;
  options.readahead_size = 8 << 20;
  options.fill_cache = false;
  rocksdb::Slice lower_slice(lower), upper_slice(upper);
  if (!lower.empty()) options.iterate_lower_bound = &lower_slice;
  if (!upper.empty()) options.iterate_upper_bound = &upper_slice;
  // Most records are inodes of about 70 bytes: room for them up front (only
  // what is written is touched; the load's memory is given back after it).
  c.inodes.Reserve(inodes, inodes * 96);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(options));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    rocksdb::Slice key = it->key(), value = it->value();
    bool parsed = true;
    if (key.size() == 9 && key[0] == kInodePrefix) {
      c.inodes.Add(std::string_view(value.data(), value.size()));  // decoded by the reader
    } else if (key.size() == 9 && key[0] == kRetiredPrefix) {
      parsed =
          c.retired.emplace_back().ParseFromArray(value.data(), static_cast<int>(value.size()));
    } else if (key.size() == 10 && key[0] == kQuotaPrefix) {
      parsed = c.quotas.emplace_back().ParseFromArray(value.data(), static_cast<int>(value.size()));
    } else if (key == kIdentityKey) {
      parsed = c.identity.emplace().ParseFromArray(value.data(), static_cast<int>(value.size()));
    } else if (key == kCountersKey) {
      parsed = part->counters =
          c.counters.ParseFromArray(value.data(), static_cast<int>(value.size()));
    }
    if (!parsed) {
      part->status = Status::Error(EIO, "corrupted metadata record " + key.ToString(true));
      return;
    }
  }
  part->status = FromRocks(it->status(), "reading the metadata database");
}

// The inode number of `key` ("i" and 8 big-endian bytes).
uint64_t InodeKeyNumber(const rocksdb::Slice &key) {
  uint64_t n = 0;
  for (int i = 1; i < 9; ++i) n = n << 8 | static_cast<uint8_t>(key[i]);
  return n;
}

// The first and the last inode number in the database; false if none.
bool InodeRange(rocksdb::DB *db, uint64_t *first, uint64_t *last) {
  rocksdb::ReadOptions options;
  options.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(options));
  auto is_inode = [&] {
    return it->Valid() && it->key().size() == 9 && it->key()[0] == kInodePrefix;
  };
  it->Seek(NumberKey(kInodePrefix, 0));
  if (!is_inode()) return false;
  *first = InodeKeyNumber(it->key());
  it->SeekForPrev(NumberKey(kInodePrefix, ~uint64_t{0}));
  if (!is_inode()) return false;
  *last = InodeKeyNumber(it->key());
  return *first < *last;
}

}  // namespace

Result<MetaDb::Contents> MetaDb::Load() {
  uint64_t keys = 0;
  if (!db_->GetIntProperty("rocksdb.estimate-num-keys", &keys)) keys = 0;
  // Iterating RocksDB is a third of a large start's CPU. A large database is
  // read as two halves of the inode numbers, one on another core; the halves
  // join in key order, so the records come out as from one pass.
  uint64_t first = 0, last = 0;
  if (keys < (1 << 16) || std::thread::hardware_concurrency() < 2 ||
      !InodeRange(db_.get(), &first, &last)) {
    Part whole;
    ReadRange(db_.get(), "", "", keys, &whole);
    if (!whole.status.ok()) return whole.status;
    return std::move(whole.c);
  }
  const std::string split = NumberKey(kInodePrefix, first + (last - first) / 2 + 1);
  Part low, high;
  // The low half is reserved for all the inodes: the high half's join it
  // without a copy of the low half's.
  std::thread helper([&] { ReadRange(db_.get(), split, "", keys / 2, &high); });
  ReadRange(db_.get(), "", split, keys, &low);
  helper.join();
  if (!low.status.ok()) return low.status;
  if (!high.status.ok()) return high.status;
  Contents &c = low.c;
  c.inodes.Append(std::move(high.c.inodes));
  for (schema::Retired &r : high.c.retired) c.retired.push_back(std::move(r));
  for (schema::Quota &q : high.c.quotas) c.quotas.push_back(std::move(q));
  if (high.c.identity) c.identity = std::move(high.c.identity);
  if (high.counters) c.counters = high.c.counters;
  return std::move(c);
}

namespace {

std::string EncodePosition(const OpLogPosition &p) {
  std::string out(24, '\0');
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>(p.generation >> (8 * i));
    out[8 + i] = static_cast<char>(p.seq >> (8 * i));
    out[16 + i] = static_cast<char>(p.pos >> (8 * i));
  }
  return out;
}

bool DecodePosition(std::string_view in, OpLogPosition *p) {
  if (in.size() != 24) return false;
  *p = {};
  for (int i = 7; i >= 0; --i) {
    p->generation = p->generation << 8 | static_cast<uint8_t>(in[i]);
    p->seq = p->seq << 8 | static_cast<uint8_t>(in[8 + i]);
    p->pos = p->pos << 8 | static_cast<uint8_t>(in[16 + i]);
  }
  return true;
}

// What a Put of the position adds to a batch's bytes: the record's size is
// known before the position (which depends on it) is in it.
size_t PositionPutBytes() {
  static const size_t bytes = [] {
    rocksdb::WriteBatch b;
    const size_t empty = b.GetDataSize();
    b.Put(kLogPositionKey, EncodePosition({}));
    return b.GetDataSize() - empty;
  }();
  return bytes;
}

// A key this database may hold, with a value of a size it may have: what a
// standby accepts from the log (memory other users can write).
bool OurKey(const rocksdb::Slice &key) {
  if (key.size() == 9 && (key[0] == kInodePrefix || key[0] == kRetiredPrefix)) return true;
  if (key.size() == 10 && key[0] == kQuotaPrefix && (key[1] == 'u' || key[1] == 'd')) return true;
  return key == kIdentityKey || key == kCountersKey || key == kLogPositionKey;
}

// Checks every operation of a batch read from the log: only Put and Delete
// of our own keys (no merge, no range delete, no other column family).
class BatchChecker : public rocksdb::WriteBatch::Handler {
 public:
  rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice &key, const rocksdb::Slice &) override {
    return Check(cf, key);
  }
  rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice &key) override {
    return Check(cf, key);
  }
  rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice &) override { return Refuse(); }
  rocksdb::Status DeleteRangeCF(uint32_t, const rocksdb::Slice &, const rocksdb::Slice &) override {
    return Refuse();
  }
  rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice &, const rocksdb::Slice &) override {
    return Refuse();
  }

 private:
  static rocksdb::Status Check(uint32_t cf, const rocksdb::Slice &key) {
    return cf == 0 && OurKey(key) ? rocksdb::Status::OK() : Refuse();
  }
  static rocksdb::Status Refuse() { return rocksdb::Status::Corruption("not a metadata write"); }
};

}  // namespace

Status MetaDb::Write(Batch &batch) {
  rocksdb::WriteOptions options;
  options.sync = sync_;
  MutexLock lock(&log_mu_);
  if (log_ != nullptr) {
    rocksdb::WriteBatch *b = batch.batch_.get();
    const size_t before = b->GetDataSize();
    b->Put(kLogPositionKey, EncodePosition(log_->After(before + PositionPutBytes())));
    if (b->GetDataSize() != before + PositionPutBytes())
      return Status::Error(EIO, "the replication log position does not fit its batch");
    MARU_RETURN_IF_ERROR(log_->Append(b->Data()));
  }
  return FromRocks(db_->Write(options, batch.batch_.get()), "writing metadata");
}

Result<OpLogPosition> MetaDb::LogPosition() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kLogPositionKey, &value);
  if (s.IsNotFound()) return OpLogPosition{};
  if (!s.ok()) return FromRocks(s, "reading the replication log position");
  OpLogPosition p;
  if (!DecodePosition(value, &p))
    return Status::Error(EIO, "corrupted replication log position in the metadata database");
  return p;
}

Status MetaDb::AttachLog(OpLog *log, uint64_t epoch, std::function<bool()> fence) {
  MutexLock lock(&log_mu_);
  if (fence && !fence())
    return Status::Error(EPERM, "not the leader: the replication log is not taken");
  Result<OpLogPosition> last = LogPosition();
  if (!last.ok()) return last.status();
  // The log may hold writes this database does not: a leader that died
  // between its append and its write, or a standby's database started as
  // the leader. They are applied as a standby would, so that the log goes
  // on (no new generation, no snapshot for the standbys).
  for (;;) {
    Result<OpLogRecord> rec = log->ReadNext(*last);
    if (!rec.ok()) break;  // caught up; or not readable: StartWriter formats anew
    const OpLogPosition next{rec->generation, rec->seq, rec->next_pos};
    if (!ApplyLogged(*rec, next).ok()) break;
    *last = next;
  }
  MARU_RETURN_IF_ERROR(log->StartWriter(*last, epoch, std::move(fence)));
  log_ = log;
  return Status::Ok();
}

Status MetaDb::ApplyLogged(const OpLogRecord &record, const OpLogPosition &at) {
  rocksdb::WriteBatch b(record.data);
  BatchChecker checker;
  rocksdb::Status s = b.Iterate(&checker);
  if (!s.ok() || b.Count() == 0)
    return Status::Error(EBADMSG, "replication log record " + std::to_string(record.seq) +
                                      " is not a metadata write: not applied");
  // Ours, not the leader's: the position this standby read it at.
  b.Put(kLogPositionKey, EncodePosition(at));
  rocksdb::WriteOptions options;
  options.sync = sync_;
  return FromRocks(db_->Write(options, &b), "applying a replicated write");
}

Status MetaDb::Scan(const std::function<bool(std::string_view key, std::string_view value)> &emit) {
  rocksdb::ReadOptions options;
  options.fill_cache = false;
  const rocksdb::Snapshot *snap = db_->GetSnapshot();
  options.snapshot = snap;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (!emit(std::string_view(it->key().data(), it->key().size()),
              std::string_view(it->value().data(), it->value().size())))
      break;
  }
  Status st = FromRocks(it->status(), "reading a snapshot");
  it.reset();
  db_->ReleaseSnapshot(snap);
  return st;
}

Status MetaDb::ReplaceWith(const std::vector<std::pair<std::string, std::string>> &records) {
  rocksdb::WriteBatch b;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) b.Delete(it->key());
  MARU_RETURN_IF_ERROR(FromRocks(it->status(), "reading the metadata database"));
  for (const auto &[key, value] : records) {
    if (!OurKey(key)) return Status::Error(EBADMSG, "a snapshot record of an unknown key");
    b.Put(key, value);
  }
  rocksdb::WriteOptions options;
  options.sync = sync_;
  return FromRocks(db_->Write(options, &b), "writing a snapshot");
}

}  // namespace maru
