// A separate client process for the integration tests: runs a script of
// libmaru_direct operations given on the command line and exits non-zero at
// the first one that does not do what the script expects.
//
//   direct_client ADDRESS CMD ARGS... [+ CMD ARGS...]...
//     uid N                       become uid/gid N (before connecting)
//     store PATH SIZE             create, fill with PATH's pattern, seal
//     store-mode PATH SIZE MODE   store with permission bits MODE (octal)
//     load PATH SIZE POOL         open, check pattern and that it lies in POOL
//     create-errno PATH SIZE ERR  maru_create must fail with -ERR (0: succeed)
//     open-errno PATH ERR         maru_open must return -ERR
//     open-partial-errno PATH ERR maru_open_partial must return -ERR
//     unlink-errno PATH ERR       maru_unlink must return -ERR
//     hint-errno PATH HINT ERR    maru_hint must return -ERR
//     lookup HITS PATH...         maru_lookup_prefix must find HITS, with patterns
//     offset PATH POOL            print where the chunk lies in the POOL file
//     create-and-die PATH SIZE    reserve, write a little, then SIGKILL itself
//     alloc-and-die SIZE          maru_alloc (checking the pool's free bytes drop),
//                                 write a little, then SIGKILL itself
//     count N PATH...             maru_count_prefix must count N
//     create-batch ERR PATH...    maru_create_batch: every path's result must be -ERR
//     store-batch SIZE PATH...    maru_create_batch, fill with each PATH's pattern,
//                                 maru_seal_batch: all must succeed
//     publish PATH SIZE           maru_alloc, fill with PATH's pattern, maru_publish
//     publish-errno PATH ERR      maru_alloc, then maru_publish must return -ERR; an
//                                 allocation still held after an error is released
//     pin-batch ERR PATH...       maru_pin_batch: every path's result must be -ERR
//     unlink-batch ERR PATH...    maru_unlink_batch: every path's result must be -ERR
//     fetch PATH SIZE             open and check the pattern through maru_chunk_data
//     read-into PATH SIZE         open and check the pattern read with maru_read_into
//                                 (in three pieces) and maru_read_into_batch
//     hold-read PATH SIZE GO      open, print "opened", wait for the file GO to
//                                 exist, then read: prints the result
//     publish-hold PATH SIZE PARTS N GO  create in PARTS parts, fill with PATH's
//                                 pattern, publish parts [0, N), print "published",
//                                 wait for the file GO to exist, release unsealed
//     read-part PATH SIZE PARTS I maru_open_partial, wait for part I, check its bytes
//     hold-check PATH SIZE GO     open, print "opened", wait for the file GO to
//                                 exist, copy the bytes in place, then print
//                                 "check " and maru_lease_check's result
//     read-through-outage PATH SIZE  read until a read fails (the agent went
//                                 away), then until one succeeds again
//     store-log DIR COUNT SIZE LOG   store DIR/c0.. one by one, appending each sealed
//                                 path to LOG with when it was sealed (CLOCK_MONOTONIC
//                                 ns); errors (a server away) are retried; COUNT 0:
//                                 until the file LOG.stop exists
//     verify-log LOG SIZE         every path in LOG must hold its bytes
//     churn DIR KEYS SIZE SECONDS rewrite random keys DIR/k* with new versions
//     read-check DIR KEYS SECONDS MIN  read random keys, check each chunk is its own,
//                                 hold one chunk throughout; at least MIN reads
//     connect                     connect now, print "connected"
//     wait-for FILE               wait until FILE exists
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "pattern.h"

namespace {

maru_t *g_maru = nullptr;
const char *g_address = nullptr;

int Fail(const std::string &what, int code) {
  fprintf(stderr, "direct_client: %s\n", what.c_str());
  return code;
}

maru_t *M() {
  if (!g_maru) {
    int rc = maru_connect(g_address, &g_maru);
    if (rc) {
      fprintf(stderr, "direct_client: connect: %s\n", maru_strerror(rc));
      exit(90);
    }
  }
  return g_maru;
}

uint64_t Random() {
  static std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(getpid()));
  return rng() | 1;
}

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Creates `path` with a new version; 0 or a negative errno.
int StoreVersion(const std::string &path, uint64_t size) {
  maru_chunk_t *c;
  int rc = maru_create(M(), path.c_str(), size, &c);
  if (rc) return rc;
  maru_test::FillVersioned(maru_chunk_data(c), size, path, Random());
  rc = maru_seal(c);
  maru_release(c);
  return rc;
}

