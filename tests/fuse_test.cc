// maru-fuse, really mounted, against a real server: POSIX tools, the two
// doors (mount and library) onto one namespace, several mounts, failures.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <algorithm>

#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "pattern.h"

namespace {

using maru_test::FuseMount;
using maru_test::Server;
using maru_test::TestPool;

std::string Slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string &path, const std::string &data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

class FuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    mount_ = std::make_unique<FuseMount>(server_.address());
    ASSERT_TRUE(mount_->Start());
  }
  void TearDown() override { mount_.reset(); }

  std::string M(const std::string &rel) { return *mount_ / rel; }

  // Runs a shell script with $M set to the mount; fails the test with its
  // output if a command in it fails. `set -e` checks only commands that
  // stand alone: not those before a `&&`, nor a `! cmd`, so the script puts
  // one command per line and says `expect_fail cmd` for what must fail.
  void Shell(const std::string &script) {
    std::string out;
    int rc = maru_test::Run("M='" + mount_->path() + "'; set -e; " + kExpectFail + script, &out);
    EXPECT_EQ(rc, 0) << script << "\n" << out;
  }
  static constexpr const char *kExpectFail =
      "expect_fail() { if \"$@\"; then echo \"expected to fail, but succeeded: $*\"; exit 1; "
      "fi; }; ";

  // Runs `script` as Shell does, as the real user and group `uid` with no
  // supplementary groups: a process of another user on the same mount
  // (maru-fuse mounts with allow_other when run as root, as here). $M is
  // `mount`, the default one if empty.
  void ShellAs(uid_t uid, const std::string &script, const std::string &mount = "") {
    const std::string file = scripts_.path() + "/script" + std::to_string(++scripts_run_);
    WriteFile(file, "M='" + (mount.empty() ? mount_->path() : mount) + "'; set -e; " + kExpectFail +
                        script);
    const std::string id = std::to_string(uid);
    std::string out;
    int rc = maru_test::Run(
        "setpriv --reuid=" + id + " --regid=" + id + " --clear-groups sh " + file, &out);
    EXPECT_EQ(rc, 0) << "as uid " << uid << ":\n" << script << "\n" << out;
  }
  maru_test::TempDir scripts_;  // 0755: other users read the scripts
  int scripts_run_ = 0;

  TestPool pool_{256ull << 20};
  Server server_{pool_.path(), {"--session-timeout-ms", "3000", "--heartbeat-ms", "500"}};
  std::unique_ptr<FuseMount> mount_;
};

