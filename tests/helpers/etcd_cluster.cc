#include "helpers/etcd_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace maru_test {

pid_t SpawnLogged(std::vector<std::string> args, const std::string &log) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a dead test leaves nothing behind
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char *> argv;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

EtcdCluster::EtcdCluster(int members) : token_(UniqueName("maru-etcd")) {
  for (int i = 0; i < members; ++i) {
    client_.push_back("127.0.0.1:" + std::to_string(FreePort()));
    peer_.push_back("127.0.0.1:" + std::to_string(FreePort()));
  }
  pids_.assign(members, -1);
}

EtcdCluster::EtcdCluster(const std::vector<const NetNs *> &hosts)
    : token_(UniqueName("maru-etcd")), hosts_(hosts) {
  for (const NetNs *host : hosts) {
    client_.push_back(host->ip() + ":2379");
    peer_.push_back(host->ip() + ":2380");
  }
  pids_.assign(hosts.size(), -1);
}

EtcdCluster::~EtcdCluster() {
  KillAll();
}

std::string EtcdCluster::endpoints() const {
  std::string out;
  for (const std::string &c : client_) out += (out.empty() ? "" : ",") + c;
  return out;
}

std::string EtcdCluster::log(int i) const {
  std::ifstream in(dir_.path() + "/etcd" + std::to_string(i) + ".log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool EtcdCluster::Start() {
  std::string initial;
  for (size_t i = 0; i < peer_.size(); ++i)
    initial += (i ? "," : "") + ("m" + std::to_string(i)) + "=http://" + peer_[i];
  for (size_t i = 0; i < client_.size(); ++i) {
    const std::string name = "m" + std::to_string(i);
    const std::string log = dir_.path() + "/etcd" + std::to_string(i) + ".log";
    std::vector<std::string> args = {"/usr/bin/etcd",
                                     "--name",
                                     name,
                                     "--data-dir",
                                     dir_.path() + "/" + name,
                                     "--listen-client-urls",
                                     "http://" + client_[i],
                                     "--advertise-client-urls",
                                     "http://" + client_[i],
                                     "--listen-peer-urls",
                                     "http://" + peer_[i],
                                     "--initial-advertise-peer-urls",
                                     "http://" + peer_[i],
                                     "--initial-cluster",
                                     initial,
                                     "--initial-cluster-token",
                                     token_,
                                     "--initial-cluster-state",
                                     "new",
                                     "--heartbeat-interval",
                                     "25",
                                     "--election-timeout",
                                     "250",
                                     "--logger",
                                     "zap",
                                     "--log-outputs",
                                     "stderr"};
    if (i < hosts_.size()) {
      std::vector<std::string> on = hosts_[i]->ExecArgs();
      args.insert(args.begin(), on.begin(), on.end());
    }
    pids_[i] = SpawnLogged(std::move(args), log);
  }
  // Healthy: every member answers a linearizable read (it has a leader).
  const bool up = WaitFor(
      [&] {
        for (pid_t &p : pids_)
          if (waitpid(p, nullptr, WNOHANG) == p) {
            p = -1;       // reaped: its pid may be reused
            return true;  // one died: stop waiting
          }
        return Run("ETCDCTL_API=3 /usr/bin/etcdctl --dial-timeout=1s --command-timeout=1s "
                   "--endpoints=" +
                   endpoints() + " endpoint health >/dev/null") == 0;
      },
      30000);
  bool all = up;
  for (pid_t p : pids_) all = all && p > 0;
  if (!all) {
    for (int i = 0; i < size(); ++i) fprintf(stderr, "etcd m%d:\n%s\n", i, log(i).c_str());
  }
  return all;
}

int EtcdCluster::RaftLeader() const {
  for (int i = 0; i < size(); ++i) {
    if (pids_[i] <= 0) continue;
    // "endpoint, id, version, db size, is leader, ...".
    std::string out;
    if (Run("ETCDCTL_API=3 /usr/bin/etcdctl --dial-timeout=1s --command-timeout=1s -w simple "
            "--endpoints=" +
                client_[i] + " endpoint status",
            &out) != 0)
      continue;
    size_t field = 0, pos = 0;
    for (; field < 4 && pos != std::string::npos; ++field) pos = out.find(", ", pos + 1);
    if (pos != std::string::npos && out.compare(pos + 2, 4, "true") == 0) return i;
  }
  return -1;
}

void EtcdCluster::Kill(int i) {
  if (pids_[i] <= 0) return;
  kill(pids_[i], SIGKILL);
  waitpid(pids_[i], nullptr, 0);
  pids_[i] = -1;
}

void EtcdCluster::KillAll() {
  for (int i = 0; i < size(); ++i) Kill(i);
}

}  // namespace maru_test
