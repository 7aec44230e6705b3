// ShmIndex without the engine or a client: what the server writes into the
// index file for a tree of inodes (as a client maps and reads it), how a
// version leaves it (asking the server until the operation settles), which
// retired versions a lease slot still holds, the file's owner and bits,
// and its end.
#include "meta/shm_index.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "harness.h"
#include "meta/namespace_tree.h"
#include "tree_builder.h"

namespace maru {
namespace {

const Caller kRoot{0, 0, {}, 0};

class ShmIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Add(kRootIno, 0, "", S_IFDIR | 0755);
    pool_ = dir_.path() + "/pool";
    int fd = open(pool_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0660);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fchmod(fd, 0660), 0);
    close(fd);
  }
  void TearDown() override { Unmap(); }

  Inode *Add(uint64_t ino, uint64_t parent, const std::string &name, uint32_t mode) {
    return AdoptInode(&tree_, ino, parent, name, mode);
  }
  Inode *Dir(uint64_t ino, Inode *parent, const std::string &name, uint32_t perm = 0755) {
    return LinkDir(&tree_, ino, parent, name, perm);
  }
  // A sealed file of one extent; `gen` 0: a file still being written.
  Inode *File(uint64_t ino, Inode *parent, const std::string &name, uint64_t gen) {
    Inode *f = Add(ino, 0, "", S_IFREG | 0644);
    tree_.Link(parent, f, name);
    if (gen) Seal(f, gen);
    return f;
  }
  static void Seal(Inode *f, uint64_t gen) {
    Version v;
    v.gen = gen;
    v.size = 4096 * gen;
    v.extents = ExtentList{{0, 65536 * gen, 65536}};
    f->current = v;
  }

  void Make(uint64_t entries = 64) {
    IndexOptions options;
    options.path = pool_ + ".index";
    options.entries = entries;
    options.regions = 4;
    Result<std::unique_ptr<ShmIndex>> made = ShmIndex::Create(options, pool_, 16, tree_);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    index_ = std::move(*made);
    Map();
  }
  // Maps the file as a client does.
  void Map() {
    Unmap();
    int fd = open(index_->path().c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    struct stat st;
    ASSERT_EQ(fstat(fd, &st), 0);
    bytes_ = static_cast<size_t>(st.st_size);
    base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(base_, MAP_FAILED);
  }
  void Unmap() {
    if (base_ && base_ != MAP_FAILED) munmap(base_, bytes_);
    base_ = nullptr;
  }
  const index::Header &header() const { return *static_cast<const index::Header *>(base_); }

  // The entry for `path`, found as a client probes for it.
  std::optional<index::EntryData> Find(const std::string &path) const {
    uint64_t key[2];
    index::PathKey(header().key, path, key);
    const index::Entry *entries = index::Entries(base_, header());
    for (uint64_t i = 0; i < index::kMaxProbe; ++i) {
      index::EntryData e{};
      uint64_t seq;
      if (!index::ReadEntry(entries[(key[0] + i) & (header().entries - 1)], &e, &seq)) continue;
      if (!(e.flags & (index::kUsed | index::kTombstone))) break;
      if ((e.flags & index::kUsed) && e.key[0] == key[0] && e.key[1] == key[1]) return e;
    }
    return std::nullopt;
  }

  maru_test::TempDir dir_;
  std::string pool_;
  NamespaceTree tree_;
  std::unique_ptr<ShmIndex> index_;
  void *base_ = nullptr;
  size_t bytes_ = 0;
};

TEST_F(ShmIndexTest, TheHeaderIsCompleteAndStartingUntilEverythingIsPublished) {
  Make();
  EXPECT_EQ(header().magic, index::kMagic);
  EXPECT_EQ(header().version, index::kVersion);
  EXPECT_EQ(header().entries, 64u);
  EXPECT_EQ(header().regions, 4u);
  EXPECT_EQ(header().instance, index_->instance());
  EXPECT_EQ(header().state.load(), index::kStarting);
  index_->PublishAll();
  EXPECT_EQ(header().state.load(), index::kLive);
}