TEST_F(FuseTest, LibraryChunksAreFilesAndFilesAreChunks) {
  maru_t *m;
  ASSERT_EQ(maru_connect(server_.address().c_str(), &m), 0);
  maru_chunk_t *c;
  ASSERT_EQ(maru_create(m, "/llama/abc", 100000, &c), 0);
  maru_test::FillPattern(maru_chunk_data(c), 100000, "/llama/abc");
  ASSERT_EQ(maru_seal(c), 0);
  struct stat st;
  ASSERT_EQ(stat(M("llama/abc").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 100000);
  std::string bytes = Slurp(M("llama/abc"));
  ASSERT_EQ(bytes.size(), 100000u);
  EXPECT_EQ(memcmp(bytes.data(), maru_chunk_data(c), 100000), 0);
  maru_release(c);

  // The other way: a file written through the mount, opened as a chunk.
  std::string data(300000, '\0');
  maru_test::FillPattern(data.data(), data.size(), "through-fuse");
  ASSERT_EQ(mkdir(M("written").c_str(), 0755), 0);
  WriteFile(M("written/f.data"), data);
  ASSERT_EQ(maru_open(m, "/written/f.data", &c), 0);
  ASSERT_EQ(maru_chunk_size(c), data.size());
  EXPECT_EQ(memcmp(maru_chunk_data(c), data.data(), data.size()), 0);
  EXPECT_EQ(maru_verify(c), 0);  // sealed through FUSE with an xxh3 checksum
  maru_release(c);
  maru_disconnect(m);
}

TEST_F(FuseTest, PosixToolsWorkAsOnAnyFilesystem) {
  Shell(R"SH(
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    mkdir -p "$src/tree/a/b"
    head -c 3000000 /dev/urandom > "$src/tree/a/b/big"
    echo hi > "$src/tree/a/small"
    mkdir -p "$M/x/y/z"
    test -d "$M/x/y/z"
    cp "$src/tree/a/b/big" "$M/x/big"
    cmp "$src/tree/a/b/big" "$M/x/big"
    cp "$M/x/big" "$src/back"
    cmp "$src/tree/a/b/big" "$src/back"
    cat "$M/x/big" | cmp - "$src/tree/a/b/big"
    ls -l "$M/x" | grep -q ' big$'
    test "$(stat -c %s "$M/x/big")" = 3000000
    test "$(find "$M/x" -type f | wc -l)" = 1
    test "$(find "$M/x" -type d | wc -l)" = 3
    du -s "$M/x" | awk '{exit !($1 >= 2900)}'
    df "$M" | tail -1 | grep -q maru
    expect_fail rmdir "$M/x"
    mv "$M/x/big" "$M/x/moved"
    test ! -e "$M/x/big"
    cmp "$M/x/moved" "$src/back"
    echo one > "$M/x/target"
    echo two > "$M/x/other"
    mv "$M/x/other" "$M/x/target"
    test "$(cat "$M/x/target")" = two
    echo first > "$M/x/t"
    echo second > "$M/x/t"
    test "$(cat "$M/x/t")" = second
    echo more >> "$M/x/t"
    test "$(cat "$M/x/t")" = "$(printf 'second\nmore')"
    echo tmp > "$M/x/.key.tmp"
    mv "$M/x/.key.tmp" "$M/x/key.data"
    test "$(cat "$M/x/key.data")" = tmp
    tar -C "$src" -cf - tree | tar -C "$M" -xf -
    diff -r "$src/tree" "$M/tree"
    tar -C "$M" -cf "$src/out.tar" tree
    mkdir "$src/untar"
    tar -C "$src/untar" -xf "$src/out.tar"
    diff -r "$src/tree" "$src/untar/tree"
    rsync -a "$src/tree/" "$M/synced/"
    diff -r "$src/tree" "$M/synced"
    touch "$M/empty"
    test -f "$M/empty"
    test ! -s "$M/empty"
    truncate -s 10 "$M/x/t"
    test "$(stat -c %s "$M/x/t")" = 10
    chmod 600 "$M/x/t"
    test "$(stat -c %a "$M/x/t")" = 600
    rm -r "$M/x"
    test ! -e "$M/x"
  )SH");
}

// fsx-style: random writes, reads, truncates, fsyncs and reopens of one
// file, checked against a model in memory, through the mount's write paths
// (holes, growth, shrinking, new versions after fsync and on reopen).
void Fsx(const std::string &path, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string model;
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  for (int step = 0; step < 600; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {  // write somewhere, maybe past the end (a hole)
      size_t off = rng() % (model.size() + 200000), len = 1 + rng() % 70000;
      std::string data(len, '\0');
      for (char &ch : data) ch = static_cast<char>(rng());
      ASSERT_EQ(pwrite(fd, data.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
      if (model.size() < off + len) model.resize(off + len, '\0');
      model.replace(off, len, data);
    } else if (op < 7) {  // read back a range
      size_t off = model.empty() ? 0 : rng() % model.size(), len = rng() % 100000;
      std::string got(len, '\0');
      ssize_t n = pread(fd, got.data(), len, static_cast<off_t>(off));
      ASSERT_EQ(n, static_cast<ssize_t>(std::min(len, model.size() - std::min(off, model.size()))));
      ASSERT_EQ(got.substr(0, static_cast<size_t>(n)), model.substr(off, static_cast<size_t>(n)))
          << "step " << step;
    } else if (op < 8) {  // truncate, shorter or longer
      size_t size = rng() % (model.size() + 100000);
      ASSERT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
      model.resize(size, '\0');
    } else if (op < 9) {  // fsync publishes; the next write starts a new version
      ASSERT_EQ(fsync(fd), 0);
      ASSERT_EQ(Slurp(path), model) << "step " << step;
    } else {  // close (publishes) and reopen (a new version on the next write)
      ASSERT_EQ(close(fd), 0);
      ASSERT_EQ(Slurp(path), model) << "step " << step;
      fd = open(path.c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
    }
    struct stat st;
    ASSERT_EQ(fstat(fd, &st), 0);
    ASSERT_EQ(static_cast<size_t>(st.st_size), model.size()) << "step " << step;
  }
  ASSERT_EQ(close(fd), 0);
  EXPECT_EQ(Slurp(path), model);
}

TEST_F(FuseTest, RandomWritesReadsAndTruncatesMatchAModel) {
  const char *seed = getenv("MARU_FUZZ_SEED");
  Fsx(M("fsx"), seed ? strtoull(seed, nullptr, 10) : 99);
  FuseMount cached(server_.address(), "cached_writes");
  ASSERT_TRUE(cached.Start());
  Fsx(cached / "fsx-cached", seed ? strtoull(seed, nullptr, 10) + 1 : 100);
}

TEST_F(FuseTest, ReaddirShowsDotAndDotDotWithTheirInodes) {
  // readdir(3) hides entries whose inode is 0: ".." must carry the parent's.
  ASSERT_EQ(mkdir(M("outer").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(M("outer/inner").c_str(), 0755), 0);
  WriteFile(M("outer/inner/f"), "x");
  struct stat outer, inner;
  ASSERT_EQ(stat(M("outer").c_str(), &outer), 0);
  ASSERT_EQ(stat(M("outer/inner").c_str(), &inner), 0);
  DIR *d = opendir(M("outer/inner").c_str());
  ASSERT_NE(d, nullptr);
  std::map<std::string, ino_t> seen;
  while (dirent *e = readdir(d)) seen[e->d_name] = e->d_ino;
  closedir(d);
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen["."], inner.st_ino);
  EXPECT_EQ(seen[".."], outer.st_ino);
  EXPECT_NE(seen["f"], 0u);
}

TEST_F(FuseTest, ReadOnlyMmapSeesTheBytes) {
  std::string data(1 << 20, '\0');
  maru_test::FillPattern(data.data(), data.size(), "mmap");
  WriteFile(M("mapped"), data);
  int fd = open(M("mapped").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void *p = mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(memcmp(p, data.data(), data.size()), 0);
  munmap(p, data.size());
  close(fd);
}

// Pages of `fd` in the page cache (cachestat(2), Linux 6.5); -1 if the
// kernel cannot tell.
long CachedPages(int fd) {
  struct {
    uint64_t off, len;
  } range{0, 0};  // len 0: to the end
  struct {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } cs{};
  constexpr long kCachestat = 451;
  if (syscall(kCachestat, fd, &range, &cs, 0) != 0) return -1;
  return static_cast<long>(cs.nr_cache);
}

// Whether the kernel can mmap files opened for direct I/O (6.6 and later),
// which maru-fuse needs to read sealed files around the page cache.
bool KernelMapsDirectIo() {
  struct utsname u;
  int major = 0, minor = 0;
  return uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 6 || (major == 6 && minor >= 6));
}

TEST_F(FuseTest, SealedFilesAreReadFromThePoolNotCopiedIntoThePageCache) {
  std::string data(4 << 20, '\0');
  maru_test::FillPattern(data.data(), data.size(), "pool is the cache");
  WriteFile(M("chunk"), data);
  FuseMount cached(server_.address(), "cached_reads");
  ASSERT_TRUE(cached.Start());
  for (FuseMount *m : {mount_.get(), &cached}) {
    int fd = open((*m / "chunk").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    std::string got(data.size(), '\0');
    ASSERT_EQ(pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
    EXPECT_EQ(got, data);
    const long pages = CachedPages(fd);
    if (pages < 0 || !KernelMapsDirectIo()) {
      close(fd);
      GTEST_SKIP() << "this kernel cannot tell pages cached, or mmap direct I/O files";
    }
    if (m == &cached)
      EXPECT_GT(pages, 0) << "-o cached_reads reads through the page cache";
    else
      EXPECT_EQ(pages, 0) << "by default the pool is the only copy";
    // mmap works on either, and sees the bytes.
    void *p = mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_EQ(memcmp(p, data.data(), data.size()), 0);
    munmap(p, data.size());
    close(fd);
  }
}

// What readers see while a file is written, for a writer on `mine` (whose
// mount options differ between the two runs below).
void CheckWhatReadersSee(const std::string &address, FuseMount &mine, const std::string &dir) {
  FuseMount other(address);
  ASSERT_TRUE(other.Start());
  auto M = [&](const std::string &rel) { return mine / (dir + "/" + rel); };
  auto O = [&](const std::string &rel) { return other / (dir + "/" + rel); };
  ASSERT_EQ(mkdir(M("").c_str(), 0755), 0);
  maru_t *m;
  ASSERT_EQ(maru_connect(address.c_str(), &m), 0);
  WriteFile(M("v"), "old version");
  ASSERT_EQ(Slurp(O("v")), "old version");
  int fd = open(M("v").c_str(), O_RDWR | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "new bytes", 9, 0), 9);
  // The writer reads what it wrote.
  char buf[16] = {0};
  ASSERT_EQ(pread(fd, buf, sizeof(buf), 0), 9);
  EXPECT_STREQ(buf, "new bytes");
  // Other readers on the same mount share the file, as on a local disk.
  // (Opened here rather than in a child process: a child's exit closes its
  // inherited copy of `fd`, and any close publishes.)
  EXPECT_EQ(Slurp(M("v")), "new bytes");
  // Other mounts (other hosts) and the library see the sealed version.
  EXPECT_EQ(Slurp(O("v")), "old version");
  maru_chunk_t *c;
  ASSERT_EQ(maru_open(m, ("/" + dir + "/v").c_str(), &c), 0);
  EXPECT_EQ(std::string(static_cast<char *>(maru_chunk_data(c)), maru_chunk_size(c)),
            "old version");
  maru_release(c);
  // A file with no sealed version yet: busy for everyone but its mount.
  int fresh = open(M("fresh").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fresh, 0);
  ASSERT_EQ(write(fresh, "x", 1), 1);
  EXPECT_EQ(open(O("fresh").c_str(), O_RDONLY), -1);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(maru_open(m, ("/" + dir + "/fresh").c_str(), &c), -EBUSY);
  // The close publishes: everyone sees the new bytes.
  close(fresh);
  close(fd);
  EXPECT_EQ(Slurp(O("v")), "new bytes");
  EXPECT_EQ(Slurp(O("fresh")), "x");
  ASSERT_EQ(maru_open(m, ("/" + dir + "/v").c_str(), &c), 0);
  EXPECT_EQ(std::string(static_cast<char *>(maru_chunk_data(c)), maru_chunk_size(c)), "new bytes");
  maru_release(c);
  maru_disconnect(m);
}

TEST_F(FuseTest, WhatReadersSeeWhileAFileIsWritten) {
  CheckWhatReadersSee(server_.address(), *mount_, "direct-writes");
  FuseMount cached(server_.address(), "cached_writes");
  ASSERT_TRUE(cached.Start());
  CheckWhatReadersSee(server_.address(), cached, "cached-writes");
}

// The sealed version the library opens at `path`, as a string; "" if none.
std::string LibraryBytes(maru_t *m, const std::string &path) {
  maru_chunk_t *c;
  if (maru_open(m, path.c_str(), &c) != 0) return "";
  std::string bytes(static_cast<char *>(maru_chunk_data(c)), maru_chunk_size(c));
  EXPECT_EQ(maru_verify(c), 0);
  maru_release(c);
  return bytes;
}

TEST_F(FuseTest, FsyncPublishesWhatWasWrittenSoFar) {
  FuseMount other(server_.address());
  ASSERT_TRUE(other.Start());
  maru_t *m;
  ASSERT_EQ(maru_connect(server_.address().c_str(), &m), 0);
  int fd = open(M("synced").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "first", 5), 5);
  maru_chunk_t *c;
  EXPECT_EQ(maru_open(m, "/synced", &c), -EBUSY);
  // A reader's descriptor on the same mount does not publish the writer's file.
  int reader = open(M("synced").c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  EXPECT_EQ(fsync(reader), 0);
  EXPECT_EQ(maru_open(m, "/synced", &c), -EBUSY);
  // The writer's fsync does: another mount and the library open the bytes.
  ASSERT_EQ(fsync(fd), 0);
  EXPECT_EQ(LibraryBytes(m, "/synced"), "first");
  EXPECT_EQ(Slurp(other / "synced"), "first");
  char state[16];
  ssize_t n = getxattr(M("synced").c_str(), "user.maru.state", state, sizeof(state));
  EXPECT_EQ(std::string(state, n > 0 ? n : 0), "sealed");
  // Writing on starts a new version holding the old bytes, as a rewrite
  // does; the published one stays what others open until the next fsync.
  ASSERT_EQ(write(fd, " second", 7), 7);
  EXPECT_EQ(LibraryBytes(m, "/synced"), "first");
  EXPECT_EQ(Slurp(M("synced")), "first second");
  ASSERT_EQ(fdatasync(fd), 0);
  EXPECT_EQ(LibraryBytes(m, "/synced"), "first second");
  ASSERT_EQ(write(fd, " third", 6), 6);
  ASSERT_EQ(close(fd), 0);
  EXPECT_EQ(LibraryBytes(m, "/synced"), "first second third");
  close(reader);
  // fsync of a directory: the namespace is already written through.
  ASSERT_EQ(mkdir(M("dir").c_str(), 0755), 0);
  int dir = open(M("dir").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir, 0);
  EXPECT_EQ(fsync(dir), 0);
  close(dir);
  maru_disconnect(m);
}

TEST_F(FuseTest, ExtendedAttributesDescribeChunksAndPin) {
  WriteFile(M("chunk"), std::string(70000, 'k'));
  char buf[512];
  ssize_t n = getxattr(M("chunk").c_str(), "user.maru.state", buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, n), "sealed");
  n = getxattr(M("chunk").c_str(), "user.maru.extents", buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, n).find("0:"), std::string::npos);
  n = getxattr(M("chunk").c_str(), "user.maru.checksum", buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, n).rfind("xxh3:", 0), 0u);
  ASSERT_GT(getxattr(M("chunk").c_str(), "user.maru.generation", buf, sizeof(buf)), 0);
  ASSERT_GT(getxattr(M("chunk").c_str(), "user.maru.hits", buf, sizeof(buf)), 0);
  ASSERT_GT(getxattr(M("chunk").c_str(), "user.maru.leases", buf, sizeof(buf)), 0);
  n = getxattr(M("chunk").c_str(), "user.maru.pinned", buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, n), "0");
  ASSERT_EQ(setxattr(M("chunk").c_str(), "user.maru.pinned", "1", 1, 0), 0);
  n = getxattr(M("chunk").c_str(), "user.maru.pinned", buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, n), "1");
  ASSERT_EQ(setxattr(M("chunk").c_str(), "user.maru.pinned", "0", 1, 0), 0);
  EXPECT_EQ(setxattr(M("chunk").c_str(), "user.maru.pinned", "maybe", 5, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  // Chains: a chunk names its prefix.
  WriteFile(M("next"), "tail");
  ASSERT_EQ(setxattr(M("next").c_str(), "user.maru.parent", "/chunk", 6, 0), 0);
  n = getxattr(M("next").c_str(), "user.maru.parent", buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, n), "/chunk");
  EXPECT_EQ(setxattr(M("chunk").c_str(), "user.other", "1", 1, 0), -1);
  EXPECT_EQ(errno, ENOTSUP);
  n = listxattr(M("chunk").c_str(), buf, sizeof(buf));
  EXPECT_NE(std::string(buf, n).find("user.maru.extents"), std::string::npos);
  std::string out;
  EXPECT_EQ(maru_test::Run("getfattr -d -m user.maru " + M("chunk"), &out), 0) << out;
  EXPECT_NE(out.find("user.maru.state=\"sealed\""), std::string::npos) << out;
}

TEST_F(FuseTest, UnsupportedOperationsFailWithTheRightErrno) {
  WriteFile(M("f"), "x");
  EXPECT_EQ(link(M("f").c_str(), M("hard").c_str()), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(symlink("f", M("sym").c_str()), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(mkfifo(M("fifo").c_str(), 0644), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(mknod(M("dev").c_str(), S_IFCHR | 0644, makedev(1, 3)), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(mkdir(M("f/sub").c_str(), 0755), -1);
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_EQ(open(M(std::string(256, 'n')).c_str(), O_CREAT | O_WRONLY, 0644), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
}

TEST_F(FuseTest, TwoMountsSeeEachOthersFiles) {
  FuseMount second(server_.address(), "splice=1,cached_reads");  // the other read paths
  ASSERT_TRUE(second.Start());
  std::string data(2 << 20, '\0');
  maru_test::FillPattern(data.data(), data.size(), "two mounts");
  WriteFile(M("shared.bin"), data);
  EXPECT_EQ(Slurp(second / "shared.bin"), data);
  ASSERT_EQ(mkdir((second / "from-second").c_str(), 0755), 0);
  WriteFile(second / "from-second/x", "hello");
  EXPECT_EQ(Slurp(M("from-second/x")), "hello");
  // A replacement on one mount is what the other reads next.
  WriteFile(M("shared.bin"), "replaced");
  EXPECT_TRUE(maru_test::WaitFor([&] { return Slurp(second / "shared.bin") == "replaced"; }, 5000));
}

TEST_F(FuseTest, PermissionsAreTheServersForEveryCaller) {
  ASSERT_EQ(mkdir(M("rootdir").c_str(), 0755), 0);
  WriteFile(M("rootdir/secret"), "s");
  ASSERT_EQ(chmod(M("rootdir/secret").c_str(), 0600), 0);
  std::string mnt = mount_->path();
  pid_t child = fork();
  if (child == 0) {
    // Only system calls here: the child does not touch the RPC runtime.
    if (setgid(65534) || setuid(65534)) _exit(1);
    if (open((mnt + "/rootdir/new").c_str(), O_CREAT | O_WRONLY, 0644) >= 0 || errno != EACCES)
      _exit(2);
    if (open((mnt + "/rootdir/secret").c_str(), O_RDONLY) >= 0 || errno != EACCES) _exit(3);
    if (unlink((mnt + "/rootdir/secret").c_str()) == 0 || errno != EACCES) _exit(4);
    int fd = open((mnt + "/mine").c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || write(fd, "m", 1) != 1 || close(fd) != 0) _exit(5);
    struct stat st;
    if (stat((mnt + "/mine").c_str(), &st) || st.st_uid != 65534) _exit(6);
    if (access((mnt + "/rootdir/secret").c_str(), R_OK) == 0) _exit(7);
    _exit(0);
  }
  EXPECT_EQ(maru_test::Wait(child), 0);
}

// Holes of a file written through the mount (a write past the end, an
// ftruncate up) read as zeros, never as what a freed chunk left there.
TEST_F(FuseTest, HolesOfASparseFileReadAsZerosNotOldBytes) {
  maru_t *m;
  ASSERT_EQ(maru_connect(server_.address().c_str(), &m), 0);
  constexpr uint64_t kOld = 16ull << 20;
  for (int i = 0; i < 15; ++i) {  // every extent of the pool once written
    maru_chunk_t *c;
    ASSERT_EQ(maru_create(m, ("/old/" + std::to_string(i)).c_str(), kOld, &c), 0);
    memset(maru_chunk_data(c), 0x5a, kOld);
    ASSERT_EQ(maru_seal(c), 0);
    maru_release(c);
  }
  for (int i = 0; i < 15; ++i) maru_unlink(m, ("/old/" + std::to_string(i)).c_str());
  maru_disconnect(m);
  constexpr off_t kSize = 32 << 20, kMiddle = 8 << 20;
  int fd = open(M("sparse").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "a", 1, 0), 1);
  ASSERT_EQ(pwrite(fd, "b", 1, kMiddle), 1);
  ASSERT_EQ(ftruncate(fd, kSize), 0);
  ASSERT_EQ(close(fd), 0);
  std::string data = Slurp(M("sparse"));
  ASSERT_EQ(data.size(), static_cast<size_t>(kSize));
  EXPECT_EQ(data[0], 'a');
  EXPECT_EQ(data[kMiddle], 'b');
  data[0] = data[kMiddle] = 0;
  EXPECT_EQ(std::count(data.begin(), data.end(), '\0'), kSize);
}

// Another local uid's attacks on the mount's POSIX rules, each run as real
// other users: uid 1001 owns, uid 65534 (nobody) attacks.
constexpr uid_t kOwner = 1001, kNobody = 65534;

TEST_F(FuseTest, AnotherUsersPrivateDirectoryStaysClosedWhenItsDentriesAreCached) {
  // Names and attributes cached for an hour: whatever the owner looked up
  // stays in the kernel's caches while nobody walks the same path.
  FuseMount cached(server_.address(), "entry_timeout=3600,attr_timeout=3600");
  ASSERT_TRUE(cached.Start());
  Shell("mkdir \"$M/priv\"\nchown 1001:1001 \"$M/priv\"");
  ShellAs(kOwner, R"SH(
    chmod 700 "$M/priv"
    echo secret > "$M/priv/f"
    chmod 644 "$M/priv/f"
    mkdir -m 755 "$M/priv/sub"
    echo deeper > "$M/priv/sub/g"
    cat "$M/priv/f" "$M/priv/sub/g" > /dev/null
    ls -l "$M/priv/sub" > /dev/null
  )SH",
          cached.path());
  ShellAs(kNobody, R"SH(
    expect_fail cat "$M/priv/f"
    expect_fail cat "$M/priv/sub/g"
    expect_fail stat "$M/priv/sub/g"
    expect_fail ls "$M/priv/sub"
    expect_fail sh -c "echo x > '$M/priv/sub/new'"
    expect_fail rm -f "$M/priv/sub/g"
    cd /
    expect_fail cd "$M/priv/sub"
  )SH",
          cached.path());
  EXPECT_EQ(Slurp(M("priv/sub/g")), "deeper\n");
}

TEST_F(FuseTest, AnOpenFileStaysReadableAfterAnotherProcessUnlinksIt) {
  // Attributes never cached on the second mount: fstat asks maru-fuse.
  FuseMount uncached(server_.address(), "attr_timeout=0,entry_timeout=0");
  ASSERT_TRUE(uncached.Start());
  std::string data(3 << 20, '\0');
  maru_test::FillPattern(data.data(), data.size(), "unlinked but open");
  WriteFile(M("doomed"), data);
  for (const std::string &path : {M("doomed"), uncached / "doomed"}) {
    SCOPED_TRACE(path);
    if (path != M("doomed")) WriteFile(M("doomed"), data);
    int fd = open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    Shell("rm \"" + path + "\"");  // another process
    struct stat st;
    EXPECT_EQ(fstat(fd, &st), 0) << strerror(errno);
    EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
    EXPECT_TRUE(S_ISREG(st.st_mode));
    std::string back(data.size() + 1, '\0');
    ssize_t got = pread(fd, back.data(), back.size(), 0);
    EXPECT_EQ(got, static_cast<ssize_t>(data.size())) << strerror(errno);
    back.resize(got > 0 ? static_cast<size_t>(got) : 0);
    EXPECT_TRUE(back == data);
    EXPECT_EQ(fstat(fd, &st), 0) << strerror(errno);
    EXPECT_EQ(close(fd), 0);
    EXPECT_EQ(access(path.c_str(), F_OK), -1);
  }
}

TEST_F(FuseTest, NonOwnersCannotChmodOrChownAndOwnersCannotGiveFilesAway) {
  Shell("mkdir \"$M/u\"\nchown 1001:1001 \"$M/u\"");
  ShellAs(kOwner, "echo mine > \"$M/u/f\"\nchmod 644 \"$M/u/f\"");
  ShellAs(kNobody, R"SH(
    expect_fail chmod 666 "$M/u/f"
    expect_fail chown 65534 "$M/u/f"
    expect_fail chgrp 65534 "$M/u/f"
    expect_fail touch -d 2001-01-01 "$M/u/f"
  )SH");
  ShellAs(kOwner, R"SH(
    expect_fail chown 65534 "$M/u/f"
    expect_fail chgrp 0 "$M/u/f"
    chgrp 1001 "$M/u/f"
    chmod 640 "$M/u/f"
  )SH");
  Shell(R"SH(
    test "$(stat -c %u:%g:%a "$M/u/f")" = 1001:1001:640
  )SH");
}

TEST_F(FuseTest, WritingOrTruncatingASetIdFileClearsItsSetIdBits) {
  // Attributes cached for an hour: the kernel must not go on showing the
  // bits the server dropped.
  FuseMount cached(server_.address(), "entry_timeout=3600,attr_timeout=3600");
  ASSERT_TRUE(cached.Start());
  const std::string C = cached.path();
  ShellAs(0, "mkdir \"$M/u\"\nchown 1001:1001 \"$M/u\"", C);
  ShellAs(kOwner, R"SH(
    for f in written truncated kept; do
      echo '#!/bin/sh' > "$M/u/$f"
      chmod 6777 "$M/u/$f"
      test "$(stat -c %a "$M/u/$f")" = 6777
    done
  )SH",
          C);
  ShellAs(kNobody, R"SH(
    echo 'id -u' >> "$M/u/written"
    truncate -s 0 "$M/u/truncated"
  )SH",
          C);
  ShellAs(0, R"SH(
    test "$(stat -c %a "$M/u/written")" = 777
    test "$(stat -c %a "$M/u/truncated")" = 777
    echo 'root may' >> "$M/u/kept"
    test "$(stat -c %a "$M/u/kept")" = 6777
    chown 65534 "$M/u/kept"
    test "$(stat -c %a "$M/u/kept")" = 777
  )SH",
          C);
}

