// ExtentAllocator against a model, superblock encoding, pool formatting.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <random>
#include <vector>

#include "alloc/extent_allocator.h"
#include "alloc/pool_control.h"
#include "alloc/pool_device.h"
#include "alloc/superblock.h"
#include "harness.h"

namespace maru {
namespace {

constexpr uint64_t kUnit = 4096;

// The model: one bool per unit.
struct Model {
  std::vector<bool> used;
  uint64_t begin;
  // Free runs as (offset, length) in bytes.
  std::map<uint64_t, uint64_t> Runs() const {
    std::map<uint64_t, uint64_t> runs;
    for (size_t i = 0; i < used.size();) {
      if (used[i]) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < used.size() && !used[j]) ++j;
      runs[begin + i * kUnit] = (j - i) * kUnit;
      i = j;
    }
    return runs;
  }
};

TEST(ExtentAllocator, MatchesModelUnderRandomAllocAndFree) {
  const uint64_t begin = 16 * kUnit, units = 2048;
  ExtentAllocator alloc(0, begin, begin + units * kUnit, kUnit);
  Model model{std::vector<bool>(units, false), begin};
  std::mt19937_64 rng(42);
  std::vector<ExtentList> live;
  for (int step = 0; step < 20000; ++step) {
    bool do_alloc = live.empty() || rng() % 100 < 55;
    if (do_alloc) {
      uint64_t bytes = 1 + rng() % (64 * kUnit);
      uint64_t need = (bytes + kUnit - 1) / kUnit * kUnit;
      auto runs = model.Runs();
      uint64_t best = 0, free = 0;
      for (auto &[off, len] : runs) {
        free += len;
        if (len >= need && (best == 0 || len < best)) best = len;
      }
      Result<ExtentList> got = alloc.Allocate(bytes);
      if (need > free) {
        ASSERT_FALSE(got.ok());
        EXPECT_EQ(got.status().errnum(), ENOSPC);
        continue;
      }
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(TotalLength(*got), need);
      if (best) {
        // Best fit: one extent, cut from the smallest run that holds it.
        ASSERT_EQ(got->size(), 1u);
        auto it = runs.upper_bound((*got)[0].offset);
        --it;
        EXPECT_EQ(it->second, best);
      }
      for (const Extent &e : *got) {
        for (uint64_t o = e.offset; o < e.end(); o += kUnit) {
          size_t u = (o - begin) / kUnit;
          ASSERT_FALSE(model.used[u]) << "overlap at unit " << u;
          model.used[u] = true;
        }
      }
      live.push_back(*got);
    } else {
      size_t i = rng() % live.size();
      for (const Extent &e : live[i]) {
        ASSERT_TRUE(alloc.Free(e).ok());
        for (uint64_t o = e.offset; o < e.end(); o += kUnit)
          model.used[(o - begin) / kUnit] = false;
      }
      live.erase(live.begin() + static_cast<long>(i));
    }
    // Same free space, run for run: coalescing is complete.
    ASSERT_EQ(alloc.free_map(), model.Runs()) << "step " << step;
  }
  for (const ExtentList &l : live)
    for (const Extent &e : l) ASSERT_TRUE(alloc.Free(e).ok());
  EXPECT_EQ(alloc.free_runs(), 1u);
  EXPECT_EQ(alloc.free_bytes(), units * kUnit);
}

TEST(ExtentAllocator, RejectsDoubleFreeAndMisalignment) {
  ExtentAllocator alloc(0, kUnit, 64 * kUnit, kUnit);
  Result<ExtentList> a = alloc.Allocate(3 * kUnit);
  ASSERT_TRUE(a.ok());
  Extent e = (*a)[0];
  EXPECT_TRUE(alloc.Free(e).ok());
  EXPECT_EQ(alloc.Free(e).errnum(), EINVAL);
  EXPECT_EQ(alloc.Free(Extent{0, kUnit + 1, kUnit}).errnum(), EINVAL);
  EXPECT_EQ(alloc.Free(Extent{1, kUnit, kUnit}).errnum(), EINVAL);
  EXPECT_EQ(alloc.Free(Extent{0, 100 * kUnit, kUnit}).errnum(), EINVAL);
  EXPECT_EQ(alloc.free_bytes(), 63 * kUnit);
}

TEST(ExtentAllocator, RebuildByMarkingUsedDetectsOverlap) {
  ExtentAllocator alloc(0, 0, 64 * kUnit, kUnit);
  EXPECT_TRUE(alloc.MarkUsed(Extent{0, 4 * kUnit, 4 * kUnit}).ok());
  EXPECT_TRUE(alloc.MarkUsed(Extent{0, 10 * kUnit, 2 * kUnit}).ok());
  EXPECT_EQ(alloc.MarkUsed(Extent{0, 5 * kUnit, 2 * kUnit}).errnum(), EINVAL);
  EXPECT_EQ(alloc.free_bytes(), 58 * kUnit);
  EXPECT_EQ(alloc.free_runs(), 3u);
}

TEST(ExtentAllocator, SplitsOnlyWhenNoRunFits) {
  ExtentAllocator alloc(0, 0, 10 * kUnit, kUnit);
  // Leave free runs of 2, 3 and 1 units.
  ASSERT_TRUE(alloc.MarkUsed(Extent{0, 2 * kUnit, kUnit}).ok());
  ASSERT_TRUE(alloc.MarkUsed(Extent{0, 6 * kUnit, 3 * kUnit}).ok());
  Result<ExtentList> got = alloc.Allocate(5 * kUnit);
  ASSERT_TRUE(got.ok());
  EXPECT_GT(got->size(), 1u);
  EXPECT_EQ(TotalLength(*got), 5 * kUnit);
  EXPECT_EQ(alloc.Allocate(2 * kUnit).status().errnum(), ENOSPC);
  EXPECT_EQ(alloc.Allocate(100 * kUnit).status().errnum(), EFBIG);
}

TEST(Superblock, RoundTripsAndDetectsCorruption) {
  Superblock sb;
  sb.pool_uuid = NewUuid();
  sb.device_uuid = NewUuid();
  sb.size = 1 << 30;
  sb.alignment = 4096;
  sb.unit = 65536;
  sb.data_offset = 65536;
  sb.epoch = NewEpoch();
  sb.label = "test";
  std::vector<uint8_t> buf(kSuperblockBytes);
  sb.Encode(buf.data());
  Result<Superblock> back = Superblock::Decode(buf.data(), sb.size);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->pool_uuid, sb.pool_uuid);
  EXPECT_EQ(back->epoch, sb.epoch);
  EXPECT_EQ(back->label, "test");
  EXPECT_EQ(Superblock::Decode(buf.data(), sb.size / 2).status().errnum(), EINVAL);  // truncated
  buf[40] ^= 1;
  Result<Superblock> bad = Superblock::Decode(buf.data(), sb.size);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("CRC"), std::string::npos);
  buf[0] = 'X';
  EXPECT_NE(Superblock::Decode(buf.data(), sb.size).status().message().find("magic"),
            std::string::npos);
}