int StoreLog(const std::string &dir, uint64_t count, uint64_t size, const std::string &log) {
  FILE *out = fopen(log.c_str(), "a");
  if (!out) return Fail("cannot open " + log, 70);
  const std::string stop = log + ".stop";
  for (uint64_t i = 0; count ? i < count : access(stop.c_str(), F_OK) != 0;) {
    std::string path = dir + "/c" + std::to_string(i);
    int rc = StoreVersion(path, size);
    if (rc == -EEXIST) {
      // Sealed before a failure hid the reply, or a reservation left by a
      // crash: only a sealed, readable chunk counts as stored.
      maru_chunk_t *c;
      if (maru_open(M(), path.c_str(), &c) == 0) {
        rc = maru_test::CheckVersioned(maru_chunk_data(c), size, path) ? 0 : -EBADMSG;
        maru_release(c);
      }
    }
    if (rc == 0) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      fprintf(out, "%s %lld\n", path.c_str(), now.tv_sec * 1000000000ll + now.tv_nsec);
      fflush(out);
      ++i;
    } else if (rc == -EBADMSG) {
      return Fail("wrong bytes in " + path, 71);
    } else {
      usleep(20000);  // the server is away, or the name is still held: again
    }
  }
  fclose(out);
  return 0;
}

int VerifyLog(const std::string &log, uint64_t size) {
  std::ifstream in(log);
  std::string line;
  uint64_t checked = 0, bad = 0;
  while (std::getline(in, line)) {
    const std::string path = line.substr(0, line.find(' '));
    maru_chunk_t *c;
    int rc = maru_open(M(), path.c_str(), &c);
    if (rc) {
      fprintf(stderr, "direct_client: %s lost: %s\n", path.c_str(), maru_strerror(rc));
      ++bad;
      continue;
    }
    if (!maru_test::CheckVersioned(maru_chunk_data(c), size, path)) {
      fprintf(stderr, "direct_client: %s holds the wrong bytes\n", path.c_str());
      ++bad;
    }
    maru_release(c);
    ++checked;
  }
  printf("verified %lu chunks, %lu bad\n", static_cast<unsigned long>(checked),
         static_cast<unsigned long>(bad));
  return bad ? 72 : 0;
}

int Churn(const std::string &dir, uint64_t keys, uint64_t size, uint64_t seconds) {
  const int64_t end = NowMs() + static_cast<int64_t>(seconds) * 1000;
  uint64_t stored = 0;
  std::map<int, uint64_t> failures;  // errno -> count, for the record
  while (NowMs() < end) {
    std::string path = dir + "/k" + std::to_string(Random() % keys);
    maru_unlink(M(), path.c_str());
    int rc = StoreVersion(path, size);
    if (rc == 0)
      ++stored;
    else
      ++failures[rc];
  }
  printf("stored %lu versions", static_cast<unsigned long>(stored));
  for (const auto &[rc, n] : failures)
    printf(", %lu x %s", static_cast<unsigned long>(n), maru_strerror(rc));
  printf("\n");
  return stored ? 0 : 73;
}

int ReadCheck(const std::string &dir, uint64_t keys, uint64_t seconds, uint64_t min_reads) {
  // One chunk held from start to end, through all the churn.
  maru_chunk_t *held = nullptr;
  std::string held_path;
  while (!held) {
    held_path = dir + "/k" + std::to_string(Random() % keys);
    if (maru_open(M(), held_path.c_str(), &held) != 0) held = nullptr;
  }
  const int64_t end = NowMs() + static_cast<int64_t>(seconds) * 1000;
  uint64_t reads = 0, violations = 0;
  while (NowMs() < end || reads < min_reads) {
    std::string path = dir + "/k" + std::to_string(Random() % keys);
    maru_chunk_t *c;
    if (maru_open(M(), path.c_str(), &c) != 0) continue;  // evicted or being rewritten
    if (!maru_test::CheckVersioned(maru_chunk_data(c), maru_chunk_size(c), path)) ++violations;
    maru_release(c);
    ++reads;
    if (NowMs() > end + 120000) break;  // fails below rather than hang
  }
  if (!maru_test::CheckVersioned(maru_chunk_data(held), maru_chunk_size(held), held_path))
    ++violations;
  maru_release(held);
  printf("reads %lu violations %lu\n", static_cast<unsigned long>(reads),
         static_cast<unsigned long>(violations));
  return violations ? 74 : reads < min_reads ? 75 : 0;
}