TEST_F(FuseTest, ExclusiveCreateOfAnExistingFileIsEexistThroughAnyCache) {
  FuseMount second(server_.address(), "entry_timeout=3600,attr_timeout=3600");
  ASSERT_TRUE(second.Start());
  struct stat st;
  // A name each mount has looked up, found (cached) or not found.
  WriteFile(M("present"), "p");
  ASSERT_EQ(stat((second / "present").c_str(), &st), 0);
  ASSERT_EQ(stat((second / "later").c_str(), &st), -1);
  WriteFile(M("later"), "l");  // created on the other mount since
  for (const std::string &path : {M("present"), second / "present", second / "later"}) {
    errno = 0;
    EXPECT_EQ(open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644), -1) << path;
    EXPECT_EQ(errno, EEXIST) << path;
  }
  ShellAs(kNobody, R"SH(
    expect_fail sh -c "set -C; echo x > '$M/present'"
  )SH");
  EXPECT_EQ(Slurp(M("present")), "p");
  EXPECT_EQ(Slurp(M("later")), "l");
}

TEST_F(FuseTest, OtherUsersCannotMakeLinksOrSpecialFilesEither) {
  Shell("chmod 1777 \"$M\"\necho x > \"$M/f\"\nchmod 666 \"$M/f\"");
  ShellAs(kNobody, R"SH(
    expect_fail ln "$M/f" "$M/hard"
    expect_fail ln -s f "$M/sym"
    expect_fail mkfifo "$M/fifo"
    expect_fail mknod "$M/dev" c 1 3
    test ! -e "$M/hard"
    test ! -e "$M/sym"
    test ! -e "$M/fifo"
  )SH");
}

