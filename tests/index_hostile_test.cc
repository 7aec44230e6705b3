// The shared-memory index against other users: regions of lease slots only
// for those who may open the index and never all to one of them, a header
// the group may write but the server does not trust, a name squatted
// before the start, and reads and removals that count for who holds them.

#include <fcntl.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "index_helpers.h"
#include "index_layout.h"
#include "maru_direct_internal.h"
#include "pattern.h"

namespace maru_test {
namespace {

// Regions of lease slots go only to sessions whose peer can open the index
// (root, the pool's owner, its group). A uid outside them opening many
// sessions gets none, and leaves every region for the clients that can use
// them: here it tries to take all 8.
TEST(IndexRegions, AUidThatCannotOpenTheIndexCannotTakeTheRegions) {
  TestPool pool{32ull << 20};
  // Only the pool's owner and group may map it (and so use its index).
  ASSERT_EQ(chmod(pool.path().c_str(), 0660), 0);
  Server server{pool.path(), {"--index-sessions", "8", "--session-timeout-ms", "60000"}};
  ASSERT_TRUE(server.Start());
  struct stat st;
  ASSERT_EQ(stat(pool.path().c_str(), &st), 0);
  ASSERT_NE(st.st_gid, 1001u);
  std::string out;
  ASSERT_EQ(maru_test::Run("setpriv --reuid=1001 --regid=1001 --clear-groups " +
                               maru_test::BinDir("tests/probe_client") + " " + server.address() +
                               " sessions 20",
                           &out),
            0)
      << out;
  EXPECT_NE(out.find("regions 0"), std::string::npos) << out;
  // An honest client still gets one: it opens with the server stopped.
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/honest/a"), 0);
  {
    Frozen frozen(server);
    ASSERT_TRUE(frozen.ok());
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_open(m, "/honest/a", &c), 0);
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), kSize, "/honest/a"));
    maru_release(c);
  }
  maru_disconnect(m);
}

// Leases taken in slots count against --max-leases like granted ones: a
// session of a uid in the pool's group holds 3, through the index or not.
TEST(IndexRegions, SlotLeasesCountAgainstMaxLeases) {
  TestPool pool{32ull << 20};
  Server server{pool.path(), {"--max-leases", "3"}};
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  std::string paths;
  for (const char *name : {"a", "b", "c", "d", "e"}) {
    ASSERT_EQ(Store(m, std::string("/max/") + name, kSize, 0644), 0);
    paths += std::string(" /max/") + name;
  }
  maru_disconnect(m);
  struct stat st;
  ASSERT_EQ(stat(pool.path().c_str(), &st), 0);
  const std::string as_user =
      "setpriv --reuid=1000 --regid=1000 --groups=" + std::to_string(st.st_gid) + " ";
  for (const std::string env : {"", "MARU_INDEX=0 "}) {
    std::string out;
    EXPECT_EQ(
        maru_test::Run(
            env + as_user + maru_test::ClientCommand(server.address(), "lookup 3" + paths), &out),
        0)
        << env << out;
  }
}

// A uid in the pool's group (it may map the pool and write the index).
std::string AsGroupMember(const TestPool &pool) {
  struct stat st;
  if (stat(pool.path().c_str(), &st) != 0) return "false ";
  return "setpriv --reuid=1000 --regid=1000 --groups=" + std::to_string(st.st_gid) + " ";
}

int Probe(const std::string &prefix, const std::string &address, const std::string &args,
          std::string *out) {
  return maru_test::Run(
      prefix + maru_test::BinDir("tests/probe_client") + " " + address + " " + args, out);
}

// The hits the server counts for `path` (opens by message and drained
// index reads), or -1.
long Hits(const Server &server, const std::string &path) {
  std::string out = Maructl("stat " + path + " --json --server " + server.address());
  size_t at = out.find("\"hits\":");
  return at == std::string::npos ? -1 : strtol(out.c_str() + at + 7, nullptr, 10);
}

