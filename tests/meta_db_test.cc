// MetaDb: what a load of the metadata database reads back.
#include <gtest/gtest.h>

#include <rocksdb/db.h>

#include "harness.h"
#include "meta/meta_db.h"

namespace maru {
namespace {

// A large database is read as two halves of the inode numbers (meta_db.cc):
// the records must come out whole and in key order, with what lies outside
// the inode keys, and a corrupt record in the second half must be found.
TEST(MetaDbTest, LargeLoadComesOutInKeyOrder) {
  maru_test::TempDir dir;
  constexpr uint64_t kInodes = 100000;
  auto inode = [](uint64_t ino) {
    schema::Inode r;
    r.set_ino(ino);
    r.set_parent(1);
    r.set_name("c" + std::to_string(ino));
    return r;
  };
  {
    Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(dir.path() + "/db", false);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    MetaDb::Batch batch;
    // Numbers with gaps, more of them high: the halves differ in size.
    for (uint64_t i = 0; i < kInodes; ++i)
      batch.PutInode(inode(i < kInodes / 4 ? 2 + 7 * i : 1000000 + i));
    schema::Retired retired;
    retired.set_gen(5);
    batch.PutRetired(retired);
    schema::Counters counters;
    counters.set_ino_limit(2000000);
    counters.set_gen_limit(77);
    batch.PutCounters(counters);
    schema::PoolIdentity identity;
    identity.set_pool_uuid("u");
    batch.PutIdentity(identity);
    schema::Quota quota;
    quota.set_id(3);
    quota.set_bytes(4096);
    batch.PutQuota(quota);
    ASSERT_TRUE((*db)->Write(batch).ok());
  }  // closing flushes the log into a table: the key estimate is exact
  Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(dir.path() + "/db", false);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  Result<MetaDb::Contents> c = (*db)->Load();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->inodes.size(), kInodes);
  schema::Inode r;
  for (uint64_t i = 0; i < kInodes; ++i) {
    ASSERT_TRUE(c->inodes.Parse(i, &r));
    const uint64_t want = i < kInodes / 4 ? 2 + 7 * i : 1000000 + i;
    ASSERT_EQ(r.ino(), want) << "record " << i;
    ASSERT_EQ(r.name(), "c" + std::to_string(want));
  }
  ASSERT_EQ(c->retired.size(), 1u);
  EXPECT_EQ(c->retired[0].gen(), 5u);
  EXPECT_EQ(c->counters.ino_limit(), 2000000u);
  EXPECT_EQ(c->counters.gen_limit(), 77u);
  ASSERT_TRUE(c->identity.has_value());
  EXPECT_EQ(c->identity->pool_uuid(), "u");
  ASSERT_EQ(c->quotas.size(), 1u);
  EXPECT_EQ(c->quotas[0].bytes(), 4096u);

  db->reset();

  // A corrupt quota record: its key ("q") lies in the high half, read on
  // the second thread; the load must fail all the same.
  {
    rocksdb::DB *raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir.path() + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> rdb(raw);
    ASSERT_TRUE(rdb->Put(rocksdb::WriteOptions(), std::string("qd\0\0\0\0\0\0\0\x09", 10),
                         std::string("\xff\xff\xff", 3))
                    .ok());
    ASSERT_TRUE(rdb->Flush(rocksdb::FlushOptions()).ok());
  }
  db = MetaDb::Open(dir.path() + "/db", false);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  c = (*db)->Load();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().errnum(), EIO) << c.status().ToString();
}

}  // namespace
}  // namespace maru