TEST_F(FuseTest, UnreachableServerGivesEioThenTheMountRecovers) {
  WriteFile(M("before"), "b");
  ASSERT_TRUE(maru_test::Freeze(server_.pid()));
  struct stat st;
  EXPECT_EQ(stat(M("uncached-name").c_str(), &st), -1);
  EXPECT_EQ(errno, EIO);
  kill(server_.pid(), SIGCONT);
  // Killed and restarted: the same mount carries on, no remount.
  server_.Kill9();
  ASSERT_TRUE(server_.Start());
  EXPECT_TRUE(maru_test::WaitFor([&] { return Slurp(M("before")) == "b"; }, 10000));
  WriteFile(M("after"), "a");
  EXPECT_EQ(Slurp(M("after")), "a");
}

TEST_F(FuseTest, FioVerifiesCrc32c) {
  std::string out;
  int rc =
      maru_test::Run("fio --name=verify --directory=" + mount_->path() +
                         " --rw=write --bs=1M --size=32M --numjobs=2 --verify=crc32c --do_verify=1"
                         " --ioengine=psync --group_reporting --verify_state_save=0",
                     &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("verify: bad"), std::string::npos) << out;
  rc = maru_test::Run("fio --name=rand --directory=" + mount_->path() +
                          " --rw=randwrite --bs=4k --size=4M --verify=crc32c --ioengine=psync "
                          "--verify_state_save=0",
                      &out);
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(FuseTest, OverDevFuseReadsAndWritesGoOnWhileOtherRequestsAreServedBeside) {
  // Without the ring, one thread serves reads and writes from /dev/fuse and
  // hands the rest to workers (fuse_loop.h): both kinds at once, from
  // several processes, and every byte checked.
  FuseMount dev(server_.address(), "uring=0");
  ASSERT_TRUE(dev.Start());
  const std::string churn =
      "M='" + dev.path() +
      "'; mkdir $M/churn; i=0; while [ $i -lt 200 ]; do "
      "touch $M/churn/f$i; stat $M/churn/f$i >/dev/null; ls $M/churn >/dev/null; "
      "getfattr -d $M/churn/f$i >/dev/null 2>&1; i=$((i+1)); done; rm -r $M/churn";
  std::string churn_out, fio_out;
  std::thread meta([&] { EXPECT_EQ(maru_test::Run(churn, &churn_out), 0) << churn_out; });
  const int rc =
      maru_test::Run("fio --name=mixed --directory=" + dev.path() +
                         " --rw=randrw --bs=4k --size=8M --numjobs=3 --verify=crc32c --do_verify=1"
                         " --ioengine=psync --group_reporting --verify_state_save=0",
                     &fio_out);
  meta.join();
  EXPECT_EQ(rc, 0) << fio_out;
  EXPECT_EQ(fio_out.find("verify: bad"), std::string::npos) << fio_out;
}

// The FUSE connection's count of requests sent and not yet answered
// (fusectl, mounted here if it is not), or -1 if it cannot be read.
// `mnt` must be stat'ed before its server stops: stat goes through it.
int FuseRequestsWaiting(dev_t mount_dev) {
  const std::string dir = "/sys/fs/fuse/connections";
  const std::string file = dir + "/" + std::to_string(minor(mount_dev)) + "/waiting";
  if (access(file.c_str(), R_OK) != 0)
    (void)maru_test::Run("mount -t fusectl fusectl " + dir + " 2>/dev/null");
  const std::string n = Slurp(file);
  return n.empty() ? -1 : std::atoi(n.c_str());
}

TEST_F(FuseTest, OverDevFuseAWriteWaitingOnTheServerHoldsUpNoRead) {
  // A write that grows its reservation asks the server: while that call
  // hangs (here the server is stopped), sealed files are still read. The
  // /dev/fuse loop's thread serves those itself, so it must not be the one
  // waiting (fuse_loop.h), nor wait for the writer's lock in a read of the
  // file being written.
  FuseMount dev(server_.address(), "uring=0,timeout_ms=15000");
  ASSERT_TRUE(dev.Start());
  std::string data(64 << 10, '\0');
  maru_test::FillPattern(data.data(), data.size(), "sealed");
  WriteFile(dev / "sealed", data);
  struct stat st;
  ASSERT_EQ(stat(dev.path().c_str(), &st), 0);
  if (FuseRequestsWaiting(st.st_dev) < 0) GTEST_SKIP() << "no fusectl to count requests by";
  int reader = open((dev / "sealed").c_str(), O_RDONLY);
  int writer = open((dev / "growing").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(reader, 0);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(pwrite(writer, data.data(), 4096, 0), 4096);     // a reservation of 1 MiB
  int follower = open((dev / "growing").c_str(), O_RDONLY);  // reads through the writer
  ASSERT_GE(follower, 0);
  ASSERT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) == 0; }));
  ASSERT_TRUE(maru_test::Freeze(server_.pid()));
  std::atomic<bool> written{false}, followed{false};
  std::thread write([&] {
    (void)!pwrite(writer, data.data(), 4096, 64 << 20);  // past it: the server is asked
    written = true;
  });
  EXPECT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) >= 1; }));
  // The write holds its file's lock across the call: a read of that file
  // waits for it, on a worker.
  std::string followed_bytes(4096, '\0');
  std::thread follow([&] {
    (void)!pread(follower, followed_bytes.data(), followed_bytes.size(), 0);
    followed = true;
  });
  EXPECT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) >= 2; }));
  std::string got(data.size(), '\0');
  const ssize_t n = pread(reader, got.data(), got.size(), 0);
  const int read_errno = errno;
  // Read from the pool, or EIO if the lease could not be vouched for without
  // the server: either way, answered while the write still waits.
  EXPECT_FALSE(written.load()) << "the read waited for the write's server call";
  EXPECT_FALSE(followed.load());
  EXPECT_TRUE(n == static_cast<ssize_t>(data.size()) ? got == data : read_errno == EIO)
      << n << " " << strerror(read_errno);
  kill(server_.pid(), SIGCONT);
  write.join();
  follow.join();
  EXPECT_EQ(followed_bytes, data.substr(0, 4096));
  close(follower);
  close(writer);
  close(reader);
}

