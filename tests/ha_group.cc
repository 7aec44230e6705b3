#include "ha_group.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace maru_test {

HaGroup::HaGroup(int lease_ttl_s)
    : pool_(256ull << 20, 64u << 10, "", "--log-size 16M"), lease_ttl_s_(lease_ttl_s) {
  const std::string token = UniqueName("ha-token");
  token_file_ = dir_.path() + "/tokens";
  std::ofstream(token_file_) << token << " 0:0\n";
  chmod(token_file_.c_str(), 0600);
  std::ofstream(dir_.path() + "/token") << token << "\n";
  // The servers sign the replication log's records with a shared secret.
  key_file_ = dir_.path() + "/replication.key";
  std::ofstream(key_file_) << UniqueName("replication-key-of-the-test-group") << "\n";
  chmod(key_file_.c_str(), 0600);
}

bool HaGroup::Start() {
  if (!hosts_.ok()) return false;
  etcd_ =
      std::make_unique<EtcdCluster>(std::vector<const NetNs *>{&hosts_[0], &hosts_[1], &hosts_[2]});
  if (!etcd_->Start()) return false;
  for (int i = 0; i < 3; ++i) {
    const std::string tcp = "tcp://" + hosts_[i].ip() + ":" + std::to_string(kPort);
    servers_.push_back(std::make_unique<Server>(
        pool_.path(),
        std::vector<std::string>{"--etcd", etcd_->endpoints(), "--member", "h" + std::to_string(i),
                                 "--listen", tcp, "--advertise", tcp, "--token-file", token_file_,
                                 "--lease-ttl-s", std::to_string(lease_ttl_s_),
                                 "--replication-key-file", key_file_}));
    servers_[i]->RunOn(&hosts_[i]);
    if (!StartStandby(i)) return false;
  }
  if (WaitFor([&] { return Leader() >= 0; }, 20000)) return true;
  fprintf(stderr, "no server leads:\n%s\n", Logs().c_str());
  return false;
}

bool HaGroup::StartStandby(int i) {
  Server &s = *servers_[i];
  const size_t before = s.log().size();
  return s.StartWhen(
      [&] { return s.log().find("standby: following", before) != std::string::npos; });
}

std::string HaGroup::servers() const {
  std::string list;
  for (int i = 0; i < 3; ++i)
    list += (i ? "," : "") + ("tcp://" + hosts_[i].ip() + ":" + std::to_string(kPort));
  return list;
}

std::string HaGroup::ClientEnv() const {
  return "env MARU_TOKEN_FILE=" + dir_.path() + "/token ";
}

int HaGroup::Leader() {
  for (int i = 0; i < 3; ++i)
    if (servers_[i]->running() && servers_[i]->Serves()) return i;
  return -1;
}

int HaGroup::WaitForNewLeader(int old, int timeout_ms) {
  int leader = -1;
  WaitFor(
      [&] {
        for (int i = 0; i < 3; ++i)
          if (i != old && servers_[i]->running() && servers_[i]->Serves()) leader = i;
        return leader >= 0;
      },
      timeout_ms);
  return leader;
}

uint64_t HaGroup::EpochOf(int i) {
  const std::string log = servers_[i]->log();
  const size_t at = log.rfind("leading at epoch ");
  return at == std::string::npos ? 0 : strtoull(log.c_str() + at + 17, nullptr, 10);
}

int HaGroup::RunClientOn(int h, const std::string &script, std::string *out) {
  return Run(hosts_[h].Exec() + ClientEnv() + ClientCommand(servers(), script), out);
}

std::string HaGroup::Logs() {
  std::string all;
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i)
    all += "--- server " + std::to_string(i) + ":\n" + servers_[i]->log();
  return all;
}

}  // namespace maru_test
