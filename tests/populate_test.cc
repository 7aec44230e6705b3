// Whether a client prefaults its pool mapping (maru_connect_opts.populate,
// MARU_POPULATE): a large or sparse pool must not be faulted in by every
// client that connects. Measured by what the kernel says, not by time: the
// pool file's allocated blocks and the mapping's resident pages. And pools
// on huge pages (hugetlbfs, a tmpfs mounted huge=always), mapped in them.
#include <gtest/gtest.h>
#include <sys/mount.h>
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
#include "pattern.h"

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

// Bytes of the mapping around `p` that the kernel maps with huge pages:
// its hugetlb pages on hugetlbfs, its PMD mappings on tmpfs (smaps).
uint64_t HugeMapped(const void *p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  uint64_t huge = 0;
  const uintptr_t want = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      if (in) break;  // past the mapping
      in = lo <= want && want < hi;
      continue;
    }
    for (const char *field : {"ShmemPmdMapped:", "Shared_Hugetlb:", "Private_Hugetlb:"})
      if (in && line.rfind(field, 0) == 0) huge += std::stoull(line.substr(strlen(field))) * 1024;
  }
  return huge;
}

// Huge pages the kernel could still hand out for hugetlbfs.
uint64_t FreeHugePages() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line))
    if (line.rfind("HugePages_Free:", 0) == 0) return std::stoull(line.substr(15));
  return 0;
}

// A filesystem mounted for one test on a directory of its own (root
// only), unmounted at its end.
class TestMount {
 public:
  TestMount(const char *type, const char *options) {
    if (mount(type, dir_.path().c_str(), type, 0, options) == 0) mounted_ = true;
  }
  ~TestMount() {
    if (mounted_) umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  std::string path(const std::string &name) const { return dir_.path() + "/" + name; }

 private:
  maru_test::TempDir dir_;
  bool mounted_ = false;
};

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

// `maructl mkpool` on hugetlbfs (which takes no write()) and on a tmpfs
// mounted huge=always gives 2 MiB units; a server runs on the pool (its
// index in /dev/shm for hugetlbfs, where files are whole huge pages), and a
// client's chunks are mapped in 2 MiB pages. A unit smaller than a huge
// page is refused on hugetlbfs.
TEST(HugePages, PoolsOnHugetlbfsAndHugeTmpfsAreMappedInHugePages) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a filesystem needs root";
  struct Kind {
    const char *type, *options;
  };
  std::string not_tried;  // why hugetlbfs was not, where it was not
  for (Kind k : {Kind{"tmpfs", "huge=always,size=128m"}, Kind{"hugetlbfs", "pagesize=2M"}}) {
    SCOPED_TRACE(k.type);
    const bool hugetlbfs = std::string(k.type) == "hugetlbfs";
    if (hugetlbfs && FreeHugePages() < 40) {
      not_tried = "no hugetlbfs pool: " + std::to_string(FreeHugePages()) +
                  " free huge pages (vm.nr_hugepages)";
      continue;
    }
    TestMount fs(k.type, k.options);
    ASSERT_TRUE(fs.mounted()) << strerror(errno);
    const std::string pool = fs.path("pool"), mkpool = maru_test::MaructlBinary() + " mkpool ";
    std::string out;
    // With an index file (no region), whose place depends on the filesystem.
    ASSERT_EQ(maru_test::Run(mkpool + pool + " --size 64M --index-size 0", &out), 0) << out;
    EXPECT_NE(out.find("2M unit, 2M pages"), std::string::npos) << out;
    if (hugetlbfs) {
      EXPECT_NE(maru_test::Run(mkpool + fs.path("small") + " --size 8M --unit 64K", &out), 0);
      EXPECT_NE(out.find("at least the huge page size"), std::string::npos) << out;
    }
    Server server(pool);
    ASSERT_TRUE(server.Start()) << server.log();
    maru_t *m = nullptr;
    ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
    const uint64_t size = 8 * kMiB;
    std::string bytes(size, '\0');
    maru_test::FillPattern(bytes.data(), size, "/huge/a");
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_create(m, "/huge/a", size, &c), 0);
    ASSERT_EQ(maru_write_from(c, bytes.data(), 0, size), 0);
    ASSERT_EQ(maru_seal(c), 0);
    maru_release(c);
    ASSERT_EQ(maru_open(m, "/huge/a", &c), 0);
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), size, "/huge/a"));
    EXPECT_GE(HugeMapped(maru_chunk_data(c)), size);
    maru_release(c);
    maru_disconnect(m);
    EXPECT_EQ(access((pool + ".index").c_str(), F_OK) == 0, !hugetlbfs);
    server.Stop();
  }
  // The huge tmpfs half ran; the skip tells the summary the hugetlbfs half did not.
  if (!not_tried.empty()) GTEST_SKIP() << not_tried;
}

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
