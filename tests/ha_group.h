// HaGroup: a pool led by one of three maru-servers, each on its own host
// (network and mount namespaces on this machine), elected through three
// etcd members, one per host on the host's own address. Clients reach the
// group over TCP with a token, through the list of all three servers.
// Everything is stopped by pid and removed on destruction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "helpers/etcd_cluster.h"

namespace maru_test {

class HaGroup {
 public:
  static constexpr int kPort = 7413;  // free in each host's own namespace

  // `lease_ttl_s`: the leader's etcd lease (maru-server --lease-ttl-s).
  explicit HaGroup(int lease_ttl_s = 1);
  // Starts etcd and the three servers (as standbys), and waits until one
  // leads; false (with the logs) if not.
  bool Start();
  bool ok() const { return hosts_.ok(); }

  NetNs &host(int i) { return hosts_[i]; }
  Server &server(int i) { return *servers_[i]; }
  EtcdCluster &etcd() { return *etcd_; }
  const std::string &pool() const { return pool_.path(); }
  // "tcp://A:P,tcp://B:P,tcp://C:P": what clients are given.
  std::string servers() const;
  // The environment a client needs (its token), as a command prefix.
  std::string ClientEnv() const;

  // Starts server `i` again, as a standby; true once it follows.
  bool StartStandby(int i);
  // The server that serves now, or -1.
  int Leader();
  // Waits until a server other than `old` serves; returns it, or -1.
  int WaitForNewLeader(int old, int timeout_ms = 20000);
  // The epoch server `i` last said it leads at (its log), 0 if none.
  uint64_t EpochOf(int i);
  // Runs direct_client's `script` on host `h` through the server list.
  int RunClientOn(int h, const std::string &script, std::string *out = nullptr);
  std::string Logs();

 private:
  Hosts hosts_{3};
  TestPool pool_;
  TempDir dir_;
  std::string token_file_, key_file_;
  int lease_ttl_s_;
  std::unique_ptr<EtcdCluster> etcd_;
  std::vector<std::unique_ptr<Server>> servers_;
};

}  // namespace maru_test