// A superblock whose CRC is valid but whose geometry mkpool would never
// write is refused: a 1-byte unit would let extents share pages.
TEST(Superblock, RefusesGeometryWithAValidCrc) {
  auto decode = [](void (*edit)(Superblock &)) {
    Superblock sb;
    sb.pool_uuid = NewUuid();
    sb.device_uuid = NewUuid();
    sb.size = 64 << 20;
    sb.alignment = 4096;
    sb.unit = 65536;
    sb.data_offset = 65536;
    sb.epoch = NewEpoch();
    edit(sb);
    std::vector<uint8_t> buf(kSuperblockBytes);
    sb.Encode(buf.data());
    return Superblock::Decode(buf.data(), 64 << 20).status();
  };
  EXPECT_TRUE(decode([](Superblock &) {}).ok());
  const std::vector<void (*)(Superblock &)> bad = {
      [](Superblock &sb) { sb.unit = 1; },
      [](Superblock &sb) { sb.unit = 2048; },
      [](Superblock &sb) { sb.unit = 3 * 65536; },
      [](Superblock &sb) { sb.unit = 2ull << 30; },
      [](Superblock &sb) { sb.alignment = 1; },
      [](Superblock &sb) { sb.alignment = 1 << 20; },  // above the unit
      [](Superblock &sb) { sb.data_offset = 0; },
      [](Superblock &sb) { sb.data_offset = 65536 + 4096; },
      [](Superblock &sb) { sb.data_offset = sb.size; },
      [](Superblock &sb) { sb.size = (64 << 20) - 4096; },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    Status s = decode(bad[i]);
    EXPECT_EQ(s.errnum(), EINVAL) << "case " << i;
    EXPECT_NE(s.message().find("geometry"), std::string::npos)
        << "case " << i << ": " << s.ToString();
  }
}

