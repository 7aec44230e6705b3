// maru-fuse at its limits: files removed while open, quotas, the pool's
// size, path depth; and mount -t fuse.maru.
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
}  // namespace maru_test
