// libmaru_direct against a real maru-server, from several processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "maru_direct.hpp"
#include "pattern.h"
#include "store_pattern.h"

namespace {

using maru_test::Server;
using maru_test::TestPool;

using maru_test::CheckPattern;
using maru_test::FillPattern;
using maru_test::RunClient;

int Store(maru_t *m, const std::string &path, uint64_t size) {
  return maru_test::StorePattern(m, path, size);
}

int Load(maru_t *m, const std::string &path, uint64_t size, const std::string &pool) {
  return maru_test::LoadPattern(m, path, size, pool);
}

class DirectTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start()); }

  maru_t *Connect() {
    maru_t *m = nullptr;
    int rc = maru_connect(server_.address().c_str(), &m);
    EXPECT_EQ(rc, 0) << maru_strerror(rc);
    return m;
  }

  TestPool pool_{256ull << 20};
  Server server_{pool_.path(),
                 {"--session-timeout-ms", "1500", "--heartbeat-ms", "300", "--high-watermark", "1",
                  "--low-watermark", "1"}};
};

TEST_F(DirectTest, StoreInOneProcessLoadInAnotherInPlace) {
  std::string store, load, lookup;
  for (int i = 0; i < 8; ++i) {
    std::string p = "/llama/chunk" + std::to_string(i);
    store += " + store " + p + " 1048576";
    load += " + load " + p + " 1048576 " + pool_.path();
    lookup += " " + (i == 5 ? std::string("/llama/missing") : p);
  }
  ASSERT_EQ(RunClient(server_.address(), store), 0);
  // Another process reads them in place, and one batched lookup stops at the
  // first miss.
  ASSERT_EQ(RunClient(server_.address(), load + " + lookup 5" + lookup), 0);
}

TEST_F(DirectTest, ReaderSeesWritesOfAnotherProcessWithoutCopy) {
  // The writer keeps its handle after sealing; the reader's pointer maps the
  // very same pool bytes, so the two processes share one copy.
  maru_t *m = Connect();
  maru_chunk_t *c;
  ASSERT_EQ(maru_create(m, "/shared/one", 65536, &c), 0);
  FillPattern(maru_chunk_data(c), 65536, "/shared/one");
  ASSERT_EQ(maru_seal(c), 0);
  std::string out;
  ASSERT_EQ(RunClient(server_.address(), "offset /shared/one " + pool_.path(), &out), 0);
  uint64_t mine = maru_test::OffsetInFile(maru_chunk_data(c), pool_.path());
  EXPECT_NE(mine, ~0ull);
  EXPECT_EQ(strtoull(out.c_str(), nullptr, 10), mine);
  maru_release(c);
  maru_disconnect(m);
}

TEST_F(DirectTest, FirstWriterWinsAndUnsealedChunksStayHidden) {
  maru_t *m = Connect();
  maru_chunk_t *c;
  ASSERT_EQ(maru_create(m, "/race/k", 4096, &c), 0);
  EXPECT_EQ(RunClient(server_.address(), "create-errno /race/k 4096 " + std::to_string(EEXIST) +
                                             " + open-errno /race/k " + std::to_string(EBUSY) +
                                             " + lookup 0 /race/k"),
            0);
  ASSERT_EQ(maru_seal(c), 0);
  maru_chunk_t *x;
  EXPECT_EQ(maru_create(m, "/race/k", 4096, &x), -EEXIST);
  // Abandoning an unsealed chunk frees its name.
  ASSERT_EQ(maru_create(m, "/race/abandoned", 4096, &x), 0);
  ASSERT_EQ(maru_release(x), 0);
  ASSERT_EQ(maru_create(m, "/race/abandoned", 4096, &x), 0);
  maru_release(x);
  maru_release(c);
  maru_disconnect(m);
}

TEST_F(DirectTest, BadInputGetsClearErrors) {
  maru_t *m = Connect();
  maru_chunk_t *c = nullptr;
  EXPECT_EQ(maru_create(m, "relative/x", 4096, &c), -EINVAL);
  EXPECT_EQ(maru_create(m, "", 4096, &c), -EINVAL);
  EXPECT_EQ(maru_create(m, nullptr, 4096, &c), -EINVAL);
  EXPECT_EQ(maru_create(m, "/a/../b", 4096, &c), -EINVAL);
  EXPECT_EQ(maru_create(m, "/a/./b", 4096, &c), -EINVAL);
  EXPECT_EQ(maru_create(m, "/", 4096, &c), -EINVAL);
  EXPECT_EQ(maru_create(m, ("/" + std::string(256, 'k')).c_str(), 4096, &c), -ENAMETOOLONG);
  EXPECT_EQ(maru_create(m, "/x/zero", 0, &c), -EINVAL);
  EXPECT_EQ(maru_create(m, "/x/huge", 1ull << 40, &c), -EFBIG);
  EXPECT_EQ(maru_open(m, "/x/missing", &c), -ENOENT);
  EXPECT_EQ(maru_open(m, "/", &c), -EINVAL);
  EXPECT_EQ(maru_unlink(m, "/x/missing"), -ENOENT);
  EXPECT_EQ(c, nullptr);
  const std::string key =
      "/lmcache/"
      "meta-llama%2FLlama-3.1-8B@8@3@"
      "5a1f0c9e7d2b4e6f8a0c1e3d5f7b9a2c4e6f8a0c1e3d5f7b9a2c4e6f8a0c1e3d5f7b@bfloat16.data";
  EXPECT_EQ(Store(m, key, 8192), 0);
  EXPECT_EQ(Load(m, key, 8192, pool_.path()), 0);
  EXPECT_STRNE(maru_strerror(-EBUSY), "");
  maru_disconnect(m);
}