// A test stopped by meson's timeout (SIGTERM) still removes its pools.
TEST(TestPool, IsRemovedWhenTheTestIsKilledBySigterm) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  if (child == 0) {
    maru_test::TestPool pool(8 << 20);
    ssize_t n = write(fds[1], pool.path().c_str(), pool.path().size());
    (void)n;
    raise(SIGTERM);
    _exit(0);
  }
  close(fds[1]);
  char path[256] = {};
  ASSERT_GT(read(fds[0], path, sizeof(path) - 1), 0);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_NE(access(path, F_OK), 0) << path << " was left behind";
  unlink(path);
}

TEST(FormatPool, CreatesRefusesAndReformats) {
  std::string path = "/dev/shm/" + maru_test::UniqueName("maru-format") + ".pool";
  FormatOptions options;
  options.size = 8 << 20;
  Result<Superblock> first = FormatPool(path, options);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->unit, 64u << 10);
  Result<Superblock> again = FormatPool(path, options);
  EXPECT_EQ(again.status().errnum(), EEXIST);
  options.force = true;
  Result<Superblock> forced = FormatPool(path, options);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->pool_uuid, first->pool_uuid);
  EXPECT_EQ(forced->device_uuid, first->device_uuid);
  EXPECT_NE(forced->epoch, first->epoch);
  // A truncated pool is refused, saying why and how to fix it.
  ASSERT_EQ(truncate(path.c_str(), 4 << 20), 0);
  Result<Superblock> truncated = ReadSuperblock(path);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  EXPECT_NE(truncated.status().message().find("maructl mkpool"), std::string::npos);
  unlink(path.c_str());
  options.force = false;
  options.size = 4096;
  EXPECT_EQ(FormatPool(path, options).status().errnum(), EINVAL);  // too small
  unlink(path.c_str());
}

// The pool says how its hosts keep caches coherent; pools formatted before
// it said so read as hw (they were made for coherent memory), and a mode
// this build does not know is refused rather than guessed.
TEST(FormatPool, KeepsTheCoherenceAndReadsOlderPoolsAsHw) {
  std::string path = "/dev/shm/" + maru_test::UniqueName("maru-coherence") + ".pool";
  FormatOptions options;
  options.size = 8 << 20;
  options.coherence = Coherence::kFlush;
  ASSERT_TRUE(FormatPool(path, options).ok());
  Result<Superblock> flush = ReadSuperblock(path);
  ASSERT_TRUE(flush.ok()) << flush.status().ToString();
  EXPECT_EQ(flush->coherence, Coherence::kFlush);
  EXPECT_NE(flush->Describe().find("coherence:    flush"), std::string::npos);
  EXPECT_FALSE(maru_test::MakePoolPredateCoherence(path));  // only a hw pool predates it

  options.coherence = Coherence::kHw;
  options.force = true;
  ASSERT_TRUE(FormatPool(path, options).ok());
  ASSERT_TRUE(maru_test::MakePoolPredateCoherence(path));
  Result<Superblock> old = ReadSuperblock(path);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->coherence, Coherence::kHw);
  EXPECT_EQ(old->size, 8u << 20);
  unlink(path.c_str());

  Superblock sb = *old;
  std::vector<uint8_t> buf(kSuperblockBytes);
  sb.coherence = static_cast<Coherence>(7);
  sb.Encode(buf.data());
  Result<Superblock> unknown = Superblock::Decode(buf.data(), sb.size);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("coherence"), std::string::npos);
  EXPECT_EQ(ParseCoherence("hw").value(), Coherence::kHw);
  EXPECT_EQ(ParseCoherence("flush").value(), Coherence::kFlush);
  EXPECT_FALSE(ParseCoherence("bogus").ok());
}

