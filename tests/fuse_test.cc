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

#include "fuse_fixture.h"

namespace maru_test {
namespace {

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
// other users: kOwner owns, kNobody attacks.

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

// A pool made with --coherence flush: the mount flushes a file's bytes
// before it publishes them and invalidates a sealed file's before it reads
// them. Files written through the mount read back bit-exact, through the
// mount and as chunks; chunks stored through the library, through the mount.
TEST(FuseCoherence, AFlushPoolsFilesReadBackBitExact) {
  TestPool pool(64ull << 20, 64u << 10, "flush");
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  FuseMount mount(server.address());
  ASSERT_TRUE(mount.Start());
  std::string data((1 << 20) + 17, '\0');  // ends mid-line
  FillPattern(data.data(), data.size() & ~7ull, "fuse-flush");
  WriteFile(mount / "f.data", data);
  EXPECT_EQ(Slurp(mount / "f.data"), data);
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  maru_chunk_t *c = nullptr;
  ASSERT_EQ(maru_open(m, "/f.data", &c), 0);
  ASSERT_EQ(maru_chunk_size(c), data.size());
  EXPECT_EQ(memcmp(maru_chunk_data(c), data.data(), data.size()), 0);
  maru_release(c);
  ASSERT_EQ(maru_create(m, "/lib.data", 200000, &c), 0);
  FillPattern(maru_chunk_data(c), 200000, "/lib.data");
  ASSERT_EQ(maru_seal(c), 0);
  maru_release(c);
  const std::string lib = Slurp(mount / "lib.data");
  ASSERT_EQ(lib.size(), 200000u);
  EXPECT_TRUE(CheckPattern(lib.data(), lib.size(), "/lib.data"));
  maru_disconnect(m);
}

}  // namespace
}  // namespace maru_test