TEST_F(ShmIndexTest, EntriesMustBeAPowerOfTwo) {
  IndexOptions options;
  options.path = pool_ + ".index";
  options.entries = 100;
  Result<std::unique_ptr<ShmIndex>> made = ShmIndex::Create(options, pool_, 16, tree_);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().errnum(), EINVAL);
}

TEST_F(ShmIndexTest, TheFileHasThePoolsGroupAndAtMostItsReadWriteBits) {
  ASSERT_EQ(chmod(pool_.c_str(), 0750), 0);
  Make();
  struct stat pool, made;
  ASSERT_EQ(stat(pool_.c_str(), &pool), 0);
  ASSERT_EQ(stat(index_->path().c_str(), &made), 0);
  EXPECT_EQ(made.st_gid, pool.st_gid);
  EXPECT_EQ(made.st_mode & 07777, 0640u);
}

TEST_F(ShmIndexTest, MayOpenIsWhatOpeningTheFileToReadAndWriteWouldSay) {
  struct stat pool;
  ASSERT_EQ(stat(pool_.c_str(), &pool), 0);
  Make();
  EXPECT_TRUE(index_->MayOpen(kRoot));
  const Caller stranger{pool.st_uid + 4242, pool.st_gid + 4242, {}, 0};
  Caller member = stranger;
  member.groups = {pool.st_gid};
  EXPECT_FALSE(index_->MayOpen(stranger));
  EXPECT_TRUE(index_->MayOpen(member));  // the pool's group reads and writes it (0660)
}

TEST_F(ShmIndexTest, EverySealedFileIsEnteredUnderItsPath) {
  Inode *a = Dir(2, tree_.root(), "a");
  File(3, a, "x", 7);
  File(4, a, "writing", 0);
  File(5, tree_.root(), "top", 9);
  Make();
  index_->PublishAll();
  std::optional<index::EntryData> x = Find("/a/x");
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->ino, 3u);
  EXPECT_EQ(x->gen, 7u);
  EXPECT_EQ(x->size, 7u * 4096);
  EXPECT_EQ(x->extent_count, 1u);
  EXPECT_EQ(x->extents[0].offset, 7u * 65536);
  EXPECT_EQ(x->extents[0].length, 65536u);
  EXPECT_TRUE(x->flags & index::kPathOpen);
  EXPECT_FALSE(Find("/a/writing").has_value());  // no sealed version yet
  ASSERT_TRUE(Find("/top").has_value());
  EXPECT_EQ(Find("/top")->ino, 5u);
  EXPECT_EQ(index_->entries_used(), 2u);
}

TEST_F(ShmIndexTest, PathOpenSaysWhetherEveryDirectoryAboveLetsOthersSearch) {
  Inode *open_dir = Dir(2, tree_.root(), "open"), *closed = Dir(3, tree_.root(), "closed", 0750);
  Inode *below = Dir(4, closed, "below");
  File(5, open_dir, "f", 1);
  File(6, below, "f", 2);
  Make();
  index_->PublishAll();
  EXPECT_TRUE(Find("/open/f")->flags & index::kPathOpen);
  EXPECT_FALSE(Find("/closed/below/f")->flags & index::kPathOpen);
  // Opened up: the files below are entered again with the flag.
  closed->mode = S_IFDIR | 0755;
  index_->Changed(*closed);
  EXPECT_TRUE(Find("/closed/below/f")->flags & index::kPathOpen);
}

TEST_F(ShmIndexTest, ANewFileIsEnteredAndARenamedOneMovesItsEntry) {
  Make();
  index_->PublishAll();
  Inode *f = File(2, tree_.root(), "old", 3);
  index_->Changed(*f);
  ASSERT_TRUE(Find("/old").has_value());
  tree_.Unlink(f);
  tree_.Link(tree_.root(), f, "new");
  index_->Changed(*f);
  EXPECT_FALSE(Find("/old").has_value());
  ASSERT_TRUE(Find("/new").has_value());
  EXPECT_EQ(Find("/new")->gen, 3u);
  EXPECT_EQ(index_->entries_used(), 1u);
}