TEST_F(DirectTest, PoolFullIsEnospcAndLosesNothing) {
  maru_t *m = Connect();
  maru_chunk_t *pinned;
  ASSERT_EQ(maru_create(m, "/full/pinned", 200 << 20, &pinned), 0);
  maru_chunk_t *c = nullptr;
  // Nothing sealed can be evicted: the unsealed reservation holds the space.
  EXPECT_EQ(maru_create(m, "/full/more", 100 << 20, &c), -ENOSPC);
  FillPattern(maru_chunk_data(pinned), 200 << 20, "/full/pinned");
  ASSERT_EQ(maru_seal(pinned), 0);
  EXPECT_TRUE(CheckPattern(maru_chunk_data(pinned), 200 << 20, "/full/pinned"));
  maru_release(pinned);
  maru_disconnect(m);
}

TEST_F(DirectTest, UnknownServerFailsFast) {
  maru_t *m = nullptr;
  EXPECT_EQ(maru_connect("unix:///nonexistent/maru.sock", &m), -ENOENT);
  EXPECT_EQ(maru_connect("tcp://127.0.0.1:1", &m), -ECONNREFUSED);
  EXPECT_EQ(maru_connect("bogus://x", &m), -EINVAL);
  EXPECT_EQ(m, nullptr);
}

TEST_F(DirectTest, HungOrDeadServerGivesAnErrnoNotAHang) {
  setenv("MARU_TIMEOUT_MS", "300", 1);
  setenv("MARU_RETRY_MS", "300", 1);
  setenv("MARU_INDEX", "0", 1);  // opens by message (index_test: opens without one)
  maru_t *m = Connect();
  unsetenv("MARU_TIMEOUT_MS");
  unsetenv("MARU_RETRY_MS");
  unsetenv("MARU_INDEX");
  ASSERT_EQ(Store(m, "/hang/a", 4096), 0);
  // Freeze the server: the call times out.
  pid_t pid = server_.pid();
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(maru_test::Freeze(pid));
  maru_chunk_t *c;
  EXPECT_EQ(maru_open(m, "/hang/a", &c), -ETIMEDOUT);
  kill(pid, SIGCONT);
  server_.Kill9();
  EXPECT_EQ(maru_open(m, "/hang/a", &c), -ENOTCONN);
  maru_disconnect(m);
}

TEST_F(DirectTest, KillDashNineAndRestartLosesNoSealedChunk) {
  // This test is about coming back, not about expiry: a session timeout a
  // loaded 2-core host cannot outlast while the client reconnects.
  server_.Stop();
  Server server(pool_.path(), {"--session-timeout-ms", "15000", "--heartbeat-ms", "300"});
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  std::string load;
  for (int i = 0; i < 20; ++i) {
    std::string p = "/persist/c" + std::to_string(i);
    ASSERT_EQ(Store(m, p, 256 << 10), 0);
    load += " + load " + p + " 262144 " + pool_.path();
  }
  maru_chunk_t *unfinished;
  ASSERT_EQ(maru_create(m, "/persist/unfinished", 4096, &unfinished), 0);
  server.Kill9();
  ASSERT_TRUE(server.Start());
  // A fresh client reads everything back.
  EXPECT_EQ(RunClient(server.address(), load), 0);
  // The old client carries on: its session and its reservation come back.
  EXPECT_EQ(Load(m, "/persist/c3", 256 << 10, pool_.path()), 0);
  FillPattern(maru_chunk_data(unfinished), 4096, "/persist/unfinished");
  EXPECT_EQ(maru_seal(unfinished), 0);
  maru_release(unfinished);
  EXPECT_EQ(Load(m, "/persist/unfinished", 4096, pool_.path()), 0);
  maru_disconnect(m);
}

