// A separate client process for the integration tests: runs a script of
// libmaru_direct operations given on the command line and exits non-zero at
// the first one that does not do what the script expects.
//
//   direct_client ADDRESS CMD ARGS... [+ CMD ARGS...]...
//     uid N                       become uid/gid N (before connecting)
//     store PATH SIZE             create, fill with PATH's pattern, seal
//     load PATH SIZE POOL         open, check pattern and that it lies in POOL
//     create-errno PATH SIZE ERR  maru_create must fail with -ERR (0: succeed)
//     open-errno PATH ERR         maru_open must return -ERR
//     unlink-errno PATH ERR       maru_unlink must return -ERR
//     lookup HITS PATH...         maru_lookup_prefix must find HITS, with patterns
//     offset PATH POOL            print where the chunk lies in the POOL file
//     create-and-die PATH SIZE    reserve, write a little, then SIGKILL itself
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

int RunCommand(const std::vector<std::string> &cmd) {
  const std::string &op = cmd[0];
  auto arg = [&](size_t i) -> const std::string & {
    static const std::string empty;
    return i < cmd.size() ? cmd[i] : empty;
  };
  auto num = [&](size_t i) { return strtoull(arg(i).c_str(), nullptr, 0); };
  maru_chunk_t *c = nullptr;
  if (op == "uid") {
    if (setgid(static_cast<gid_t>(num(1))) || setuid(static_cast<uid_t>(num(1))))
      return Fail("setuid failed", 2);
    return 0;
  }
  if (op == "store") {
    int rc = maru_create(M(), arg(1).c_str(), num(2), &c);
    if (rc) return Fail("create " + arg(1) + ": " + maru_strerror(rc), 10);
    maru_test::FillPattern(maru_chunk_data(c), num(2), arg(1));
    rc = maru_seal(c);
    maru_release(c);
    return rc ? Fail("seal " + arg(1) + ": " + maru_strerror(rc), 11) : 0;
  }
  if (op == "load") {
    int rc = maru_open(M(), arg(1).c_str(), &c);
    if (rc) return Fail("open " + arg(1) + ": " + maru_strerror(rc), 20);
    int result = 0;
    if (maru_chunk_size(c) != num(2)) result = Fail("wrong size for " + arg(1), 21);
    else if (!maru_test::CheckPattern(maru_chunk_data(c), num(2), arg(1)))
      result = Fail("wrong bytes in " + arg(1), 22);
    else if (!maru_test::MappedFrom(maru_chunk_data(c), num(2), arg(3)))
      result = Fail(arg(1) + " is not in the pool mapping", 23);
    maru_release(c);
    return result;
  }
  if (op == "create-errno") {
    int rc = maru_create(M(), arg(1).c_str(), num(2), &c);
    if (rc == 0) maru_release(c);
    return rc == -static_cast<int>(num(3)) ? 0 : Fail("create " + arg(1) + " gave " + std::to_string(rc), 30);
  }
  if (op == "open-errno") {
    int rc = maru_open(M(), arg(1).c_str(), &c);
    if (rc == 0) maru_release(c);
    return rc == -static_cast<int>(num(2)) ? 0 : Fail("open " + arg(1) + " gave " + std::to_string(rc), 31);
  }
  if (op == "unlink-errno") {
    int rc = maru_unlink(M(), arg(1).c_str());
    return rc == -static_cast<int>(num(2)) ? 0 : Fail("unlink " + arg(1) + " gave " + std::to_string(rc), 32);
  }
  if (op == "lookup") {
    std::vector<const char *> paths;
    for (size_t i = 2; i < cmd.size(); ++i) paths.push_back(cmd[i].c_str());
    std::vector<maru_chunk_t *> out(paths.size());
    size_t hits = 0;
    int rc = maru_lookup_prefix(M(), paths.data(), paths.size(), out.data(), &hits);
    if (rc) return Fail(std::string("lookup: ") + maru_strerror(rc), 40);
    if (hits != num(1)) return Fail("lookup found " + std::to_string(hits), 41);
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
  if (op == "offset") {
    int rc = maru_open(M(), arg(1).c_str(), &c);
    if (rc) return Fail("open " + arg(1) + ": " + maru_strerror(rc), 50);
    printf("%llu\n", static_cast<unsigned long long>(maru_test::OffsetInFile(maru_chunk_data(c), arg(2))));
    fflush(stdout);
    maru_release(c);
    return 0;
  }
  if (op == "create-and-die") {
    int rc = maru_create(M(), arg(1).c_str(), num(2), &c);
    if (rc) return Fail("create " + arg(1) + ": " + maru_strerror(rc), 60);
    memset(maru_chunk_data(c), 1, 4096);
    kill(getpid(), SIGKILL);
  }
  return Fail("unknown command " + op, 99);
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
