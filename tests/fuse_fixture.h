// The fixture of the mount's tests: a real maru-server on a test pool and
// maru-fuse mounted on it, with shell scripts run on the mount as root or
// as another user.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "harness.h"

namespace maru_test {

// The other users the tests act as: one owns, nobody attacks.
constexpr uid_t kOwner = 1001, kNobody = 65534;

inline std::string Slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string &path, const std::string &data) {
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

}  // namespace maru_test