TEST_F(DirectTest, KilledWriterReleasesItsReservation) {
  EXPECT_EQ(RunClient(server_.address(), "create-and-die /crash/k 67108864"), 128 + SIGKILL);
  maru_t *m = Connect();
  maru_chunk_t *c;
  EXPECT_EQ(maru_create(m, "/crash/k", 4096, &c), -EEXIST);
  // Within the session timeout the name becomes free again.
  EXPECT_TRUE(maru_test::WaitFor(
      [&] {
        int rc = maru_create(m, "/crash/k", 4096, &c);
        if (rc == 0) maru_release(c);
        return rc == 0;
      },
      10000));
  maru_disconnect(m);
}

TEST_F(DirectTest, UnlinkedChunkStaysReadableWhileHeld) {
  maru_t *m = Connect();
  ASSERT_EQ(Store(m, "/held/a", 8 << 20), 0);
  maru_chunk_t *r;
  ASSERT_EQ(maru_open(m, "/held/a", &r), 0);
  ASSERT_EQ(maru_unlink(m, "/held/a"), 0);
  // Fill the pool with other chunks; none may land on the held bytes.
  for (int i = 0; i < 40; ++i) {
    int rc = Store(m, "/held/fill" + std::to_string(i), 8 << 20);
    if (rc == -ENOSPC) break;
    ASSERT_EQ(rc, 0);
  }
  EXPECT_TRUE(CheckPattern(maru_chunk_data(r), 8 << 20, "/held/a"));
  maru_release(r);
  maru_disconnect(m);
}

TEST_F(DirectTest, LeaseCheckHoldsWhileTheSessionLives) {
  maru_t *m = Connect();
  maru_chunk_t *w;
  ASSERT_EQ(maru_create(m, "/check/a", 1 << 20, &w), 0);
  EXPECT_EQ(maru_lease_check(w), -EINVAL);  // a writer holds a reservation, not a lease
  FillPattern(maru_chunk_data(w), 1 << 20, "/check/a");
  ASSERT_EQ(maru_seal(w), 0);
  EXPECT_EQ(maru_lease_check(w), 0);  // sealed: it reads under a lease now
  maru_release(w);
  maru_chunk_t *r;
  ASSERT_EQ(maru_open(m, "/check/a", &r), 0);
  EXPECT_TRUE(CheckPattern(maru_chunk_data(r), 1 << 20, "/check/a"));
  EXPECT_EQ(maru_lease_check(r), 0);
  // Unlinked and written over by others: the lease still keeps its bytes.
  ASSERT_EQ(maru_unlink(m, "/check/a"), 0);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(Store(m, "/check/fill" + std::to_string(i), 1 << 20), 0);
  EXPECT_TRUE(CheckPattern(maru_chunk_data(r), 1 << 20, "/check/a"));
  EXPECT_EQ(maru_lease_check(r), 0);
  maru_release(r);
  EXPECT_EQ(maru_lease_check(nullptr), -EINVAL);
  maru_direct::Client client;
  ASSERT_EQ(client.Connect(server_.address().c_str()), 0);
  maru_direct::Chunk c;
  ASSERT_EQ(client.Open("/check/fill0", &c), 0);
  EXPECT_EQ(c.LeaseCheck(), 0);
  maru_disconnect(m);
}

// A reader stopped (SIGSTOP, a long pause) past its session timeout while
// its chunk is removed and the extents go to other chunks: what it reads on
// waking may be their bytes, and maru_lease_check() says so.
TEST_F(DirectTest, LeaseCheckReportsAReaderStoppedPastItsTimeout) {
  ASSERT_EQ(RunClient(server_.address(), "store /stop/a 1048576"), 0);
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/reader.log", go = dir.path() + "/go";
  auto slurp = [&] {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  pid_t reader = fork();
  if (reader == 0) {
    const std::string cmd =
        maru_test::ClientCommand(server_.address(), "hold-check /stop/a 1048576 " + go);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " >" + log + " 2>&1").c_str(),
          static_cast<char *>(nullptr));
    _exit(127);
  }
  struct Reaper {  // never leave a stopped reader behind, also on failure
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        maru_test::Wait(pid);
      }
    }
  } reaper{reader};
  ASSERT_TRUE(maru_test::WaitFor([&] { return slurp().find("opened") != std::string::npos; }))
      << slurp();
  ASSERT_TRUE(maru_test::Freeze(reader));
  ASSERT_EQ(RunClient(server_.address(), "unlink-errno /stop/a 0"), 0);
  ASSERT_TRUE(maru_test::WaitFor(
      [&] {
        std::string out;
        maru_test::Run(maru_test::MaructlBinary() + " sessions --server " + server_.address(),
                       &out);
        return out.find("libmaru_direct") == std::string::npos;  // the stopped session expired
      },
      20000));
  std::string fill;
  for (int i = 0; i < 100; ++i) fill += " + store /stop/fill" + std::to_string(i) + " 1048576";
  ASSERT_EQ(RunClient(server_.address(), fill.substr(3)), 0);
  std::ofstream(go).put('x');
  kill(reader, SIGCONT);
  EXPECT_EQ(maru_test::Wait(reader), 0) << slurp();
  reaper.pid = -1;
  EXPECT_NE(slurp().find("check " + std::string(maru_strerror(-ESTALE))), std::string::npos)
      << slurp();
}