// One command of the script: its name, then its arguments.
struct Command {
  const std::string &op;
  const std::vector<std::string> &words;

  // Argument `i` (1: the first after the name); empty past the last.
  const std::string &arg(size_t i) const {
    static const std::string empty;
    return i < words.size() ? words[i] : empty;
  }
  uint64_t num(size_t i) const { return strtoull(arg(i).c_str(), nullptr, 0); }
  const std::string &operator[](size_t i) const { return words[i]; }
  size_t size() const { return words.size(); }
};

// The commands, each checking what the script expects of one operation and
// exiting with its own code where it does not (see the list above).

int Uid(const Command &cmd) {
  if (setgid(static_cast<gid_t>(cmd.num(1))) || setuid(static_cast<uid_t>(cmd.num(1))))
    return Fail("setuid failed", 2);
  return 0;
}

// Stores arg 1 (size arg 2) holding its pattern; a failed create exits
// with `create_failed`, a failed seal with 11.
int StoreWith(const Command &cmd, const maru_create_opts_t *opts, int create_failed) {
  maru_chunk_t *c = nullptr;
  int rc = maru_create_ex(M(), cmd.arg(1).c_str(), cmd.num(2), opts, &c);
  if (rc) return Fail("create " + cmd.arg(1) + ": " + maru_strerror(rc), create_failed);
  maru_test::FillPattern(maru_chunk_data(c), cmd.num(2), cmd.arg(1));
  rc = maru_seal(c);
  maru_release(c);
  return rc ? Fail("seal " + cmd.arg(1) + ": " + maru_strerror(rc), 11) : 0;
}

int Store(const Command &cmd) {
  return StoreWith(cmd, nullptr, 10);
}

int StoreMode(const Command &cmd) {
  maru_create_opts_t opts{};
  opts.mode = static_cast<uint32_t>(strtoul(cmd.arg(3).c_str(), nullptr, 8));
  return StoreWith(cmd, &opts, 12);
}

int Load(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
  if (rc) return Fail("open " + cmd.arg(1) + ": " + maru_strerror(rc), 20);
  int result = 0;
  if (maru_chunk_size(c) != cmd.num(2))
    result = Fail("wrong size for " + cmd.arg(1), 21);
  else if (!maru_test::CheckPattern(maru_chunk_data(c), cmd.num(2), cmd.arg(1)))
    result = Fail("wrong bytes in " + cmd.arg(1), 22);
  else if (!maru_test::MappedFrom(maru_chunk_data(c), cmd.num(2), cmd.arg(3)))
    result = Fail(cmd.arg(1) + " is not in the pool mapping", 23);
  maru_release(c);
  return result;
}

// Exit 0 when `what` returned -errnum; otherwise says what it returned.
int ExpectErrno(const std::string &what, int rc, uint64_t errnum, int exit_code) {
  return rc == -static_cast<int>(errnum) ? 0
                                         : Fail(what + " gave " + std::to_string(rc), exit_code);
}

// A chunk an errno test opened after all is released before it checks.
int ReleasedAndExpect(const std::string &what, int rc, maru_chunk_t *c, uint64_t errnum,
                      int exit_code) {
  if (rc == 0) maru_release(c);
  return ExpectErrno(what, rc, errnum, exit_code);
}

int CreateErrno(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_create(M(), cmd.arg(1).c_str(), cmd.num(2), &c);
  return ReleasedAndExpect("create " + cmd.arg(1), rc, c, cmd.num(3), 30);
}

int OpenErrno(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
  return ReleasedAndExpect("open " + cmd.arg(1), rc, c, cmd.num(2), 31);
}

int OpenPartialErrno(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open_partial(M(), cmd.arg(1).c_str(), &c);
  return ReleasedAndExpect("open-partial " + cmd.arg(1), rc, c, cmd.num(2), 31);
}

int UnlinkErrno(const Command &cmd) {
  return ExpectErrno("unlink " + cmd.arg(1), maru_unlink(M(), cmd.arg(1).c_str()), cmd.num(2), 32);
}