TEST(FormatPool, ReservesTheControlPageAndRegionsBeforeTheData) {
  std::string path = "/dev/shm/" + maru_test::UniqueName("maru-regions") + ".pool";
  FormatOptions options;
  options.size = 16 << 20;
  options.index_bytes = (1 << 20) + 1;  // rounded up to the alignment
  options.log_bytes = 512 << 10;
  Result<Superblock> sb = FormatPool(path, options);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->control_offset, kSuperblockBytes);
  EXPECT_GE(sb->index_offset, kSuperblockBytes + kControlBytes);
  EXPECT_EQ(sb->index_bytes,
            (options.index_bytes + sb->alignment - 1) / sb->alignment * sb->alignment);
  EXPECT_GE(sb->log_offset, sb->index_offset + sb->index_bytes);
  EXPECT_LE(sb->log_offset + sb->log_bytes, sb->data_offset);
  EXPECT_EQ(sb->data_offset % sb->unit, 0u);
  Result<Superblock> read = ReadSuperblock(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->index_offset, sb->index_offset);
  EXPECT_EQ(read->log_bytes, sb->log_bytes);
  EXPECT_NE(read->Describe().find("log:          512K at"), std::string::npos) << read->Describe();

  // A region reaching into the data, or two overlapping, is refused even
  // with a valid CRC: the server would hand those bytes out as chunks.
  std::vector<uint8_t> buf(kSuperblockBytes);
  Superblock bad = *sb;
  bad.log_bytes = sb->data_offset;
  bad.Encode(buf.data());
  Result<Superblock> into_data = Superblock::Decode(buf.data(), sb->size);
  ASSERT_FALSE(into_data.ok());
  EXPECT_NE(into_data.status().message().find("overlaps"), std::string::npos);
  bad = *sb;
  bad.log_offset = sb->index_offset;
  bad.Encode(buf.data());
  EXPECT_FALSE(Superblock::Decode(buf.data(), sb->size).ok());

  // A pool formatted before the regions existed has none, and no control page.
  options.index_bytes = options.log_bytes = 0;
  options.force = true;
  ASSERT_TRUE(FormatPool(path, options).ok());
  ASSERT_TRUE(maru_test::MakePoolPredateRegions(path));
  Result<Superblock> old = ReadSuperblock(path);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->control_offset, 0u);
  EXPECT_EQ(old->index_bytes, 0u);
  EXPECT_EQ(old->log_bytes, 0u);
  unlink(path.c_str());
}

// The fence between leaders, seen by two processes mapping one pool: the
// epoch only grows, and a server that led before finds out it no longer does.
TEST(PoolControl, TheFenceOnlyGrowsAndTellsAnOldLeaderItLost) {
  std::string path = "/dev/shm/" + maru_test::UniqueName("maru-control") + ".pool";
  FormatOptions options;
  options.size = 4 << 20;
  Result<Superblock> sb = FormatPool(path, options);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto *base = static_cast<uint8_t *>(
      mmap(nullptr, sb->data_offset, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(base, MAP_FAILED);
  Result<PoolControl> control = PoolControl::At(base, *sb);
  ASSERT_TRUE(control.ok()) << control.status().ToString();
  EXPECT_EQ(control->FenceEpoch(), 0u);  // a fresh pool: nobody led it
  ASSERT_TRUE(control->RaiseFence(5).ok());
  EXPECT_TRUE(control->Holds(5));
  control->SetLeader({5, "a", "tcp://10.0.0.1:7000", 1});

  pid_t child = fork();  // a newer leader, in another process
  if (child == 0) {
    Result<PoolControl> mine = PoolControl::At(base, *sb);
    _exit(mine.ok() && mine->RaiseFence(9).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(status, 0);
  EXPECT_FALSE(control->Holds(5));
  Status late = control->RaiseFence(5);
  EXPECT_EQ(late.errnum(), ESTALE);
  EXPECT_NE(late.message().find("ahead"), std::string::npos) << late.message();
  LeaderRecord leader = control->Leader();
  EXPECT_EQ(leader.id, "a");
  EXPECT_EQ(leader.endpoint, "tcp://10.0.0.1:7000");

  // A record left halfway (its writer died) is not waited on forever.
  reinterpret_cast<std::atomic<uint64_t> *>(base + sb->control_offset)[1].fetch_or(1);
  EXPECT_EQ(control->Leader().id, "");
  munmap(base, sb->data_offset);

  ASSERT_TRUE(maru_test::MakePoolPredateRegions(path));
  Result<Superblock> old = ReadSuperblock(path);
  ASSERT_TRUE(old.ok());
  Result<PoolControl> none = PoolControl::At(base, *old);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("mkpool"), std::string::npos);
  unlink(path.c_str());
}

TEST(FormatPool, BindsAFilePoolToANumaNode) {
  std::string path = "/dev/shm/" + maru_test::UniqueName("maru-numa") + ".pool";
  FormatOptions options;
  options.size = 8 << 20;
  options.numa_node = 0;  // every machine has node 0
  Result<Superblock> sb = FormatPool(path, options);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(ReadSuperblock(path)->numa_node, 0);
  unlink(path.c_str());
  options.numa_node = 4096;
  EXPECT_EQ(FormatPool(path, options).status().errnum(), EINVAL);
  unlink(path.c_str());
}

TEST(FormatPool, PlainFileWithoutSuperblockIsRefused) {
  std::string path = "/dev/shm/" + maru_test::UniqueName("maru-blank") + ".pool";
  int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  close(fd);
  Result<std::unique_ptr<PoolDevice>> dev = PoolDevice::Open(path, {});
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("maructl mkpool"), std::string::npos);
  unlink(path.c_str());
}

}  // namespace
}  // namespace maru