TEST_F(DirectTest, PermissionsUseTheCallersIdentity) {
  maru_t *m = Connect();
  ASSERT_EQ(Store(m, "/root-only/secret", 4096), 0);
  maru_create_opts_t opts{};
  opts.mode = 0600;
  maru_chunk_t *c;
  ASSERT_EQ(maru_create_ex(m, "/root-only/private", 4096, &opts, &c), 0);
  ASSERT_EQ(maru_seal(c), 0);
  maru_release(c);
  maru_disconnect(m);
  // Opens and lookups go over the fast lane, the rest over gRPC: both
  // identify the caller by SO_PEERCRED.
  EXPECT_EQ(
      RunClient(server_.address(), "uid 65534 + open-errno /root-only/private " +
                                       std::to_string(EACCES) + " + lookup 0 /root-only/private"),
      0);
  EXPECT_EQ(RunClient(server_.address(),
                      "uid 65534 + create-errno /root-only/mine 4096 " + std::to_string(EACCES) +
                          " + unlink-errno /root-only/secret " + std::to_string(EACCES) +
                          " + open-errno /root-only/secret 0"
                          " + store /nobody/own 4096"),  // the root directory is 1777
            0);
}

TEST_F(DirectTest, OneConnectionManyThreads) {
  maru_t *m = Connect();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string path = "/threads/t" + std::to_string(t) + "/c" + std::to_string(i);
        if (Store(m, path, 65536) || Load(m, path, 65536, pool_.path())) ++failures;
      }
    });
  }
  for (auto &t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  maru_disconnect(m);
}

TEST_F(DirectTest, FragmentedChunkIsContiguousForTheCaller) {
  maru_t *m = Connect();
  // Fill the pool with 1 MiB chunks, then free every other one: no run
  // larger than 1 MiB is left but the tail, so a 16 MiB chunk must be split.
  const int n = 250;
  for (int i = 0; i < n; ++i) ASSERT_EQ(Store(m, "/frag/c" + std::to_string(i), 1 << 20), 0);
  for (int i = 0; i < n; i += 2)
    ASSERT_EQ(maru_unlink(m, ("/frag/c" + std::to_string(i)).c_str()), 0);
  ASSERT_EQ(Store(m, "/frag/big", 16 << 20), 0);
  EXPECT_EQ(RunClient(server_.address(), "load /frag/big 16777216 " + pool_.path()), 0);
  maru_disconnect(m);
}

TEST_F(DirectTest, CppWrapperReleasesWhatItHolds) {
  maru_direct::Client client;
  ASSERT_EQ(client.Connect(server_.address().c_str()), 0);
  {
    maru_direct::Chunk c;
    ASSERT_EQ(client.Create("/cpp/a", 65536, &c), 0);
    FillPattern(c.data(), c.size(), "/cpp/a");
    ASSERT_EQ(c.Seal(), 0);
    maru_direct::Chunk unsealed;
    ASSERT_EQ(client.Create("/cpp/abandoned", 4096, &unsealed), 0);
  }  // both released here: the lease dropped, the unsealed chunk abandoned
  std::vector<maru_direct::Chunk> hits;
  ASSERT_EQ(client.LookupPrefix({"/cpp/a", "/cpp/abandoned"}, &hits), 0);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_TRUE(CheckPattern(hits[0].data(), hits[0].size(), "/cpp/a"));
  maru_direct::Chunk again;
  EXPECT_EQ(client.Create("/cpp/abandoned", 4096, &again), 0);
  EXPECT_EQ(client.Create("/cpp/a", 4096, &again), -EEXIST);
}

TEST_F(DirectTest, FastLaneSurvivesGarbageAndGrpcAloneWorks) {
  // Garbage on the fast lane costs its sender the connection, nothing else.
  for (const std::string &junk :
       {std::string("\x05\x00\x00\x00\x63hello", 10), std::string("\xff\xff\xff\x7f\x01", 5),
        std::string("\x03\x00\x00\x00\x01\xff\xff\xff", 8)}) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = server_.socket_path() + ".fast";
    strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    shutdown(fd, SHUT_WR);
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    close(fd);
  }
  EXPECT_EQ(RunClient(server_.address(), "store /lane/a 65536 + load /lane/a 65536 " +
                                             pool_.path() + " + lookup 1 /lane/a /lane/b"),
            0);
  // A client that does not use the lane gets the same answers over gRPC.
  EXPECT_EQ(maru_test::Run(
                "MARU_FAST_LANE=0 " +
                maru_test::ClientCommand(server_.address(), "load /lane/a 65536 " + pool_.path() +
                                                                " + lookup 1 /lane/a /lane/b")),
            0);
}