// The header is the clients' copy of the layout; a member of the pool's
// group may write any of it. The server keeps its own and goes on serving
// (a huge `entries` crashed the next seal; a forged `regions_offset` had
// the next session's token written wherever it pointed).
TEST(IndexHostile, TheServerIgnoresWhatTheGroupWritesInTheHeader) {
  TestPool pool{32ull << 20, 64u << 10, "", "--index-size 0"};  // an index file
  Server server{pool.path(), {"--index-sessions", "8"}};
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/h/before"), 0);
  const std::string index = pool.path() + ".index";
  for (const char *field :
       {"entries 0x10000000000", "entries_offset 0x400000000000", "regions 0x80000000",
        "slots_per_region 0x80000000", "regions_offset 0x400000000000", "key0 1"}) {
    std::string out;
    ASSERT_EQ(
        Probe(AsGroupMember(pool), server.address(), "index-set " + index + " " + field, &out), 0)
        << out;
  }
  // Seals enter chunks, opens lease them, a new session takes a region, an
  // unlink scans the slots: all as before.
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(Store(m, "/h/after" + std::to_string(i)), 0) << server.log();
  maru_t *other = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &other), 0) << server.log();
  maru_chunk_t *c = nullptr;
  ASSERT_EQ(maru_open(other, "/h/after3", &c), 0);
  EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), kSize, "/h/after3"));
  maru_release(c);
  ASSERT_EQ(maru_unlink(m, "/h/after3"), 0);
  ASSERT_EQ(maru_unlink(m, "/h/before"), 0);
  maru_disconnect(other);
  maru_disconnect(m);
  std::string df;
  EXPECT_EQ(maru_test::Run(maru_test::MaructlBinary() + " df --server " + server.address(), &df), 0)
      << df << server.log();
}

// A region passes to a new session with its ring of read notes emptied: a
// former owner's notes (here forged, stamped a day ahead) made every later
// read in that region look older than them, and eviction ignored them.
TEST(IndexReads, ANewOwnerOfARegionHasEveryReadCounted) {
  TestPool pool{32ull << 20, 64u << 10, "", "--index-size 0"};  // an index file
  Server server{pool.path(), {"--index-sessions", "1"}};
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/j/x"), 0);
  ASSERT_EQ(Store(m, "/j/y"), 0);
  maru_disconnect(m);  // its region (the only one) is free again
  std::string out;
  ASSERT_EQ(Probe(AsGroupMember(pool), server.address(),
                  "index-forge-notes " + pool.path() + ".index 0", &out),
            0)
      << out;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  auto read = [&](const char *path) {
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_open(m, path, &c), 0);
    maru_release(c);
  };
  read("/j/x");
  EXPECT_TRUE(maru_test::WaitFor([&] { return Hits(server, "/j/x") == 1; }));
  read("/j/y");
  EXPECT_TRUE(maru_test::WaitFor([&] { return Hits(server, "/j/y") == 1; }))
      << "a read after the forged notes was not counted";
  maru_disconnect(m);
}

// One member of the pool's group opening many sessions takes at most a
// quarter of the regions (--index-sessions-per-uid): the other clients of
// the group still lease through the index (with the server stopped).
TEST(IndexRegions, OneMemberOfTheGroupCannotTakeEveryRegion) {
  TestPool pool{32ull << 20};
  Server server{pool.path(), {"--index-sessions", "8", "--session-timeout-ms", "60000"}};
  ASSERT_TRUE(server.Start());
  std::string out;
  ASSERT_EQ(Probe(AsGroupMember(pool), server.address(), "sessions 20", &out), 0) << out;
  EXPECT_NE(out.find("regions 2"), std::string::npos) << out;
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/honest/a"), 0);
  {
    Frozen frozen(server);
    ASSERT_TRUE(frozen.ok());
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_open(m, "/honest/a", &c), 0);
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), kSize, "/honest/a"));
    maru_release(c);
  }
  maru_disconnect(m);
}

// Runs a shell command as uid 1000 with no groups: any local user.
int AsAnyUser(const std::string &command, std::string *out = nullptr) {
  return maru_test::Run("setpriv --reuid=1000 --regid=1000 --clear-groups sh -c '" + command + "'",
                        out);
}

// True if `m` opens `path` with the server stopped: through the index.
bool OpensThroughTheIndex(const Server &server, maru_t *m, const std::string &path) {
  Frozen frozen(server);
  if (!frozen.ok()) return false;
  maru_chunk_t *c = nullptr;
  if (maru_open(m, path.c_str(), &c) != 0) return false;
  const bool same = maru_test::CheckPattern(maru_chunk_data(c), kSize, path);
  maru_release(c);
  return same;
}

// Any user may make names in /dev/shm: one made before the server starts
// (where the index used to be made, then renamed into place) left the
// server without an index. It is made unnamed now, and linked in.
TEST(IndexSquat, ANameMadeBeforeTheStartDoesNotDisableTheIndex) {
  TestPool pool{32ull << 20, 64u << 10, "", "--index-size 0"};  // an index file
  const std::string squat = pool.path() + ".index.new";
  ASSERT_EQ(AsAnyUser("mkdir " + squat + " && touch " + squat + "/x"), 0);
  Server server{pool.path()};
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/sq/a"), 0);
  EXPECT_TRUE(OpensThroughTheIndex(server, m, "/sq/a")) << server.log();
  maru_disconnect(m);
  server.Stop();
  maru_test::Run("rm -rf " + squat);
}

