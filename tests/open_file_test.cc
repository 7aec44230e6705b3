// OpenFile without FUSE: maru-fuse's open file against a real server, as
// MaruFs drives it. A writer's versions (created, grown, published, started
// again keeping content, aborted when never sealed, kept under no name once
// the file is gone), readers of sealed versions, and readers following a
// writer on the same mount.
#include "fs/open_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/pool_map.h"
#include "harness.h"

namespace maru {
namespace {

using Role = OpenFile::Role;

class OpenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    ClientOptions options;
    options.client_name = "open_file_test";
    Result<std::unique_ptr<MetaClient>> client = MetaClient::Connect(server_.address(), options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
    Result<std::unique_ptr<PoolMap>> pool =
        PoolMap::Open(client_->session_info(), Populate::kNever);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_map_ = std::move(*pool);
    env_.client = client_.get();
    env_.pool = pool_map_.get();
    env_.published = [this](uint64_t ino, uint64_t gen) { published_.push_back({ino, gen}); };
  }

  // A new file at `path`, its writer holding the empty version the create made.
  std::shared_ptr<OpenFile> Create(const std::string &path) {
    rpc::CreateRequest r;
    r.mutable_ref()->set_path(path);
    r.set_mode(0644);
    rpc::ChunkReply rep;
    EXPECT_EQ(client_->Call(&MetaClient::Stub::Create, r, &rep), 0) << path;
    auto f = std::make_shared<OpenFile>(&env_, rep.attr().ino(), Role::kWriter);
    EXPECT_EQ(f->AdoptCreated(rep, caller_), 0);
    return f;
  }
  // A writer of an existing file, as an open for writing makes one.
  std::shared_ptr<OpenFile> Writer(uint64_t ino) {
    return std::make_shared<OpenFile>(&env_, ino, Role::kWriter);
  }
  // A reader of the file's sealed version; null if it cannot open one.
  std::shared_ptr<OpenFile> Reader(uint64_t ino, int *rc = nullptr) {
    auto f = std::make_shared<OpenFile>(&env_, ino, Role::kReader);
    const int got = f->OpenSealed(caller_);
    if (rc) *rc = got;
    return got == 0 ? f : nullptr;
  }

  ssize_t WriteAt(OpenFile &f, uint64_t start, const std::string &bytes, bool may_wait = true) {
    return f.Write([this] { return caller_; }, start, bytes.size(),
                   [&](const ExtentMap &map) {
                     map.ForEachPiece(start, bytes.size(),
                                      [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t off) {
                                        memcpy(pool_map_->device(dev)->base() + at,
                                               bytes.data() + (off - start), n);
                                      });
                     return static_cast<ssize_t>(bytes.size());
                   },
                   may_wait);
  }
  // What a read of the whole file replies.
  std::string ReadAll(OpenFile &f) {
    OpenFile::ReadView v;
    EXPECT_EQ(f.Read(0, 1ull << 30, &v), 0);
    std::string out(v.len, '\0');
    if (v.map)
      v.map->ForEachPiece(0, v.len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t off) {
        memcpy(out.data() + off, pool_map_->device(dev)->base() + at, n);
      });
    return out;
  }
  int Truncate(OpenFile &f, uint64_t size) {
    return f.Truncate([this] { return caller_; }, size);
  }
  int Unlink(const std::string &path) {
    rpc::RefRequest r;
    r.mutable_ref()->set_path(path);
    rpc::ErrorReply rep;
    return client_->Call(&MetaClient::Stub::Unlink, r, &rep);
  }

  maru_test::TestPool pool_{64ull << 20};
  maru_test::Server server_{pool_.path()};
  std::unique_ptr<MetaClient> client_;
  std::unique_ptr<PoolMap> pool_map_;
  FileEnv env_;
  rpc::Caller caller_;  // not asserted: the test process itself
  std::vector<std::pair<uint64_t, uint64_t>> published_;
};