int HintErrno(const Command &cmd) {
  int rc = maru_hint(M(), cmd.arg(1).c_str(), static_cast<int>(cmd.num(2)));
  return rc == -static_cast<int>(cmd.num(3))
             ? 0
             : Fail("hint " + cmd.arg(1) + " gave " + std::to_string(rc), 32);
}

int Connect(const Command &) {
  M();
  printf("connected\n");
  fflush(stdout);
  return 0;
}

int WaitFor(const Command &cmd) {
  while (access(cmd.arg(1).c_str(), F_OK) != 0) usleep(10000);
  return 0;
}

int Lookup(const Command &cmd) {
  std::vector<const char *> paths;
  for (size_t i = 2; i < cmd.size(); ++i) paths.push_back(cmd[i].c_str());
  std::vector<maru_chunk_t *> out(paths.size());
  size_t hits = 0;
  int rc = maru_lookup_prefix(M(), paths.data(), paths.size(), out.data(), &hits);
  if (rc) return Fail(std::string("lookup: ") + maru_strerror(rc), 40);
  if (hits != cmd.num(1)) return Fail("lookup found " + std::to_string(hits), 41);
  for (size_t i = 0; i < paths.size(); ++i) {
    if (i >= hits) {
      if (out[i]) return Fail("lookup filled a slot past the hits", 42);
      continue;
    }
    if (!maru_test::CheckPattern(maru_chunk_data(out[i]), maru_chunk_size(out[i]), paths[i]))
      return Fail(std::string("wrong bytes in ") + paths[i], 43);
    maru_release(out[i]);
  }
  return 0;
}

int Offset(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
  if (rc) return Fail("open " + cmd.arg(1) + ": " + maru_strerror(rc), 50);
  printf("%llu\n",
         static_cast<unsigned long long>(maru_test::OffsetInFile(maru_chunk_data(c), cmd.arg(2))));
  fflush(stdout);
  maru_release(c);
  return 0;
}

int CreateAndDie(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_create(M(), cmd.arg(1).c_str(), cmd.num(2), &c);
  if (rc) return Fail("create " + cmd.arg(1) + ": " + maru_strerror(rc), 60);
  memset(maru_chunk_data(c), 1, 4096);
  kill(getpid(), SIGKILL);
  return 0;  // not reached
}

int AllocAndDie(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  maru_pool_info_t before, after;
  if (maru_pool_info(M(), &before)) return Fail("pool info", 61);
  int rc = maru_alloc(M(), cmd.num(1), nullptr, &c);
  if (rc) return Fail(std::string("alloc: ") + maru_strerror(rc), 62);
  if (maru_pool_info(M(), &after) || after.free + cmd.num(1) > before.free)
    return Fail("the allocation took no space", 63);
  memset(maru_chunk_data(c), 1, 4096);
  kill(getpid(), SIGKILL);
  return 0;  // not reached
}

int CreateBatch(const Command &cmd) {
  std::vector<maru_create_req_t> reqs;
  for (size_t i = 2; i < cmd.size(); ++i)
    reqs.push_back({cmd[i].c_str(), 4096, nullptr, nullptr, 0});
  int rc = maru_create_batch(M(), reqs.data(), reqs.size(), nullptr);
  if (rc) return Fail(std::string("create-batch: ") + maru_strerror(rc), 67);
  int result = 0;
  for (auto &r : reqs) {
    if (r.result != -static_cast<int>(cmd.num(1)))
      result =
          Fail(std::string("create-batch ") + r.path + " gave " + std::to_string(r.result), 68);
    if (r.chunk) maru_release(r.chunk);
  }
  return result;
}

int StoreBatch(const Command &cmd) {
  std::vector<maru_create_req_t> reqs;
  for (size_t i = 2; i < cmd.size(); ++i)
    reqs.push_back({cmd[i].c_str(), cmd.num(1), nullptr, nullptr, 0});
  int rc = maru_create_batch(M(), reqs.data(), reqs.size(), nullptr);
  if (rc) return Fail(std::string("create-batch: ") + maru_strerror(rc), 71);
  std::vector<maru_chunk_t *> chunks;
  for (auto &r : reqs) {
    if (r.result) return Fail(std::string("create ") + r.path + ": " + maru_strerror(r.result), 72);
    maru_test::FillPattern(maru_chunk_data(r.chunk), cmd.num(1), r.path);
    chunks.push_back(r.chunk);
  }
  std::vector<int> results(chunks.size());
  rc = maru_seal_batch(chunks.data(), chunks.size(), results.data());
  for (maru_chunk_t *h : chunks) maru_release(h);
  if (rc) return Fail(std::string("seal-batch: ") + maru_strerror(rc), 73);
  for (int r : results)
    if (r) return Fail(std::string("seal: ") + maru_strerror(r), 74);
  return 0;
}

