// The TCP listeners of a real maru-server under a flood of idle
// connections from another uid, for each way a TCP caller proves who it
// is (none, a bearer token, mutual TLS): honest clients keep being
// served, and the port serves again once the flood is gone. The server
// runs with 1024 descriptors, so that a few thousand connections are a
// flood; the attacker (probe_client tcp-flood, uid 65534) connects from
// 127.2.x.y, the honest client from 127.0.0.1.
//
// The latencies are printed ("figure: ..."), not asserted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using maru_test::Server;
using maru_test::TestPool;

enum class Proof { kNone, kToken, kTls };

std::string Name(Proof p) {
  return p == Proof::kNone ? "plain" : p == Proof::kToken ? "token" : "mtls";
}

std::string ReadFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Probe() {
  return maru_test::BinDir("tests/probe_client");
}

// Runs `command` in its own process (exec'd: a signal reaches it), its
// output into `out_file`.
pid_t Spawn(const std::string &command, const std::string &out_file) {
  const std::string line = "exec " + command + " > " + out_file + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  return pid;
}

class TcpFlood : public ::testing::TestWithParam<Proof> {
 protected:
  void SetUp() override {
    port_ = maru_test::FreePort();
    ASSERT_NE(port_, 0);
    tcp_ = "tcp://127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> args = {"--listen", tcp_};
    const std::string d = dir_.path();
    if (GetParam() == Proof::kToken) {
      std::ofstream(d + "/tokens") << "flood-test-token 1001:1001\n";
      ASSERT_EQ(chmod((d + "/tokens").c_str(), 0600), 0);
      std::ofstream(d + "/token") << "flood-test-token\n";
      args.insert(args.end(), {"--token-file", d + "/tokens"});
      client_env_ = "MARU_TOKEN_FILE=" + d + "/token ";
    } else if (GetParam() == Proof::kTls) {
      ASSERT_TRUE(MakeCertificates()) << "openssl";
      args.insert(args.end(),
                  {"--tls-cert", d + "/server.pem", "--tls-key", d + "/server.key",
                   "--tls-client-ca", d + "/ca.pem", "--tls-identity", "CN=vllm-0=1001:1001"});
      client_env_ = "MARU_TLS_CA=" + d + "/ca.pem MARU_TLS_CERT=" + d +
                    "/client.pem MARU_TLS_KEY=" + d + "/client.key ";
    }
    server_ = std::make_unique<Server>(pool_.path(), args);
    server_->LimitDescriptors(1024);
    ASSERT_TRUE(server_->Start());
  }

  bool MakeCertificates() {
    const std::string script = "cd " + dir_.path() + R"SH( && set -e
      key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out $1 2>/dev/null; }
      key ca.key
      openssl req -x509 -key ca.key -out ca.pem -days 1 -subj /CN=flood-ca 2>/dev/null
      key server.key
      openssl req -new -key server.key -out server.csr -subj /CN=localhost 2>/dev/null
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
        -out server.pem -extfile san 2>/dev/null
      key client.key
      openssl req -new -key client.key -out client.csr -subj /CN=vllm-0 2>/dev/null
      openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
        -out client.pem 2>/dev/null
    )SH";
    return maru_test::Run(script) == 0;
  }

  // 200 calls of an honest client on `address`: "p50 X p99 Y max Z" (µs),
  // or empty if a call failed.
  std::string Ping(const std::string &address) {
    std::string out;
    if (maru_test::Run(client_env_ + Probe() + " " + address + " ping 200", &out) != 0) return "";
    const size_t at = out.find("ping ");
    return at == std::string::npos ? "" : out.substr(at + 5, out.find('\n', at) - at - 5);
  }

  // Starts a flood of SOURCES x EACH idle connections as uid 65534; it
  // holds them until the file GO exists.
  pid_t Flood(int sources, int each, const std::string &go, const std::string &out) {
    pid_t pid = Spawn("setpriv --reuid=65534 --regid=65534 --clear-groups " + Probe() + " " + tcp_ +
                          " tcp-flood " + std::to_string(port_) + " " + std::to_string(sources) +
                          " " + std::to_string(each) + " " + go,
                      out);
    EXPECT_TRUE(maru_test::WaitFor(
        [&] { return ReadFile(out).find("opened") != std::string::npos; }, 30000))
        << ReadFile(out);
    return pid;
  }

  void Figure(const std::string &what, const std::string &value) {
    printf("figure: %s, %s: %s\n", Name(GetParam()).c_str(), what.c_str(),
           value.empty() ? "refused" : value.c_str());
  }

  maru_test::TempDir dir_;
  TestPool pool_{64ull << 20};
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::string tcp_, client_env_;
};

TEST_P(TcpFlood, HonestClientsAreServedDuringAndAfterAFlood) {
  const std::string unix = server_->address();
  std::string before = Ping(tcp_);
  ASSERT_NE(before, "") << server_->log();
  Figure("tcp before", before);
  const std::string d = dir_.path();

  // One peer opens three times the server's descriptors: it gets 64
  // connections (--max-tcp-per-peer), and everyone else is served.
  pid_t one = Flood(1, 3000, d + "/go1", d + "/flood1");
  const std::string during_one = Ping(tcp_);
  EXPECT_NE(during_one, "") << server_->log();
  Figure("tcp during a one-peer flood", during_one);
  EXPECT_NE(Ping(unix), "");
  std::ofstream(d + "/go1").put('x');
  EXPECT_EQ(maru_test::Wait(one), 0) << ReadFile(d + "/flood1");

  // Sixty peers: the listener's share of descriptors is taken (the honest
  // TCP client may be refused meanwhile), the Unix socket's is not.
  pid_t many = Flood(60, 64, d + "/go2", d + "/flood2");
  const std::string unix_during = Ping(unix);
  EXPECT_NE(unix_during, "") << server_->log();
  Figure("unix during a 60-peer flood", unix_during);
  Figure("tcp during a 60-peer flood", Ping(tcp_));
  std::ofstream(d + "/go2").put('x');
  EXPECT_EQ(maru_test::Wait(many), 0) << ReadFile(d + "/flood2");

  // Gone: the port serves again, as soon as the server has seen them go.
  std::string after;
  EXPECT_TRUE(maru_test::WaitFor([&] { return !(after = Ping(tcp_)).empty(); }, 20000))
      << server_->log();
  Figure("tcp after", after);
}

INSTANTIATE_TEST_SUITE_P(Proofs, TcpFlood,
                         ::testing::Values(Proof::kNone, Proof::kToken, Proof::kTls),
                         [](const auto &info) { return Name(info.param); });

// A listener that asks no proof says so when the server starts.
TEST(TcpListener, WithoutTlsOrTokensTheServerWarns) {
  TestPool pool{32ull << 20};
  const int port = maru_test::FreePort();
  Server server{pool.path(), {"--listen", "tcp://127.0.0.1:" + std::to_string(port)}};
  ASSERT_TRUE(server.Start());
  // The server answers on its Unix socket as soon as that listens, which
  // may be before it has reached the TCP listener and said so.
  EXPECT_TRUE(maru_test::WaitFor(
      [&] { return server.log().find("listening without TLS or tokens") != std::string::npos; },
      20000))
      << server.log();
}

}  // namespace
