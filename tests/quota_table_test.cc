// QuotaTable without the engine: what it charges each quota as files of a
// hand-built tree change, move and go, and what it refuses.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>

#include "meta/quota_table.h"

namespace maru {
namespace {

class QuotaTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Add(kRootIno, S_IFDIR | 0755);
    a_ = Dir(2, tree_.root(), "a");
    b_ = Dir(3, a_, "b");
    c_ = Dir(4, tree_.root(), "c");
    quotas_.Load({}, 4096);
  }
  Inode *Add(uint64_t ino, uint32_t mode) {
    auto inode = std::make_unique<Inode>();
    inode->ino = ino;
    inode->mode = mode;
    return tree_.Adopt(std::move(inode));
  }
  Inode *Dir(uint64_t ino, Inode *parent, const std::string &name) {
    Inode *d = Add(ino, S_IFDIR | 0755);
    tree_.Link(parent, d, name);
    return d;
  }
  // A sealed file of `bytes` (one extent) owned by `uid`.
  Inode *File(uint64_t ino, Inode *parent, uint64_t bytes, uint32_t uid = 0) {
    Inode *f = Add(ino, S_IFREG | 0644);
    f->uid = uid;
    f->current = Version{};
    f->current->extents.push_back({0, ino * (1 << 20), bytes});
    tree_.Link(parent, f, "f" + std::to_string(ino));
    quotas_.Update(*f);
    return f;
  }
  rpc::QuotaInfo Info(const std::string &target) {
    google::protobuf::RepeatedPtrField<rpc::QuotaInfo> all;
    quotas_.Fill(&all);
    for (const auto &q : all)
      if (q.target() == target) return q;
    ADD_FAILURE() << "no quota " << target;
    return {};
  }

  NamespaceTree tree_;
  QuotaTable quotas_{tree_};
  Inode *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
};

TEST_F(QuotaTableTest, NoQuotasChargeNothing) {
  EXPECT_TRUE(quotas_.empty());
  File(10, b_, 1 << 20);
  EXPECT_TRUE(quotas_.MayReserve(*b_, 0, 1ull << 40).ok());
}

TEST_F(QuotaTableTest, EveryQuotadAncestorIsCharged) {
  File(10, b_, 8192);
  quotas_.SetDir(a_->ino, {16384, 0});
  quotas_.SetDir(b_->ino, {12288, 0});
  File(11, b_, 4096);
  EXPECT_EQ(12288u, Info("/a").used_bytes());
  EXPECT_EQ(12288u, Info("/a/b").used_bytes());
  EXPECT_EQ(EDQUOT, quotas_.MayReserve(*b_, 0, 1).errnum());     // /a/b is full
  EXPECT_TRUE(quotas_.MayReserve(*a_, 0, 4096).ok());            // /a is not
  EXPECT_EQ(EDQUOT, quotas_.MayReserve(*a_, 0, 4097).errnum());  // rounded to the unit
  EXPECT_TRUE(quotas_.MayReserve(*c_, 0, 1 << 30).ok());
  EXPECT_EQ(EDQUOT, quotas_.MayReserveAt("/a/b/new/deeper/file", 0, 1).errnum());
  EXPECT_TRUE(quotas_.MayReserveAt("/c/new/file", 0, 1).ok());
  quotas_.Forget(11);
  EXPECT_EQ(8192u, Info("/a/b").used_bytes());
}

TEST_F(QuotaTableTest, UidAndPins) {
  quotas_.SetUid(1000, {8192, 1});
  Inode *f = File(10, c_, 4096, 1000);
  File(11, c_, 4096, 0);
  EXPECT_EQ(4096u, Info("uid:1000").used_bytes());
  EXPECT_TRUE(quotas_.MayPin(*f).ok());
  f->pinned = true;
  quotas_.Update(*f);
  EXPECT_EQ(1u, Info("uid:1000").used_pins());
  Inode *g = File(12, c_, 4096, 1000);
  EXPECT_EQ(EDQUOT, quotas_.MayPin(*g).errnum());
  EXPECT_EQ(EDQUOT, quotas_.MayReserve(*c_, 1000, 1).errnum());
  g->uid = 0;  // chown
  quotas_.Update(*g);
  EXPECT_EQ(4096u, Info("uid:1000").used_bytes());
}

TEST_F(QuotaTableTest, MovesAndRecompute) {
  quotas_.SetDir(a_->ino, {1 << 20, 0});
  Inode *f = File(10, b_, 4096);
  tree_.Unlink(f);
  tree_.Link(c_, f, "moved");
  quotas_.Moved(*f, nullptr);
  EXPECT_EQ(0u, Info("/a").used_bytes());
  File(11, b_, 8192);
  tree_.Unlink(b_);
  tree_.Link(c_, b_, "b");
  quotas_.Moved(*b_, nullptr);  // a directory: everything recomputed
  EXPECT_EQ(0u, Info("/a").used_bytes());
  quotas_.SetDir(c_->ino, {1 << 20, 0});
  EXPECT_EQ(12288u, Info("/c").used_bytes());
  quotas_.SetDir(c_->ino, {0, 0});  // removed
  google::protobuf::RepeatedPtrField<rpc::QuotaInfo> all;
  quotas_.Fill(&all);
  EXPECT_EQ(1, all.size());
}

}  // namespace
}  // namespace maru