// The index's own name taken by another user's directory: the server says
// so loudly and serves the index under a name of its own, which clients
// are told; a clean stop removes it.
TEST(IndexSquat, TheIndexsNameTakenIsReportedAndTheIndexServesElsewhere) {
  TestPool pool{32ull << 20, 64u << 10, "", "--index-size 0"};  // an index file
  const std::string squat = pool.path() + ".index";
  ASSERT_EQ(AsAnyUser("mkdir " + squat), 0);
  Server server{pool.path()};
  ASSERT_TRUE(server.Start());
  EXPECT_NE(server.log().find("cannot put the shared-memory index at " + squat), std::string::npos)
      << server.log();
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/sq/b"), 0);
  EXPECT_TRUE(OpensThroughTheIndex(server, m, "/sq/b")) << server.log();
  maru_disconnect(m);
  server.Stop();
  glob_t left{};
  EXPECT_EQ(glob((pool.path() + ".index.*").c_str(), 0, nullptr, &left), GLOB_NOMATCH);
  globfree(&left);
  rmdir(squat.c_str());
}

// A file at the index's name that this server's user does not own is
// never written: a server used to map whatever file it found there and
// mark it dead, so that root wrote into another user's file.
TEST(IndexSquat, AnotherUsersFileAtTheNameIsNeitherWrittenNorUsed) {
  TestPool pool{32ull << 20, 64u << 10, "", "--index-size 0"};  // an index file
  const std::string squat = pool.path() + ".index", kept = pool.path() + ".kept";
  {
    // A live index's header, as a previous server would have left it.
    std::string header(maru::index::kPage, '\0');
    auto *h = reinterpret_cast<maru::index::Header *>(header.data());
    h->magic = maru::index::kMagic;
    h->state.store(maru::index::kLive);
    std::ofstream(kept, std::ios::binary) << header;
  }
  ASSERT_EQ(chown(kept.c_str(), 1000, 1000), 0);
  ASSERT_EQ(AsAnyUser("ln " + kept + " " + squat), 0);  // the user's own file, twice
  Server server{pool.path()};
  ASSERT_TRUE(server.Start());
  struct stat st;
  ASSERT_EQ(stat(squat.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);  // replaced by the server's own
  const std::string after = ReadFile(kept);
  ASSERT_EQ(after.size(), maru::index::kPage);
  EXPECT_EQ(reinterpret_cast<const maru::index::Header *>(after.data())->state.load(),
            maru::index::kLive);
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/sq/c"), 0);
  EXPECT_TRUE(OpensThroughTheIndex(server, m, "/sq/c"));
  maru_disconnect(m);
  server.Stop();
  unlink(kept.c_str());
}

// A removed chunk that a member of the pool's group still reads through a
// lease slot (no message: the server finds the slot when the chunk goes)
// counts for that member's uid until it lets go.
TEST(IndexRegions, ARemovedChunkHeldInALeaseSlotCountsForItsReader) {
  TestPool pool{32ull << 20};
  Server server{pool.path()};
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/slot/a", kSize, 0644), 0);
  ASSERT_EQ(Maructl("quota set --uid 1000 1G --server " + server.address()), "");
  maru_test::TempDir dir;
  const std::string out = dir.path() + "/out", go = dir.path() + "/go";
  pid_t reader =
      Spawn(AsGroupMember(pool) +
                maru_test::ClientCommand(server.address(),
                                         "hold-read /slot/a " + std::to_string(kSize) + " " + go),
            out);
  ASSERT_TRUE(maru_test::WaitFor([&] { return ReadFile(out).find("opened") != std::string::npos; }))
      << ReadFile(out);
  ASSERT_EQ(maru_unlink(m, "/slot/a"), 0);
  auto used = [&] {
    const std::string q = Maructl("quota show --json --server " + server.address());
    const size_t at = q.find("\"used\":");
    return at == std::string::npos ? ~0ull : strtoull(q.c_str() + at + 7, nullptr, 10);
  };
  EXPECT_EQ(used(), kSize);
  std::ofstream(go).put('x');
  EXPECT_EQ(maru_test::Wait(reader), 0) << ReadFile(out);
  EXPECT_TRUE(maru_test::WaitFor([&] { return used() == 0; })) << used();
  maru_disconnect(m);
}

}  // namespace
}  // namespace maru_test