TEST_F(DirectTest, ClientsHoldingManyFastLaneConnectionsDoNotStopOthers) {
  rlimit files;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  const rlimit saved = files;
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 4096);
  setrlimit(RLIMIT_NOFILE, &files);
  std::vector<int> held;
  const std::string path = server_.socket_path() + ".fast";
  for (size_t i = 0; i + 64 < files.rlim_cur && held.size() < 1100; ++i) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) {
      close(fd);
      break;
    }
    held.push_back(fd);
  }
  // Past the server's limit, connections are refused or closed; the other
  // clients go on, over gRPC if need be.
  EXPECT_EQ(RunClient(server_.address(), "store /many/a 65536 + load /many/a 65536 " +
                                             pool_.path() + " + lookup 1 /many/a"),
            0);
  for (int fd : held) close(fd);
  setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_EQ(RunClient(server_.address(), "load /many/a 65536 " + pool_.path()), 0);
}

TEST(ServerStart, APoolOfTwoDevices) {
  TestPool a(64ull << 20), b(64ull << 20);
  Server server(a.path(), {"--pool", b.path(), "--high-watermark", "1", "--low-watermark", "1"});
  ASSERT_TRUE(server.Start());
  // 12 chunks of 8 MiB fit in neither device alone: both are used, and each
  // client maps both.
  std::string store, load;
  for (int i = 0; i < 12; ++i) {
    store += " + store /two/c" + std::to_string(i) + " 8388608";
    load += " + load /two/c" + std::to_string(i) + " 8388608 /dev/shm/";
  }
  ASSERT_EQ(RunClient(server.address(), store.substr(3)), 0);
  EXPECT_EQ(RunClient(server.address(), load.substr(3)), 0);
  std::string df;
  maru_test::Run(maru_test::MaructlBinary() + " df --json --server " + server.address(), &df);
  EXPECT_NE(df.find("\"index\":1"), std::string::npos) << df;
  EXPECT_EQ(df.find("\"used\":0}"), std::string::npos) << df;  // neither device is empty
  // A restart finds both devices by their uuids, whatever the order given.
  server.Kill9();
  Server again(b.path(), {"--pool", a.path()});
  ASSERT_TRUE(maru_test::Run("cp -r " + server.db() + " " + again.db()) == 0);
  ASSERT_TRUE(again.Start());
  EXPECT_EQ(RunClient(again.address(), load.substr(3)), 0);
  // Leaving a device out is refused: its chunks would be lost.
  Server missing(a.path());
  ASSERT_TRUE(maru_test::Run("cp -r " + server.db() + " " + missing.db()) == 0);
  std::string out;
  EXPECT_NE(missing.RunToExit(&out), 0);
  EXPECT_NE(out.find(b.path()), std::string::npos) << out;
}

TEST(ServerStart, WorksWithoutTheFastLane) {
  TestPool pool(64ull << 20);
  Server server(pool.path(), {"--no-fast-lane"});
  ASSERT_TRUE(server.Start());
  EXPECT_NE(access((server.socket_path() + ".fast").c_str(), F_OK), 0);
  EXPECT_EQ(
      RunClient(server.address(), "store /x 4096 + load /x 4096 " + pool.path() + " + lookup 1 /x"),
      0);
}

TEST(ServerStart, RefusesAPoolWithoutValidSuperblock) {
  TestPool pool(16 << 20);
  ASSERT_EQ(truncate(pool.path().c_str(), 8 << 20), 0);
  Server server(pool.path());
  std::string out;
  EXPECT_NE(server.RunToExit(&out), 0);
  EXPECT_NE(out.find("truncated"), std::string::npos) << out;
  FILE *f = fopen(pool.path().c_str(), "r+");
  ASSERT_NE(f, nullptr);
  fputs("garbage!", f);
  fclose(f);
  EXPECT_NE(server.RunToExit(&out), 0);
  EXPECT_NE(out.find("maructl mkpool"), std::string::npos) << out;
}

// --- Trust boundaries: attacks by other local uids ---

std::string ProbeCommand(const std::string &address, const std::string &script) {
  return maru_test::BinDir("tests/probe_client") + " " + address + " " + script;
}

// Runs tests/probe_client: raw requests, as an attacker sends them.
int RunProbe(const std::string &address, const std::string &script) {
  std::string output;
  int rc = maru_test::Run(ProbeCommand(address, script), &output);
  if (rc != 0) fprintf(stderr, "probe_client %s -> %d: %s\n", script.c_str(), rc, output.c_str());
  return rc;
}