TEST_F(FuseTest, LookupsInOneDirectoryDoNotWaitForEachOther) {
  // The INIT reply grants FUSE_PARALLEL_DIROPS (libfuse 3.14 leaves it out;
  // AnswerInit puts it in): without it the kernel lets one lookup of a
  // directory at a time reach the daemon, and the others wait in the kernel
  // for it to be answered. Here every lookup waits on a stopped server,
  // and all of them must be in flight at once.
  FuseMount m(server_.address(), "uring=0,timeout_ms=15000");
  ASSERT_TRUE(m.Start());
  ASSERT_EQ(mkdir((m / "dir").c_str(), 0755), 0);
  struct stat st;
  ASSERT_EQ(stat(m.path().c_str(), &st), 0);
  if (FuseRequestsWaiting(st.st_dev) < 0) GTEST_SKIP() << "no fusectl to count requests by";
  ASSERT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) == 0; }));
  ASSERT_TRUE(maru_test::Freeze(server_.pid()));
  constexpr int kLookups = 4;
  std::atomic<int> missing{0};
  std::vector<std::thread> lookups;
  for (int i = 0; i < kLookups; ++i) {
    lookups.emplace_back([&, i] {
      struct stat ignored;
      if (stat((m / ("dir/missing" + std::to_string(i))).c_str(), &ignored) != 0 && errno == ENOENT)
        ++missing;
    });
  }
  EXPECT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) >= kLookups; }))
      << FuseRequestsWaiting(st.st_dev) << " of " << kLookups << " lookups in flight";
  kill(server_.pid(), SIGCONT);
  for (std::thread &t : lookups) t.join();
  EXPECT_EQ(missing.load(), kLookups);
}