int Publish(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_alloc(M(), cmd.num(2), nullptr, &c);
  if (rc) return Fail(std::string("alloc: ") + maru_strerror(rc), 75);
  maru_test::FillPattern(maru_chunk_data(c), cmd.num(2), cmd.arg(1));
  rc = maru_publish(c, cmd.arg(1).c_str(), nullptr);
  maru_release(c);
  return rc ? Fail("publish " + cmd.arg(1) + ": " + maru_strerror(rc), 76) : 0;
}

int PublishErrno(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_alloc(M(), 4096, nullptr, &c);
  if (rc) return Fail(std::string("alloc: ") + maru_strerror(rc), 69);
  rc = maru_publish(c, cmd.arg(1).c_str(), nullptr);
  maru_release(c);
  return rc == -static_cast<int>(cmd.num(2))
             ? 0
             : Fail("publish " + cmd.arg(1) + " gave " + std::to_string(rc), 70);
}

int PathBatch(const Command &cmd) {
  std::vector<const char *> paths;
  for (size_t i = 2; i < cmd.size(); ++i) paths.push_back(cmd[i].c_str());
  std::vector<int> results(paths.size());
  size_t count = 0;
  int rc = cmd.op == "count" ? maru_count_prefix(M(), paths.data(), paths.size(), &count)
           : cmd.op == "pin-batch"
               ? maru_pin_batch(M(), paths.data(), paths.size(), 0, results.data())
               : maru_unlink_batch(M(), paths.data(), paths.size(), results.data());
  if (rc) return Fail(cmd.op + ": " + maru_strerror(rc), 64);
  if (cmd.op == "count")
    return count == cmd.num(1) ? 0 : Fail("counted " + std::to_string(count), 65);
  for (size_t i = 0; i < paths.size(); ++i)
    if (results[i] != -static_cast<int>(cmd.num(1)))
      return Fail(cmd.op + " " + paths[i] + " gave " + std::to_string(results[i]), 66);
  return 0;
}

// Writes only the first half: the rest must read as zeros, whatever
// buffer the library stages the chunk in.
int StoreHalf(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_create(M(), cmd.arg(1).c_str(), cmd.num(2), &c);
  if (rc) return Fail("create " + cmd.arg(1) + ": " + maru_strerror(rc), 90);
  maru_test::FillPattern(maru_chunk_data(c), cmd.num(2) / 2, cmd.arg(1));
  rc = maru_seal(c);
  maru_release(c);
  return rc ? Fail("seal " + cmd.arg(1) + ": " + maru_strerror(rc), 91) : 0;
}

int CheckHalf(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
  if (rc) return Fail("open " + cmd.arg(1) + ": " + maru_strerror(rc), 92);
  const uint64_t size = cmd.num(2), half = size / 2;
  const auto *data = static_cast<const uint8_t *>(maru_chunk_data(c));
  int result = 0;
  if (!data || maru_chunk_size(c) != size)
    result = Fail("cannot read " + cmd.arg(1), 93);
  else if (!maru_test::CheckPattern(data, half, cmd.arg(1)))
    result = Fail("wrong bytes in the first half of " + cmd.arg(1), 94);
  else if (std::any_of(data + half / 8 * 8, data + size, [](uint8_t b) { return b != 0; }))
    result = Fail("bytes of another chunk in the unwritten half of " + cmd.arg(1), 95);
  maru_release(c);
  return result;
}

// Two chunks of one size stored one after the other are staged in the
// same registered buffer (remote mode).
int StagingReused(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  void *first = nullptr;
  for (const std::string &path : {cmd.arg(1) + ".1", cmd.arg(1) + ".2"}) {
    int rc = maru_create(M(), path.c_str(), cmd.num(2), &c);
    if (rc) return Fail("create " + path + ": " + maru_strerror(rc), 96);
    void *data = maru_chunk_data(c);
    maru_test::FillPattern(data, cmd.num(2), path);
    rc = maru_seal(c);
    maru_release(c);
    if (rc) return Fail("seal " + path + ": " + maru_strerror(rc), 97);
    if (first && data != first) return Fail("a new staging buffer for every chunk", 98);
    first = data;
  }
  return 0;
}