// A victim (uid 1001) with a write under way and a lease on a chunk whose
// file is gone, both in a session whose id the attackers are told.
class VictimSession {
 public:
  explicit VictimSession(const std::string &address) {
    chmod(dir_.path().c_str(), 0777);  // the victim writes its ids here
    const std::string cmd =
        ProbeCommand(address, "uid 1001 + raw-victim /victim " + out() + " " + go());
    pid_ = maru_test::Fork([&] {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char *>(nullptr));
      return 127;
    });
    ids_.fill(0);
    maru_test::WaitFor([&] {
      std::ifstream in(out());
      return static_cast<bool>(in >> ids_[0] >> ids_[1] >> ids_[2] >> ids_[3] >> ids_[4]);
    });
  }
  ~VictimSession() {
    if (pid_ > 0) Finish();
  }
  // Lets the victim finish: 0 when its session, lease and seal survived.
  int Finish() {
    std::ofstream(go()) << "go\n";
    int rc = maru_test::Wait(pid_);
    pid_ = -1;
    return rc;
  }
  bool ready() const { return ids_[0] != 0; }
  std::string session() const { return std::to_string(ids_[0]); }
  std::string writing() const { return std::to_string(ids_[1]) + " " + std::to_string(ids_[2]); }
  std::string writing_ino() const { return std::to_string(ids_[1]); }
  std::string deleted() const { return std::to_string(ids_[3]) + " " + std::to_string(ids_[4]); }

 private:
  std::string out() const { return dir_.path() + "/ids"; }
  std::string go() const { return dir_.path() + "/go"; }

  maru_test::TempDir dir_;
  pid_t pid_ = -1;
  std::array<uint64_t, 5> ids_;
};

const std::string kEperm = std::to_string(EPERM);

TEST_F(DirectTest, AnotherUidCannotAbortAVictimsWrite) {
  VictimSession victim(server_.address());
  ASSERT_TRUE(victim.ready());
  for (const char *uid : {"65534", "1002"})
    EXPECT_EQ(
        RunProbe(server_.address(), std::string("uid ") + uid + " + raw-abort " + victim.session() +
                                        " " + victim.writing() + " " + kEperm),
        0);
  EXPECT_EQ(victim.Finish(), 0);  // its seal succeeds
}

TEST_F(DirectTest, AnotherUidCannotCloseAReadersSession) {
  VictimSession victim(server_.address());
  ASSERT_TRUE(victim.ready());
  EXPECT_EQ(RunProbe(server_.address(), "uid 65534 + raw-close " + victim.session() + " " + kEperm),
            0);
  // Space the reader still holds is not handed out while it holds it.
  ASSERT_EQ(RunClient(server_.address(), "store /after-close 4096 + store /after-close2 4096"), 0);
  EXPECT_EQ(victim.Finish(), 0);  // still alive, lease still held
}

TEST_F(DirectTest, AnotherUidCannotOpenByInodeNumber) {
  VictimSession victim(server_.address());
  ASSERT_TRUE(victim.ready());
  EXPECT_EQ(RunProbe(server_.address(),
                     "uid 65534 + raw-open-ino " + victim.writing_ino() + " " + kEperm),
            0);
  // Root may (the chunk is being written: EBUSY, not EPERM).
  EXPECT_EQ(RunProbe(server_.address(),
                     "raw-open-ino " + victim.writing_ino() + " " + std::to_string(EBUSY)),
            0);
  EXPECT_EQ(victim.Finish(), 0);
}

TEST_F(DirectTest, ANewSessionCannotClaimALeaseOnAnotherUidsDeletedChunk) {
  VictimSession victim(server_.address());
  ASSERT_TRUE(victim.ready());
  EXPECT_EQ(RunProbe(server_.address(), "uid 65534 + raw-claim-held " + victim.deleted() + " 0"),
            0);
  EXPECT_EQ(victim.Finish(), 0);
}

TEST_F(DirectTest, OnlyAgentsAskWhetherASessionHoldsExtents) {
  VictimSession victim(server_.address());
  ASSERT_TRUE(victim.ready());
  // CheckExtents is root's (maru-agent's): another uid, or the victim's own,
  // learns nothing from it about the victim's session.
  for (const char *uid : {"65534", "1001"})
    EXPECT_EQ(RunProbe(server_.address(), std::string("uid ") + uid + " + check-extents " +
                                              victim.session() + " 1001 0 0 4096 " + kEperm),
              0);
  // Asked for a session of another uid than the grant's, the answer is no.
  EXPECT_EQ(RunProbe(server_.address(), "check-extents " + victim.session() + " 65534 0 0 4096 " +
                                            std::to_string(ESTALE)),
            0);
  EXPECT_EQ(victim.Finish(), 0);
}