// FUSE over io_uring (kernel 6.14+) is offered once root sets
// fuse.enable_uring; only daemons that ask for it use it (libfuse 3.14's
// never do), so it is enabled here if it can be, and left so. False if the
// kernel has no such thing, or this process may not turn it on.
bool EnableFuseRing() {
  const std::string param = "/sys/module/fuse/parameters/enable_uring";
  if (Slurp(param).empty()) return false;
  if (Slurp(param)[0] != 'Y') std::ofstream(param) << "Y";
  return Slurp(param)[0] == 'Y';
}

// The CPU time (ns) of a daemon's ring threads, and how many there are.
uint64_t RingThreadsRuntime(pid_t pid, int *threads) {
  *threads = 0;
  uint64_t ns = 0;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR *d = opendir(dir.c_str());
  if (!d) return 0;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = dir + "/" + e->d_name;
    if (Slurp(task + "/comm") != "maru-ring\n") continue;
    ++*threads;
    ns += std::stoull(Slurp(task + "/schedstat"));  // first field: time on a CPU
  }
  closedir(d);
  return ns;
}

TEST_F(FuseTest, RequestsAreServedOverIoUringWhereTheKernelOffersIt) {
  if (!EnableFuseRing()) GTEST_SKIP() << "the kernel offers no FUSE over io_uring here";
  FuseMount ring(server_.address()), plain(server_.address(), "uring=0");
  ASSERT_TRUE(ring.Start());
  ASSERT_TRUE(plain.Start());
  int threads = 0;
  RingThreadsRuntime(plain.pid(), &threads);
  EXPECT_EQ(threads, 0) << "-o uring=0 serves /dev/fuse alone";
  RingThreadsRuntime(ring.pid(), &threads);
  // Two threads for each possible CPU's queue.
  EXPECT_GE(threads, 2 * get_nprocs_conf());
  EXPECT_EQ(threads % 2, 0);

  // Written in 1 MiB pieces and a ragged tail, read back at random 4 KiB
  // places, whole, mapped, and through the other mount.
  std::string data((3 << 20) + 12345, '\0');
  maru_test::FillPattern(data.data(), data.size(), "ring");
  int fd = open((ring / "f").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  for (size_t at = 0; at < data.size(); at += 1 << 20) {
    const size_t n = std::min<size_t>(1 << 20, data.size() - at);
    ASSERT_EQ(pwrite(fd, data.data() + at, n, at), static_cast<ssize_t>(n));
  }
  ASSERT_EQ(close(fd), 0);
  fd = open((ring / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[4096];
  ASSERT_EQ(pread(fd, buf, sizeof(buf), 0), 4096);
  const uint64_t before = RingThreadsRuntime(ring.pid(), &threads);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const size_t at = rng() % (data.size() - sizeof(buf));
    ASSERT_EQ(pread(fd, buf, sizeof(buf), at), 4096);
    ASSERT_EQ(memcmp(buf, data.data() + at, sizeof(buf)), 0) << "at " << at;
  }
  EXPECT_GT(RingThreadsRuntime(ring.pid(), &threads), before) << "the ring served the reads";
  void *p = mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(memcmp(p, data.data(), data.size()), 0);
  munmap(p, data.size());
  close(fd);
  EXPECT_TRUE(Slurp(ring / "f") == data);
  EXPECT_TRUE(Slurp(plain / "f") == data);

  // The namespace, attributes and errors take the same way.
  ASSERT_EQ(mkdir((ring / "d").c_str(), 0755), 0);
  ASSERT_EQ(rename((ring / "f").c_str(), (ring / "d/g").c_str()), 0);
  struct stat st;
  ASSERT_EQ(stat((ring / "d/g").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  char sum[128];
  EXPECT_GT(getxattr((ring / "d/g").c_str(), "user.maru.checksum", sum, sizeof(sum)), 0);
  EXPECT_EQ(stat((ring / "f").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  DIR *d = opendir((ring / "d").c_str());
  ASSERT_NE(d, nullptr);
  int entries = 0;
  while (readdir(d)) ++entries;
  closedir(d);
  EXPECT_EQ(entries, 3);
  EXPECT_EQ(unlink((ring / "d/g").c_str()), 0);
  EXPECT_EQ(rmdir((ring / "d").c_str()), 0);
}

TEST_F(FuseTest, SplicedReadRepliesWorkWithTheRing) {
  // libfuse splices a read reply straight into /dev/fuse, where no request
  // of the ring is known: a ring request's reply is copied into its entry.
  if (!EnableFuseRing()) GTEST_SKIP() << "the kernel offers no FUSE over io_uring here";
  FuseMount spliced(server_.address(), "splice=1");
  ASSERT_TRUE(spliced.Start());
  int threads = 0;
  RingThreadsRuntime(spliced.pid(), &threads);
  EXPECT_GT(threads, 0) << "-o splice=1 still asks for the ring";
  std::string data(256 << 10, '\0');
  maru_test::FillPattern(data.data(), data.size(), "splice");
  WriteFile(spliced / "f", data);
  // One large read (libfuse splices none of a few pages).
  int fd = open((spliced / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string got(data.size(), '\0');
  EXPECT_EQ(pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()))
      << strerror(errno);
  EXPECT_TRUE(got == data);
  close(fd);
  EXPECT_TRUE(Slurp(spliced / "f") == data);
}

// Whether `pid` holds a PM QoS CPU latency request (cpu_wake_latency.h).
bool HoldsCpuLatencyRequest(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR *d = opendir(dir.c_str());
  if (!d) return false;
  bool holds = false;
  while (dirent *e = readdir(d)) {
    char target[256];
    const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    if (n > 0) holds |= std::string(target, n) == "/dev/cpu_dma_latency";
  }
  closedir(d);
  return holds;
}

TEST_F(FuseTest, IdleCpusAreAskedToPollWhileRequestsComeAndOnlyThen) {
  if (access("/dev/cpu_dma_latency", W_OK) != 0) GTEST_SKIP() << "no PM QoS device to hold";
  FuseMount polling(server_.address()), quiet(server_.address(), "idle_poll=0");
  ASSERT_TRUE(polling.Start());
  ASSERT_TRUE(quiet.Start());
  std::string data(64 << 10, '\0');
  maru_test::FillPattern(data.data(), data.size(), "qos");
  WriteFile(polling / "f", data);
  int fd = open((polling / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[4096];
  // Reads keep it held (the daemon checks every 25 ms that requests came).
  ASSERT_TRUE(maru_test::WaitFor([&] {
    EXPECT_EQ(pread(fd, buf, sizeof(buf), 8192), 4096);
    return HoldsCpuLatencyRequest(polling.pid());
  })) << "reads went on and the request was never made";
  for (int i = 0; i < 100; ++i) ASSERT_EQ(pread(fd, buf, sizeof(buf), 4096 * (i % 16)), 4096);
  close(fd);
  // Without requests it goes (50 ms after the last).
  EXPECT_TRUE(maru_test::WaitFor([&] { return !HoldsCpuLatencyRequest(polling.pid()); }))
      << "held with no request coming";
  // And comes back with the next requests.
  fd = open((polling / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(maru_test::WaitFor([&] {
    EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), 4096);
    return HoldsCpuLatencyRequest(polling.pid());
  }));
  close(fd);

  // -o idle_poll=0 never holds it, however many reads come.
  fd = open((quiet / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(pread(fd, buf, sizeof(buf), 4096 * (i % 16)), 4096);
    if (i % 100 == 0) {
      ASSERT_FALSE(HoldsCpuLatencyRequest(quiet.pid())) << "after " << i << " reads";
    }
  }
  ASSERT_EQ(memcmp(buf, data.data() + 4096 * (1999 % 16), sizeof(buf)), 0);
  close(fd);
}

TEST_F(FuseTest, OverIoUringRequestsWaitingOnTheServerHoldUpNoReadOfTheirCpu) {
  // The kernel gives a request to the queue of the CPU it was made on. Its
  // threads hand what waits on the server to the workers and register
  // another entry, so that more lookups than the queue has threads, all
  // hung on a stopped server, hold up no read made on that CPU.
  if (!EnableFuseRing()) GTEST_SKIP() << "the kernel offers no FUSE over io_uring here";
  FuseMount ring(server_.address(), "timeout_ms=15000");
  ASSERT_TRUE(ring.Start());
  std::string data(64 << 10, '\0');
  maru_test::FillPattern(data.data(), data.size(), "ringread");
  WriteFile(ring / "sealed", data);
  struct stat st;
  ASSERT_EQ(stat(ring.path().c_str(), &st), 0);
  if (FuseRequestsWaiting(st.st_dev) < 0) GTEST_SKIP() << "no fusectl to count requests by";
  int reader = open((ring / "sealed").c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) == 0; }));
  cpu_set_t cpu0;
  CPU_ZERO(&cpu0);
  CPU_SET(0, &cpu0);
  // More than the two threads of CPU 0's queue, each in a directory of its
  // own: what is tested is the queue, not parallel lookups in a directory.
  constexpr int kLookups = 5;
  for (int i = 0; i < kLookups; ++i)
    ASSERT_EQ(mkdir((ring / ("d" + std::to_string(i))).c_str(), 0755), 0);
  ASSERT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) == 0; }));
  ASSERT_TRUE(maru_test::Freeze(server_.pid()));
  std::atomic<int> looked_up{0};
  std::vector<std::thread> lookups;
  for (int i = 0; i < kLookups; ++i) {
    lookups.emplace_back([&, i] {
      (void)sched_setaffinity(0, sizeof(cpu0), &cpu0);
      struct stat ignored;
      (void)stat((ring / ("d" + std::to_string(i) + "/missing")).c_str(), &ignored);
      ++looked_up;
    });
  }
  EXPECT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) >= kLookups; }))
      << FuseRequestsWaiting(st.st_dev) << " waiting, " << looked_up.load() << " looked up";
  ssize_t n = -1;
  int read_errno = 0;
  std::string got(data.size(), '\0');
  std::thread read([&] {
    (void)sched_setaffinity(0, sizeof(cpu0), &cpu0);
    n = pread(reader, got.data(), got.size(), 0);
    read_errno = errno;
  });
  read.join();
  EXPECT_EQ(looked_up.load(), 0) << "the read waited for lookups on the server";
  EXPECT_TRUE(n == static_cast<ssize_t>(data.size()) ? got == data : read_errno == EIO)
      << n << " " << strerror(read_errno);
  kill(server_.pid(), SIGCONT);
  for (std::thread &t : lookups) t.join();
  close(reader);
  // What the workers served went back to the ring: the mount goes on.
  EXPECT_TRUE(Slurp(ring / "sealed") == data);
}