TEST_F(OpenFileTest, APublishedVersionIsWhatReadersOpen) {
  std::shared_ptr<OpenFile> w = Create("/f");
  const std::string bytes(100000, 'a');
  ASSERT_EQ(WriteAt(*w, 0, bytes), static_cast<ssize_t>(bytes.size()));
  EXPECT_FALSE(w->Published());
  ASSERT_EQ(w->Publish(), 0);
  EXPECT_TRUE(w->Published());
  ASSERT_EQ(published_.size(), 1u);
  EXPECT_EQ(published_[0].first, w->ino());
  std::shared_ptr<OpenFile> r = Reader(w->ino());
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->gen(), published_[0].second);
  EXPECT_EQ(ReadAll(*r), bytes);
  EXPECT_EQ(ReadAll(*w), bytes);  // the writer reads on under its lease
  ASSERT_EQ(w->Publish(), 0);     // nothing new: nothing sealed again
  EXPECT_EQ(published_.size(), 1u);
}

TEST_F(OpenFileTest, AReadersViewOfASealedVersionTakesNoLockAndEndsAtItsSize) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "0123456789"), 10);
  ASSERT_EQ(w->Publish(), 0);
  std::shared_ptr<OpenFile> r = Reader(w->ino());
  ASSERT_NE(r, nullptr);
  OpenFile::ReadView v;
  ASSERT_EQ(r->Read(4, 100, &v), 0);
  EXPECT_TRUE(v.sealed);
  EXPECT_EQ(v.locked, nullptr);
  EXPECT_EQ(v.len, 6u);
  OpenFile::ReadView past;
  ASSERT_EQ(r->Read(20, 5, &past), 0);
  EXPECT_EQ(past.len, 0u);
}

TEST_F(OpenFileTest, AWriteAfterAPublishStartsANewVersionKeepingTheContent) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "aaaaaaaa"), 8);
  ASSERT_EQ(w->Publish(), 0);
  ASSERT_EQ(WriteAt(*w, 2, "XY"), 2);
  EXPECT_FALSE(w->Published());
  EXPECT_EQ(ReadAll(*Reader(w->ino())), "aaaaaaaa");  // others: the sealed version still
  ASSERT_EQ(w->Publish(), 0);
  ASSERT_EQ(published_.size(), 2u);
  EXPECT_NE(published_[0].second, published_[1].second);
  EXPECT_EQ(ReadAll(*Reader(w->ino())), "aaXYaaaa");
}

TEST_F(OpenFileTest, ANewVersionKeepsOnlyTheBytesAskedFor) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "abcdefgh"), 8);
  ASSERT_EQ(w->Publish(), 0);
  std::shared_ptr<OpenFile> again = Writer(w->ino());  // another open for writing
  ASSERT_EQ(again->StartVersion(caller_, 3), 0);
  ASSERT_EQ(again->Publish(), 0);
  EXPECT_EQ(ReadAll(*Reader(w->ino())), "abc");
  ASSERT_EQ(again->StartVersion(caller_, 0), 0);  // O_TRUNC
  ASSERT_EQ(again->Publish(), 0);
  EXPECT_EQ(ReadAll(*Reader(w->ino())), "");
}

TEST_F(OpenFileTest, TruncateGrowsWithZerosAndShrinks) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "abc"), 3);
  ASSERT_EQ(Truncate(*w, 6), 0);
  EXPECT_EQ(ReadAll(*w), std::string("abc\0\0\0", 6));
  ASSERT_EQ(Truncate(*w, 2), 0);
  ASSERT_EQ(w->Publish(), 0);
  EXPECT_EQ(ReadAll(*Reader(w->ino())), "ab");
}

TEST_F(OpenFileTest, AHoleWrittenPastTheEndReadsAsZeros) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "ab"), 2);
  ASSERT_EQ(WriteAt(*w, 6, "cd"), 2);
  EXPECT_EQ(ReadAll(*w), std::string("ab\0\0\0\0cd", 8));
}