// --- Trust boundaries (docs/security.md) ---------------------------------------

// probe_client as uid 65534 with no groups: it cannot open a root 0660 pool.
std::string AsNobody(const std::string &address, const std::string &args) {
  return "setpriv --reuid=65534 --regid=65534 --clear-groups " + ProbeCommand(address, args);
}

uint64_t ZeroBytesMissing(const void *data, uint64_t size) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  uint64_t nonzero = 0;
  for (uint64_t i = 0; i < size; ++i) nonzero += p[i] != 0;
  return nonzero;
}

// Resident memory of a process, in KiB.
long RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

TEST(TrustBoundaries, AChunkSealedUnwrittenByAWriterWithoutPoolAccessReadsZeros) {
  TestPool pool(64ull << 20);
  ASSERT_EQ(chmod(pool.path().c_str(), 0660), 0);  // root's: uid 65534 cannot map it
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  // A private chunk fills most of the pool, then goes: its bytes stay behind.
  constexpr uint64_t kSize = 48ull << 20;
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  maru_create_opts_t opts{};
  opts.mode = 0600;
  maru_chunk_t *c;
  ASSERT_EQ(maru_create_ex(m, "/secret", kSize, &opts, &c), 0);
  memset(maru_chunk_data(c), 0x5a, kSize);
  ASSERT_EQ(maru_seal(c), 0);
  maru_release(c);
  ASSERT_EQ(maru_unlink(m, "/secret"), 0);
  maru_disconnect(m);  // its lease goes with the session
  // Created and sealed without a byte written; the pool has no room for it
  // outside the secret's extents.
  std::string out;
  ASSERT_EQ(maru_test::Run(AsNobody(server.address(), "create-seal /leak " + std::to_string(kSize)),
                           &out),
            0)
      << out;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(maru_open(m, "/leak", &c), 0);
  ASSERT_EQ(maru_chunk_size(c), kSize);
  EXPECT_EQ(ZeroBytesMissing(maru_chunk_data(c), kSize), 0u);
  maru_release(c);
  maru_disconnect(m);
}

TEST(TrustBoundaries, UnpublishedAllocationsCountAgainstTheUidsQuota) {
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  std::string out;
  ASSERT_EQ(maru_test::Run(maru_test::MaructlBinary() + " quota set --uid 65534 1M --server " +
                               server.address(),
                           &out),
            0)
      << out;
  // Two half-quota allocations under no name fill it: a third is refused
  // (it was checked against what the uid had named, not what it held).
  EXPECT_EQ(maru_test::Run(
                AsNobody(server.address(), "alloc-until 524288 3 " + std::to_string(EDQUOT)), &out),
            0)
      << out;
}

// Legal paths and renames nest directories as deep as the caller likes:
// 60 chains 2000 deep, each renamed into the next, reached ~120,000 levels,
// and the server's walk of a moved tree (the index's) recursed until its
// stack ran out. Directories nest at most 2047 deep now (ENAMETOOLONG, the
// depth a path can name), and no walk of the server recurses.
TEST(TrustBoundaries, DirectoriesNestNoDeeperThanAPathReaches) {
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  std::string out;
  EXPECT_EQ(
      maru_test::Run(AsNobody(server.address(), "nest /n 60 2000 " + std::to_string(ENAMETOOLONG)),
                     &out),
      0)
      << out << server.log();
  // The limit itself: /p1/a/.../x/p0/a/... ends 2046 deep, one more is refused.
  EXPECT_EQ(maru_test::Run(AsNobody(server.address(), "nest /p 2 1022 0"), &out), 0) << out;
  EXPECT_EQ(maru_test::Run(
                AsNobody(server.address(), "nest /q 2 1023 " + std::to_string(ENAMETOOLONG)), &out),
            0)
      << out;
  EXPECT_EQ(maru_test::Run(maru_test::MaructlBinary() + " df --server " + server.address(), &out),
            0)
      << out << server.log();
}