// A file removed while its writer still reads it counts for that writer
// (not for maru-fuse, whose session holds the lease): under a 2 MiB uid
// quota, `head > f; exec {fd}<f; rm f` 260 times held 267 MB of a 256 MB
// pool before. Two fit now; the third write is over the quota, and the
// space comes back when the descriptors close.
TEST_F(FuseTest, FilesRemovedWhileOpenCountForWhoHoldsThem) {
  ShellAs(1000, "mkdir \"$M/hold\"");
  std::string out;
  ASSERT_EQ(maru_test::Run(maru_test::MaructlBinary() + " quota set --uid 1000 2M --server " +
                               server_.address(),
                           &out),
            0)
      << out;
  ShellAs(1000, R"SH(
    cd "$M/hold"
    /usr/bin/python3 -c '
import errno, os
held, kept = 0, []
for i in range(20):
    name = "f%d" % i
    try:
        with open(name, "wb") as f:
            f.write(bytes(1 << 20))
        held += 1
    except OSError as e:
        assert e.errno == errno.EDQUOT, e
    kept.append(open(name, "rb"))
    os.unlink(name)
assert held == 2, "held %d MiB under a 2 MiB quota" % held
'
  )SH");
  // Those descriptors went with the process: the quota is free again.
  ShellAs(1000, "head -c 1048576 /dev/zero > \"$M/hold/after\"");
}

// Writing needs write permission only (pjdfstest open/06.t 30, 34, 38): a
// new version used to open the old one for its content in the caller's
// name, so that O_WRONLY, O_APPEND and a truncate to a non-zero size of a
// file the caller may write but not read failed with EACCES.
TEST_F(FuseTest, WritingAFileNeedsWritePermissionOnly) {
  Shell("mkdir \"$M/wo\"\nchmod 777 \"$M/wo\"");
  ShellAs(kOwner, "printf hello > \"$M/wo/f\"\nchmod 622 \"$M/wo/f\"");
  ShellAs(kNobody, R"SH(
    expect_fail cat "$M/wo/f"
    printf X >> "$M/wo/f"
    printf Y | dd of="$M/wo/f" conv=notrunc status=none
    truncate -s 4 "$M/wo/f"
  )SH");
  ShellAs(kOwner, "test \"$(cat \"$M/wo/f\")\" = Yell");
  ShellAs(kNobody, "truncate -s 0 \"$M/wo/f\"\nexpect_fail chmod 666 \"$M/wo/f\"");
  ShellAs(kOwner, "test ! -s \"$M/wo/f\"");
}

// An unlinked file stays usable through its descriptors, for writing too
// (the temp-file pattern): writes that grow it, fsync, ftruncate, reads,
// fstat; its space is freed at the last close. Also for a file sealed
// (fsync) before it was unlinked. Before, write and close failed with
// ENOENT, fsync and ftruncate with ESTALE.
TEST_F(FuseTest, AnUnlinkedFileStaysWritableUntilItsLastClose) {
  ShellAs(1000, "mkdir \"$M/tmp\"");
  struct statvfs before;
  ASSERT_EQ(statvfs(mount_->path().c_str(), &before), 0);
  ShellAs(1000, R"SH(
    cd "$M/tmp"
    /usr/bin/python3 -c '
import os
for sealed_first in (False, True):
    fd = os.open("t", os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
    if sealed_first:
        os.write(fd, b"s" * 4096)
        os.fsync(fd)
    os.unlink("t")
    assert os.fstat(fd).st_nlink == 0
    data = b"".join(bytes([65 + i % 26]) * 65536 for i in range(48))  # 3 MiB: grows twice
    os.pwrite(fd, data, 0)
    os.fsync(fd)
    assert os.pread(fd, len(data), 0) == data
    os.ftruncate(fd, 100000)
    assert os.fstat(fd).st_size == 100000
    os.pwrite(fd, b"end", 100000)
    os.fsync(fd)
    assert os.pread(fd, 200000, 0) == data[:100000] + b"end"
    other = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY)  # a second descriptor
    os.close(fd)
    assert os.pread(other, 3, 100000) == b"end"
    os.close(other)
assert not os.listdir(".")
'
  )SH");
  // Every byte came back at the last close.
  struct statvfs after;
  EXPECT_TRUE(maru_test::WaitFor([&] {
    return statvfs(mount_->path().c_str(), &after) == 0 && after.f_bfree == before.f_bfree;
  })) << before.f_bfree
      << " free before, " << after.f_bfree << " after";
}