int FetchOrReadInto(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
  if (rc) return Fail("open " + cmd.arg(1) + ": " + maru_strerror(rc), 80);
  const uint64_t size = cmd.num(2);
  int result = 0;
  if (cmd.op == "fetch") {
    void *data = maru_chunk_data(c);
    if (!data)
      result = Fail("fetch failed", 81);
    else if (!maru_test::CheckPattern(data, size, cmd.arg(1)))
      result = Fail("wrong bytes", 82);
  } else {
    std::vector<uint8_t> buf(size);
    const uint64_t third = size / 3 / 8 * 8;
    rc = maru_read_into(c, buf.data(), 0, third);
    if (rc == 0) rc = maru_read_into(c, buf.data() + third, third, size - third);
    if (rc)
      result = Fail(std::string("read_into: ") + maru_strerror(rc), 83);
    else if (!maru_test::CheckPattern(buf.data(), size, cmd.arg(1)))
      result = Fail("wrong bytes", 84);
    std::vector<uint8_t> again(size);
    maru_read_op_t ops[2] = {{c, again.data(), 0, size / 2},
                             {c, again.data() + size / 2, size / 2, size - size / 2}};
    rc = maru_read_into_batch(ops, 2);
    if (!result && (rc || again != buf)) result = Fail("read_into_batch", 85);
  }
  maru_release(c);
  return result;
}

int HoldRead(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
  if (rc) return Fail("open " + cmd.arg(1) + ": " + maru_strerror(rc), 88);
  printf("opened\n");
  fflush(stdout);
  while (access(cmd.arg(3).c_str(), F_OK) != 0) usleep(10000);
  std::vector<uint8_t> buf(cmd.num(2));
  rc = maru_read_into(c, buf.data(), 0, buf.size());
  const bool mine = rc == 0 && maru_test::CheckPattern(buf.data(), buf.size(), cmd.arg(1));
  printf("read %s%s\n", rc ? maru_strerror(rc) : "ok", rc == 0 && !mine ? " WRONG BYTES" : "");
  maru_release(c);
  return 0;
}

// PATH SIZE PARTS N GO
int PublishHold(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  maru_create_opts_t opts{};
  opts.parts = static_cast<uint32_t>(cmd.num(3));
  int rc = maru_create_ex(M(), cmd.arg(1).c_str(), cmd.num(2), &opts, &c);
  if (rc) return Fail("create " + cmd.arg(1) + ": " + maru_strerror(rc), 90);
  maru_test::FillPattern(maru_chunk_data(c), cmd.num(2), cmd.arg(1));
  for (uint32_t i = 0; i < cmd.num(4); ++i)
    if ((rc = maru_publish_part(c, i)))
      return Fail("publish_part: " + std::string(maru_strerror(rc)), 91);
  printf("published\n");
  fflush(stdout);
  while (access(cmd.arg(5).c_str(), F_OK) != 0) usleep(10000);
  maru_release(c);  // unsealed: abandoned
  return 0;
}

// PATH SIZE PARTS I
int ReadPart(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open_partial(M(), cmd.arg(1).c_str(), &c);
  if (rc) return Fail("open_partial " + cmd.arg(1) + ": " + maru_strerror(rc), 92);
  const uint64_t size = cmd.num(2), part = size / cmd.num(3), i = cmd.num(4);
  if (maru_chunk_parts(c) != cmd.num(3)) return Fail("wrong part count", 93);
  if ((rc = maru_wait_part(c, static_cast<uint32_t>(i), 30000)))
    return Fail("wait_part: " + std::string(maru_strerror(rc)), 94);
  std::vector<uint8_t> whole(size), got(part);
  maru_test::FillPattern(whole.data(), size, cmd.arg(1));
  if ((rc = maru_read_into(c, got.data(), i * part, part)))
    return Fail("read_into: " + std::string(maru_strerror(rc)), 95);
  if (memcmp(got.data(), whole.data() + i * part, part)) return Fail("WRONG BYTES", 96);
  maru_release(c);
  return 0;
}