TEST_F(ShmIndexTest, ARetiringVersionAsksTheServerUntilTheOperationSettles) {
  File(2, tree_.root(), "f", 3);
  Make();
  index_->PublishAll();
  index_->Retiring(3);
  std::optional<index::EntryData> e = Find("/f");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->flags & index::kChanging);
  index_->Settle();
  EXPECT_FALSE(Find("/f").has_value());
  EXPECT_EQ(index_->entries_used(), 0u);
}

TEST_F(ShmIndexTest, ARewritePutsItsVersionInTheRetiredOnesPlace) {
  Inode *f = File(2, tree_.root(), "f", 3);
  Make();
  index_->PublishAll();
  index_->Retiring(3);
  Seal(f, 4);
  index_->Changed(*f);
  index_->Settle();
  std::optional<index::EntryData> e = Find("/f");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->gen, 4u);
  EXPECT_FALSE(e->flags & index::kChanging);
}

TEST_F(ShmIndexTest, AVersionIsHeldWhileALeaseSlotHoldsIt) {
  File(2, tree_.root(), "f", 3);
  Make();
  index_->PublishAll();
  LeaseSlots::Assigned a = index_->AssignRegion(77, 1000, 8);
  ASSERT_NE(a.region, 0u);
  index::Region *r = index::RegionAt(base_, header(), a.region - 1);
  EXPECT_FALSE(index_->Held(3));
  r->slots[0].store(3);
  r->used.store(1);
  EXPECT_TRUE(index_->Held(3));
  EXPECT_EQ(index_->SlotLeases(77), 1u);
  index_->Retiring(3);
  index_->Settle();
  EXPECT_TRUE(index_->Held(3));  // out of the index, still read
  EXPECT_EQ(index_->SlotHolders(3), std::vector<uint32_t>{1000});
  r->slots[0].store(0);
  EXPECT_FALSE(index_->Held(3));
  // A version never in the index is held by no slot, whatever one says.
  r->slots[0].store(99);
  EXPECT_FALSE(index_->Held(99));
  index_->DropRegion(77);
  EXPECT_EQ(index_->SlotLeases(77), 0u);
}

TEST_F(ShmIndexTest, FilesPastSevenEighthsOfTheEntriesOverflowAndClientsAreTold) {
  for (uint64_t i = 0; i < 10; ++i) File(2 + i, tree_.root(), "f" + std::to_string(i), 1 + i);
  Make(8);
  index_->PublishAll();
  EXPECT_EQ(index_->entries_used(), 7u);
  EXPECT_EQ(index_->overflow(), 3u);
  EXPECT_EQ(header().overflow.load(), 3u);
}

TEST_F(ShmIndexTest, TheEndMarksTheIndexDeadAndRemovesIt) {
  Make();
  index_->PublishAll();
  const std::string path = index_->path();
  index_.reset();
  EXPECT_EQ(header().state.load(), index::kDead);  // clients still mapping it let go
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST_F(ShmIndexTest, ANewIndexMarksTheOneBeforeItDead) {
  Make();
  index_->PublishAll();
  auto *old = static_cast<index::Header *>(base_);  // a client of the first index
  const size_t old_bytes = bytes_;
  base_ = nullptr;
  std::unique_ptr<ShmIndex> before = std::move(index_);
  Make();
  EXPECT_EQ(old->state.load(), index::kDead);
  EXPECT_EQ(header().state.load(), index::kStarting);
  EXPECT_NE(header().instance, before->instance());
  before.reset();  // the name is the new index's now: it stays
  EXPECT_EQ(access((pool_ + ".index").c_str(), F_OK), 0);
  munmap(old, old_bytes);
}

TEST(DefaultIndexPath, BesideAPoolFileElseInDevShmByUuid) {
  maru_test::TempDir dir;
  const std::string pool = dir.path() + "/pool";
  close(open(pool.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  EXPECT_EQ(DefaultIndexPath(pool, "uuid"), pool + ".index");
  EXPECT_EQ(DefaultIndexPath(dir.path() + "/none", std::string("\x01\xab", 2)),
            "/dev/shm/maru-01ab.index");
}

}  // namespace
}  // namespace maru