// A directory's quota counts what is renamed into it: creating 1 MiB in
// /qa (128 KiB) was refused, creating it elsewhere and renaming it in was
// not (/qa at 850 %). The rename fails, and nothing moves.
TEST(TrustBoundaries, ARenameIntoADirectoryPastItsQuotaIsRefused) {
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  const std::string addr = server.address();
  auto probe = [&](const std::string &args) {
    std::string out;
    EXPECT_EQ(maru_test::Run(AsNobody(addr, args), &out), 0) << args << ": " << out;
  };
  const std::string edquot = std::to_string(EDQUOT);
  probe("mkdir /qa 755");
  probe("mkdir /qfree 755");
  std::string out;
  ASSERT_EQ(
      maru_test::Run(maru_test::MaructlBinary() + " quota set /qa 128K --server " + addr, &out), 0)
      << out;
  probe("create-seal /qfree/big 1048576");
  probe("rename /qfree/big /qa/big " + edquot);
  probe("mkdir /qfree/tree 755");
  probe("mkdir /qfree/tree/sub 755");
  probe("create-seal /qfree/tree/sub/big 1048576");
  probe("rename /qfree/tree /qa/tree " + edquot);
  probe("create-seal /qfree/small 65536");
  probe("rename /qfree/small /qa/small 0");  // what fits still moves
  // Nothing moved: the files are where they were, and /qa holds 64 KiB.
  for (const char *path : {"/qfree/big", "/qfree/tree/sub/big", "/qa/small"})
    EXPECT_EQ(
        maru_test::Run(maru_test::MaructlBinary() + " stat " + path + " --server " + addr, &out), 0)
        << path << ": " << out;
  ASSERT_EQ(maru_test::Run(maru_test::MaructlBinary() + " quota show --server " + addr, &out), 0);
  EXPECT_NE(out.find("64K"), std::string::npos) << out;
}

// A version removed while it is still read counts for the uid that reads
// it: before, it counted for nobody, and a uid holding its own removed
// files (create, seal keeping the lease, unlink) held the pool under a
// 1 MiB quota. The fifth 256 KiB create is over the quota now.
TEST(TrustBoundaries, RemovedFilesStillReadCountForTheirReader) {
  TestPool pool(64ull << 20);
  Server server(pool.path(), {"--session-timeout-ms", "600", "--heartbeat-ms", "200"});
  ASSERT_TRUE(server.Start());
  std::string out;
  ASSERT_EQ(maru_test::Run(maru_test::MaructlBinary() + " quota set --uid 65534 1M --server " +
                               server.address(),
                           &out),
            0)
      << out;
  EXPECT_EQ(maru_test::Run(
                AsNobody(server.address(), "hold-removed /held 262144 5 " + std::to_string(EDQUOT)),
                &out),
            0)
      << out;
  // The probe's session timed out: its leases, so its charge, went with it.
  EXPECT_TRUE(maru_test::WaitFor([&] {
    maru_test::Run(maru_test::MaructlBinary() + " quota show --json --server " + server.address(),
                   &out);
    return out.find("\"used\":0,") != std::string::npos;
  })) << out;
  EXPECT_EQ(maru_test::Run(AsNobody(server.address(), "hold-removed /again 262144 4 0"), &out), 0)
      << out;
}

// One uid opens at most 1024 sessions (--max-sessions-per-uid); 50,000
// were taken before, each of which may hold leases and reservations.
TEST(TrustBoundaries, OneUidOpensABoundedNumberOfSessions) {
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  std::string out;
  EXPECT_EQ(maru_test::Run(
                AsNobody(server.address(), "sessions-until 1025 " + std::to_string(EMFILE)), &out),
            0)
      << out.substr(out.size() > 2000 ? out.size() - 2000 : 0);
  // Another uid, and root, are not held up by it.
  EXPECT_EQ(maru_test::Run("setpriv --reuid=1001 --regid=1001 --clear-groups " +
                               ProbeCommand(server.address(), "sessions-until 2 0"),
                           &out),
            0)
      << out;
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  maru_disconnect(m);
}

TEST(TrustBoundaries, OversizedRequestsAndGreedySessionsAreRefused) {
  TestPool pool(64ull << 20);
  Server server(pool.path(), {"--max-leases", "8"});
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/pub/x", 4096), 0);
  maru_disconnect(m);
  const std::string addr = server.address();
  auto probe = [&](const std::string &args) {
    std::string out;
    int rc = maru_test::Run(AsNobody(addr, args), &out);
    EXPECT_EQ(rc, 0) << args << ": " << out;
  };
  // One lookup naming a path 100k times: refused whole, before any lease.
  const long rss = RssKb(server.pid());
  probe("lookup-repeat /pub/x 100000 " + std::to_string(E2BIG));
  EXPECT_LT(RssKb(server.pid()) - rss, 16 * 1024);
  probe("lookup-repeat /pub/x 4096 0");  // as many as a batch: answered
  // The ninth lease of a session.
  probe("open-until /pub/x 9 " + std::to_string(EMFILE));
  // A root session (maru-fuse's, one per mount) is not capped.
  std::string out;
  EXPECT_EQ(maru_test::Run(ProbeCommand(addr, "open-until /pub/x 20 0"), &out), 0) << out;
  // Strings a session is described by.
  probe("session-strings 64 255 64 0");
  probe("session-strings 65 0 0 " + std::to_string(ENAMETOOLONG));
  probe("session-strings 0 256 0 " + std::to_string(ENAMETOOLONG));
  probe("session-strings 0 0 65 " + std::to_string(ENAMETOOLONG));
}

}  // namespace