int HoldCheck(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
  if (rc) return Fail("open " + cmd.arg(1) + ": " + maru_strerror(rc), 88);
  printf("opened\n");
  fflush(stdout);
  while (access(cmd.arg(3).c_str(), F_OK) != 0) usleep(10000);
  std::vector<uint8_t> buf(cmd.num(2));
  memcpy(buf.data(), maru_chunk_data(c), buf.size());
  rc = maru_lease_check(c);
  const bool mine = maru_test::CheckPattern(buf.data(), buf.size(), cmd.arg(1));
  printf("check %s%s\n", rc ? maru_strerror(rc) : "ok", mine ? "" : " (other bytes)");
  maru_release(c);
  return rc == 0 && !mine ? Fail("WRONG BYTES passed the check", 89) : 0;
}

int ReadThroughOutage(const Command &cmd) {
  maru_chunk_t *c = nullptr;
  std::vector<uint8_t> buf(cmd.num(2));
  bool saw_error = false;
  for (int i = 0; i < 100000; ++i) {
    int rc = maru_open(M(), cmd.arg(1).c_str(), &c);
    if (rc == 0) {
      rc = maru_read_into(c, buf.data(), 0, buf.size());
      if (rc == 0 && !maru_test::CheckPattern(buf.data(), buf.size(), cmd.arg(1)))
        return Fail("wrong bytes", 86);
      maru_release(c);
    }
    if (rc && !saw_error) {
      printf("error %s\n", maru_strerror(rc));
      fflush(stdout);
      saw_error = true;
    } else if (rc == 0 && saw_error) {
      printf("recovered\n");
      return 0;
    } else if (rc == 0 && i % 10 == 0) {
      printf("reading\n");
      fflush(stdout);
    }
    if (rc) usleep(50000);
  }
  return Fail("never failed and recovered", 87);
}

int RunCommand(const std::vector<std::string> &words) {
  static const std::map<std::string, int (*)(const Command &)> kCommands = {
      {"uid", Uid},
      {"store", Store},
      {"store-mode", StoreMode},
      {"load", Load},
      {"create-errno", CreateErrno},
      {"open-errno", OpenErrno},
      {"open-partial-errno", OpenPartialErrno},
      {"unlink-errno", UnlinkErrno},
      {"hint-errno", HintErrno},
      {"connect", Connect},
      {"wait-for", WaitFor},
      {"lookup", Lookup},
      {"offset", Offset},
      {"create-and-die", CreateAndDie},
      {"alloc-and-die", AllocAndDie},
      {"create-batch", CreateBatch},
      {"store-batch", StoreBatch},
      {"publish", Publish},
      {"publish-errno", PublishErrno},
      {"count", PathBatch},
      {"pin-batch", PathBatch},
      {"unlink-batch", PathBatch},
      {"store-half", StoreHalf},
      {"check-half", CheckHalf},
      {"staging-reused", StagingReused},
      {"fetch", FetchOrReadInto},
      {"read-into", FetchOrReadInto},
      {"hold-read", HoldRead},
      {"publish-hold", PublishHold},
      {"read-part", ReadPart},
      {"hold-check", HoldCheck},
      {"read-through-outage", ReadThroughOutage},
      {"store-log",
       [](const Command &cmd) { return StoreLog(cmd.arg(1), cmd.num(2), cmd.num(3), cmd.arg(4)); }},
      {"verify-log", [](const Command &cmd) { return VerifyLog(cmd.arg(1), cmd.num(2)); }},
      {"churn",
       [](const Command &cmd) { return Churn(cmd.arg(1), cmd.num(2), cmd.num(3), cmd.num(4)); }},
      {"read-check",
       [](const Command &cmd) {
         return ReadCheck(cmd.arg(1), cmd.num(2), cmd.num(3), cmd.num(4));
       }},
  };
  const Command cmd{words[0], words};
  auto it = kCommands.find(cmd.op);
  if (it == kCommands.end()) return Fail("unknown command " + cmd.op, 99);
  return it->second(cmd);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) return Fail("usage: direct_client ADDRESS CMD ARGS... [+ CMD ARGS...]", 98);
  g_address = argv[1];
  std::vector<std::string> cmd;
  for (int i = 2; i <= argc; ++i) {
    if (i == argc || std::string(argv[i]) == "+") {
      if (cmd.empty()) continue;
      if (int rc = RunCommand(cmd)) return rc;
      cmd.clear();
      continue;
    }
    cmd.emplace_back(argv[i]);
  }
  if (g_maru) maru_disconnect(g_maru);
  return 0;
}