TEST_F(OpenFileTest, AVersionNeverSealedIsAbortedAndReadersKeepThePreviousOne) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "first"), 5);
  ASSERT_EQ(w->Publish(), 0);
  const uint64_t ino = w->ino();
  ASSERT_EQ(WriteAt(*w, 0, "SECOND"), 6);
  w.reset();  // the last reference: the unsealed version goes
  EXPECT_EQ(ReadAll(*Reader(ino)), "first");
  // The name is free for a new version at once: nothing was left reserved.
  std::shared_ptr<OpenFile> next = Writer(ino);
  ASSERT_EQ(next->StartVersion(caller_, UINT64_MAX), 0);
  ASSERT_EQ(next->Publish(), 0);
  EXPECT_EQ(ReadAll(*Reader(ino)), "first");
}

TEST_F(OpenFileTest, AFileWithNoSealedVersionIsBusyToReaders) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "x"), 1);
  int rc = 0;
  EXPECT_EQ(Reader(w->ino(), &rc), nullptr);
  EXPECT_EQ(rc, -EBUSY);
}

TEST_F(OpenFileTest, AReaderFollowingItsWriterReadsUnpublishedBytesUnderTheWritersLock) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "draft"), 5);
  auto r = std::make_shared<OpenFile>(&env_, w->ino(), Role::kReader);
  r->Follow(w);
  OpenFile::ReadView v;
  ASSERT_EQ(r->Read(0, 100, &v), 0);
  EXPECT_FALSE(v.sealed);
  EXPECT_NE(v.locked, nullptr);
  EXPECT_EQ(v.len, 5u);
  // While a reply holds the view, the writer's lock is taken: a write that
  // may not wait says so rather than wait.
  ssize_t written = 0;
  std::thread([&] { written = WriteAt(*w, 5, "!", false); }).join();
  EXPECT_EQ(written, -EWOULDBLOCK);
  v.Unlock();
  w.reset();  // the follower holds it: its version stays until the reader goes
  EXPECT_EQ(ReadAll(*r), "draft");
}

TEST_F(OpenFileTest, AWriteThatMayNotWaitWritesNothingWhereItWouldAskTheServer) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "abc"), 3);
  ASSERT_EQ(w->Publish(), 0);
  EXPECT_EQ(WriteAt(*w, 0, "zzz", false), -EWOULDBLOCK);  // a new version needs the server
  EXPECT_TRUE(w->Published());
  EXPECT_EQ(ReadAll(*w), "abc");
}

TEST_F(OpenFileTest, AWriterWhoseFileIsRemovedGoesOnUnderNoName) {
  std::shared_ptr<OpenFile> w = Create("/tmpfile");
  ASSERT_EQ(WriteAt(*w, 0, "kept"), 4);
  ASSERT_EQ(w->Publish(), 0);
  ASSERT_EQ(Unlink("/tmpfile"), 0);
  ASSERT_EQ(WriteAt(*w, 4, std::string(3 << 20, 'm')), 3 << 20);  // grows by copying
  ASSERT_EQ(w->Publish(), 0);  // no name to publish under: nothing to do
  EXPECT_EQ(published_.size(), 1u);
  const std::string all = ReadAll(*w);
  ASSERT_EQ(all.size(), 4u + (3 << 20));
  EXPECT_EQ(all.substr(0, 4), "kept");
  EXPECT_EQ(all.substr(4), std::string(3 << 20, 'm'));
  rpc::Attr attr;
  ASSERT_TRUE(w->LastAttr(&attr));  // what fstat shows once the server has no name for it
  EXPECT_EQ(attr.size(), 4u + (3 << 20));
  EXPECT_EQ(attr.ino(), w->ino());
}

TEST_F(OpenFileTest, ReadersMayNotWrite) {
  std::shared_ptr<OpenFile> w = Create("/f");
  ASSERT_EQ(WriteAt(*w, 0, "abc"), 3);
  ASSERT_EQ(w->Publish(), 0);
  std::shared_ptr<OpenFile> r = Reader(w->ino());
  EXPECT_EQ(WriteAt(*r, 0, "x"), -EBADF);
  EXPECT_EQ(r->Publish(), 0);  // its version is sealed already
}

}  // namespace
}  // namespace maru
