// How maru-fuse serves requests: over /dev/fuse and over io_uring, reads and
// writes beside requests waiting on the server, idle CPUs polled only under
// load, and unmounting or stopping while requests wait.
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

}  // namespace
}  // namespace maru_test
