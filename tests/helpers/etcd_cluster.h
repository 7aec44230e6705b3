// EtcdCluster: real etcd members (/usr/bin/etcd) on loopback for tests, each
// with its own ports and temp data directory; stopped by pid and removed on
// destruction, also when the test fails.
//
// Members run with --heartbeat-interval 25 --election-timeout 250: etcd
// grants 1 s leases (its minimum TTL is ceil(1.5 x election timeout)), and
// losing the member that leads raft leaves the cluster without a leader for
// less than a lease's margin.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "harness.h"

namespace maru_test {

class EtcdCluster {
 public:
  explicit EtcdCluster(int members = 3);
  // One member on each host, at the host's address (ports 2379 and 2380 of
  // its own network namespace).
  explicit EtcdCluster(const std::vector<const NetNs *> &hosts);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster &) = delete;
  EtcdCluster &operator=(const EtcdCluster &) = delete;

  // Starts every member and waits until the cluster answers; false (with
  // the logs on stderr) if it did not.
  bool Start();
  // "127.0.0.1:P1,127.0.0.1:P2,...": the client endpoints.
  std::string endpoints() const;
  const std::string &endpoint(int i) const { return client_[i]; }
  int size() const { return static_cast<int>(client_.size()); }
  void Kill(int i);  // SIGKILL and wait
  // The member that leads raft now, or -1.
  int RaftLeader() const;
  void KillAll();
  bool running(int i) const { return pids_[i] > 0; }
  std::string log(int i) const;

 private:
  TempDir dir_;
  std::string token_;
  std::vector<std::string> client_, peer_;
  std::vector<const NetNs *> hosts_;  // where each member runs (none: here)
  std::vector<pid_t> pids_;
};

// Starts `args` (args[0] a path) with stdout and stderr appended to `log`;
// it is killed if the test dies. Returns its pid.
pid_t SpawnLogged(std::vector<std::string> args, const std::string &log);

}  // namespace maru_test