// A file larger than the pool (here 256 MiB) cannot be: EFBIG. One that
// fits is written even where the reservation's doubling step would not
// (a 160 MiB file's next step asked for 320 MiB).
TEST_F(FuseTest, AFileLargerThanThePoolGetsEfbig) {
  ShellAs(1000, R"SH(
    head -c 167772160 /dev/zero > "$M/fits"
    test $(stat -c %s "$M/fits") -eq 167772160
    rm "$M/fits"
    head -c 300000000 /dev/zero 2>&1 > "$M/too-big" | grep -q "File too large"
    rm "$M/too-big"
  )SH");
}

// A writer's reservation grows a MiB at a time; where that step does not
// fit a quota but the write does, the write succeeds (it failed, leaving
// an empty file), and one that does not fit fails with EDQUOT, with what
// fitted written, through the page cache or not.
TEST_F(FuseTest, WritesUnderAQuotaGetWhatFitsThenEdquot) {
  FuseMount cached(server_.address(), "cached_writes");
  ASSERT_TRUE(cached.Start());
  ShellAs(1000, "mkdir \"$M/qw\"");
  std::string out;
  ASSERT_EQ(
      maru_test::Run(
          maru_test::MaructlBinary() + " quota set /qw 512K --server " + server_.address(), &out),
      0)
      << out;
  for (const std::string &m : {mount_->path(), cached.path()}) {
    ShellAs(1000, R"SH(
      head -c 100000 /dev/zero > "$M/qw/small"
      test $(stat -c %s "$M/qw/small") -eq 100000
      expect_fail sh -c "head -c 600000 /dev/zero > '$M/qw/big'"
      head -c 600000 /dev/zero 2>&1 > "$M/qw/big" | grep -q "Disk quota exceeded"
      test $(stat -c %s "$M/qw/big") -gt 0
      rm "$M/qw/small" "$M/qw/big"
    )SH",
            m);
  }
}

// mv into a directory whose quota it would pass fails (EDQUOT, not a
// copy), and leaves the file where it was.
TEST_F(FuseTest, MvIntoADirectoryPastItsQuotaIsRefused) {
  ShellAs(1000, "mkdir \"$M/qa\" \"$M/qfree\"");
  std::string out;
  ASSERT_EQ(
      maru_test::Run(
          maru_test::MaructlBinary() + " quota set /qa 128K --server " + server_.address(), &out),
      0)
      << out;
  ShellAs(1000, R"SH(
    head -c 1048576 /dev/zero > "$M/qfree/big"
    expect_fail mv "$M/qfree/big" "$M/qa/big"
    mv "$M/qfree/big" "$M/qa/big" 2>&1 | grep -q "Disk quota exceeded"
    test -f "$M/qfree/big"
    test ! -e "$M/qa/big"
    head -c 4096 /dev/zero > "$M/qfree/small"
    mv "$M/qfree/small" "$M/qa/small"
  )SH");
}

// mkdir in the deepest directory, over and over, as another user: the
// server stops it where a path could no longer name the directory.
TEST_F(FuseTest, DirectoriesNestAtMostAPathDeep) {
  ShellAs(1000, R"SH(
    cd "$M"
    /usr/bin/python3 -c '
import errno, os
depth = 0
while depth < 2100:
    try:
        os.mkdir("a")
    except OSError as e:
        assert e.errno == errno.ENAMETOOLONG, e
        break
    os.chdir("a")  # relative: a shell cd keeps the whole path, too long here
    depth += 1
assert depth == 2047, "nested %d deep" % depth
'
  )SH");
}

// Whether `pid` (a child) has exited with status 0; it stays waitable.
bool ExitedCleanly(pid_t pid, std::string *how) {
  siginfo_t info{};
  if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid)
    return false;
  *how = (info.si_code == CLD_EXITED ? "exit " : "signal ") + std::to_string(info.si_status);
  return true;
}

TEST_F(FuseTest, UnmountedOrStoppedWhileRequestsWaitOnTheServer) {
  // Requests handed to the workers (a write growing its reservation, a
  // lookup; over the ring, with their entries) are in flight when the
  // mount goes: lazily (umount -l), or by a signal to the daemon. It exits
  // cleanly once the server answers, and its callers get an answer.
  std::vector<std::string> ways = {"uring=0"};
  if (EnableFuseRing()) ways.push_back("uring=1");
  int round = 0;
  for (const std::string &way : ways) {
    for (const bool lazy : {true, false}) {
      SCOPED_TRACE(way + (lazy ? " umount -l" : " SIGTERM"));
      const std::string dir = "d" + std::to_string(++round);
      FuseMount m(server_.address(), way + ",timeout_ms=15000");
      ASSERT_TRUE(m.Start());
      ASSERT_EQ(mkdir((m / dir).c_str(), 0755), 0);
      int writer = open((m / (dir + "/w")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ASSERT_GE(writer, 0);
      std::string page(4096, 'x');
      ASSERT_EQ(pwrite(writer, page.data(), page.size(), 0), 4096);
      struct stat st;
      ASSERT_EQ(stat(m.path().c_str(), &st), 0);
      const bool counted = FuseRequestsWaiting(st.st_dev) >= 0;
      if (counted) {
        ASSERT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) == 0; }));
      }
      ASSERT_TRUE(maru_test::Freeze(server_.pid()));
      std::atomic<int> answered{0};
      std::thread write([&] {
        (void)!pwrite(writer, page.data(), page.size(), 64 << 20);
        ++answered;
      });
      std::thread lookup([&] {
        struct stat ignored;
        (void)stat((m / (dir + "/missing")).c_str(), &ignored);
        ++answered;
      });
      if (counted) {
        EXPECT_TRUE(maru_test::WaitFor([&] { return FuseRequestsWaiting(st.st_dev) >= 2; }));
      }
      if (lazy)  // umount -l (fusermount3 -uz would stat the mount first, and wait too)
        EXPECT_EQ(umount2(m.path().c_str(), MNT_DETACH), 0) << strerror(errno);
      else
        kill(m.pid(), SIGTERM);
      kill(server_.pid(), SIGCONT);
      write.join();
      lookup.join();
      EXPECT_EQ(answered.load(), 2);
      close(writer);  // the last reference: the lazily unmounted mount goes
      std::string how;
      EXPECT_TRUE(maru_test::WaitFor([&] { return ExitedCleanly(m.pid(), &how); }, 20000));
      EXPECT_EQ(how, "exit 0");
    }
  }
}

TEST(FuseMountHelper, MountTypeFuseMaruAndUmount) {
  // What mount(8) runs for `mount -t fuse.maru SERVER DIR -o OPTIONS` and for
  // fstab lines: the helper, with mount's own options mixed in.
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  maru_test::TempDir dir;
  const std::string mnt = dir.path() + "/mnt";
  ASSERT_EQ(mkdir(mnt.c_str(), 0755), 0);
  std::string out;
  int rc =
      maru_test::Run("PATH=" + maru_test::BinDir("src/fs") + ":$PATH " +
                         maru_test::SourcePath("src/fs/mount.fuse.maru") + " " + server.address() +
                         " " + mnt + " -o rw,_netdev,nofail,timeout_ms=3000",
                     &out);
  ASSERT_EQ(rc, 0) << out;
  WriteFile(mnt + "/via-helper", "ok");
  EXPECT_EQ(Slurp(mnt + "/via-helper"), "ok");
  EXPECT_EQ(maru_test::Run("umount " + mnt, &out), 0) << out;
  EXPECT_TRUE(
      maru_test::WaitFor([&] { return maru_test::Run("mountpoint -q " + mnt) != 0; }, 5000));
  // A server that is not there: the mount fails, saying so.
  EXPECT_NE(maru_test::Run("PATH=" + maru_test::BinDir("src/fs") + ":$PATH " +
                               maru_test::SourcePath("src/fs/mount.fuse.maru") +
                               " unix:///nonexistent.sock " + mnt,
                           &out),
            0);
  EXPECT_NE(out.find("no server"), std::string::npos) << out;
  if (maru_test::Run("mountpoint -q " + mnt) == 0) maru_test::Run("fusermount3 -uz " + mnt);
}

}  // namespace
