// Whether a client prefaults its pool mapping (maru_connect_opts.populate,
// MARU_POPULATE): a large or sparse pool must not be faulted in by every
// client that connects. Measured by what the kernel says, not by time: the
// pool file's allocated blocks and the mapping's resident pages.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "harness.h"
#include "maru_direct.h"

namespace {

using maru_test::Server;
using maru_test::TestPool;

constexpr uint64_t kMiB = 1ull << 20;

uint64_t AllocatedBytes(const std::string &path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// Resident bytes of this process's mapping that starts at `base`.
uint64_t MappedResident(const void *base) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  const uintptr_t want = reinterpret_cast<uintptr_t>(base);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    // A mapping's first line is "lo-hi perms ..."; its fields are "Name: value".
    if (sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2)
      in = lo == want;
    else if (in && line.rfind("Rss:", 0) == 0)
      return std::stoull(line.substr(4)) * 1024;
  }
  ADD_FAILURE() << "no mapping at " << base;
  return 0;
}

// Sets or clears MARU_POPULATE for one scope.
class PopulateEnv {
 public:
  explicit PopulateEnv(std::optional<std::string> value) {
    if (const char *v = getenv("MARU_POPULATE")) saved_ = v;
    if (value)
      setenv("MARU_POPULATE", value->c_str(), 1);
    else
      unsetenv("MARU_POPULATE");
  }
  ~PopulateEnv() {
    if (saved_)
      setenv("MARU_POPULATE", saved_->c_str(), 1);
    else
      unsetenv("MARU_POPULATE");
  }

 private:
  std::optional<std::string> saved_;
};

// A connection with `populate`, and the resident bytes of its mapping.
struct Connected {
  maru_t *m = nullptr;
  int rc = 0;
  uint64_t resident = 0, length = 0;
  Connected(const Server &server, int populate) {
    maru_connect_opts_t opts{};
    opts.populate = populate;
    rc = maru_connect_ex(server.address().c_str(), &opts, &m);
    if (rc) return;
    maru_region_t region{};
    size_t count = 0;
    EXPECT_EQ(maru_pool_regions(m, &region, 1, &count), 0);
    EXPECT_EQ(count, 1u);
    length = region.length;
    resident = MappedResident(region.base);
  }
  ~Connected() {
    if (m) maru_disconnect(m);
  }
};

// A pool file formatted sparse (no memory allocated up front).
class SparsePool {
 public:
  explicit SparsePool(uint64_t size) {
    path_ = "/dev/shm/" + maru_test::UniqueName("maru-populate") + ".pool";
    std::string out;
    int rc = maru_test::Run(maru_test::MaructlBinary() + " mkpool " + path_ + " --size " +
                                std::to_string(size) + " --unit 65536 --mode 666 --sparse",
                            &out);
    EXPECT_EQ(rc, 0) << out;
  }
  ~SparsePool() {
    unlink(path_.c_str());
    unlink((path_ + ".index").c_str());
  }
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

TEST(Populate, ASparsePoolIsNotFaultedInByDefault) {
  const uint64_t size = 512 * kMiB;
  SparsePool pool(size);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  PopulateEnv env(std::nullopt);
  const uint64_t before = AllocatedBytes(pool.path());
  ASSERT_LT(before, size / 8);
  {
    Connected c(server, MARU_POPULATE_AUTO);
    ASSERT_EQ(c.rc, 0) << maru_strerror(c.rc);
    EXPECT_LT(c.resident, size / 8);
    // It still stores: the pages a chunk touches are faulted in then.
    maru_chunk_t *chunk = nullptr;
    ASSERT_EQ(maru_create(c.m, "/p/a", kMiB, &chunk), 0);
    memset(maru_chunk_data(chunk), 7, kMiB);
    ASSERT_EQ(maru_seal(chunk), 0);
    maru_release(chunk);
  }
  EXPECT_LT(AllocatedBytes(pool.path()), before + size / 8);
  // Asked for, the whole pool is prefaulted (and so allocated).
  Connected always(server, MARU_POPULATE_ALWAYS);
  ASSERT_EQ(always.rc, 0) << maru_strerror(always.rc);
  EXPECT_EQ(always.resident, always.length);
  EXPECT_GE(AllocatedBytes(pool.path()), size);
}

TEST(Populate, AnAllocatedSmallPoolIsPrefaultedUnlessTheEnvOrTheOptionSaysNo) {
  TestPool pool(64 * kMiB);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  {
    PopulateEnv env(std::nullopt);
    Connected c(server, MARU_POPULATE_AUTO);
    ASSERT_EQ(c.rc, 0) << maru_strerror(c.rc);
    EXPECT_EQ(c.resident, c.length);
    Connected never(server, MARU_POPULATE_NEVER);
    ASSERT_EQ(never.rc, 0);
    EXPECT_LT(never.resident, never.length / 4);
  }
  {
    PopulateEnv env("0");
    Connected c(server, MARU_POPULATE_AUTO);
    ASSERT_EQ(c.rc, 0);
    EXPECT_LT(c.resident, c.length / 4);
    Connected always(server, MARU_POPULATE_ALWAYS);  // the option wins over the env
    ASSERT_EQ(always.rc, 0);
    EXPECT_EQ(always.resident, always.length);
  }
  Connected bad(server, 7);
  EXPECT_EQ(bad.rc, -EINVAL);
  EXPECT_EQ(bad.m, nullptr);
}

}  // namespace
