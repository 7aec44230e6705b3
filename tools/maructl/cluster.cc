// maructl cluster status: the servers of a pool, as etcd and the pool see
// them (docs/ha.md). Reads only: etcd's keys and the pool's control page.
#include <cinttypes>
#include <cstdio>

#include "alloc/pool_control.h"
#include "alloc/pool_device.h"
#include "common/json_output.h"
#include "ha/leader_election.h"
#include "maructl/maructl.h"
#include "util/clock.h"

namespace maru::ctl {
namespace {

struct ClusterView {
  Superblock sb;
  LeaderRecord pool_leader;  // from the control page
  uint64_t fence_epoch = 0;
  std::optional<LeaderInfo> leader;  // from etcd
  std::vector<MemberInfo> members;
  std::string etcd_error;
};

Result<ClusterView> Look(const std::string &pool, const std::string &etcd) {
  ClusterView view;
  PoolDevice::OpenOptions ro;
  ro.writable = false;
  Result<std::unique_ptr<PoolDevice>> device = PoolDevice::Open(pool, ro);
  if (!device.ok()) return device.status();
  view.sb = (*device)->superblock();
  Result<PoolControl> control = PoolControl::At((*device)->base(), view.sb);
  if (!control.ok()) return control.status();
  view.fence_epoch = control->FenceEpoch();
  view.pool_leader = control->Leader();
  if (etcd.empty()) return view;
  EtcdOptions options;
  options.endpoints = ParseEtcdEndpoints(etcd);
  Result<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(options);
  if (!client.ok()) return client.status();
  const std::string uuid = UuidToString(view.sb.pool_uuid);
  Result<std::optional<LeaderInfo>> leader = LeaderElection::ReadLeader(client->get(), uuid);
  Result<std::vector<MemberInfo>> members = LeaderElection::ReadMembers(client->get(), uuid);
  if (!leader.ok() || !members.ok()) {
    view.etcd_error = (leader.ok() ? members.status() : leader.status()).message();
    return view;
  }
  view.leader = *leader;
  view.members = *members;
  return view;
}

void Print(const std::string &pool, const ClusterView &v) {
  printf("pool         %s (%s)\n", UuidToString(v.sb.pool_uuid).c_str(), pool.c_str());
  printf("fence epoch  %" PRIu64 "%s\n", v.fence_epoch,
         v.fence_epoch ? "" : " (never led through etcd)");
  if (!v.pool_leader.id.empty())
    printf("pool says    %s at %s, heartbeat %.1f s ago\n", v.pool_leader.id.c_str(),
           v.pool_leader.endpoint.c_str(), (RealtimeNs() - v.pool_leader.heartbeat_ns) / 1e9);
  if (!v.etcd_error.empty()) {
    printf("etcd         unreachable: %s\n", v.etcd_error.c_str());
    return;
  }
  if (v.leader)
    printf("leader       %s at %s, epoch %" PRIu64 "\n", v.leader->id.c_str(),
           v.leader->endpoint.c_str(), v.leader->epoch);
  else
    printf("leader       none (an election is under way, or no member may lead)\n");
  printf("\n%-12s %-28s %-8s %14s  %s\n", "MEMBER", "ENDPOINT", "ROLE", "LAG (BYTES)", "ELECTABLE");
  for (const MemberInfo &m : v.members) {
    const bool leads = v.leader && v.leader->id == m.id;
    printf("%-12s %-28s %-8s %14" PRId64 "  %s\n", m.id.c_str(), m.endpoint.c_str(),
           leads ? "leader" : "standby", leads ? 0 : m.lag,
           leads ? "-" : (m.electable ? "yes" : "no: behind"));
  }
}

Json ToJson(const std::string &pool, const ClusterView &v) {
  Json j;
  j["pool"] = pool;
  j["pool_uuid"] = UuidToString(v.sb.pool_uuid);
  j["fence_epoch"] = v.fence_epoch;
  j["pool_leader"] = {{"id", v.pool_leader.id},
                      {"endpoint", v.pool_leader.endpoint},
                      {"heartbeat_ns", v.pool_leader.heartbeat_ns}};
  if (!v.etcd_error.empty()) j["etcd_error"] = v.etcd_error;
  if (v.leader)
    j["leader"] = {
        {"id", v.leader->id}, {"endpoint", v.leader->endpoint}, {"epoch", v.leader->epoch}};
  Json members = Json::array();
  for (const MemberInfo &m : v.members)
    members.push_back(
        {{"id", m.id}, {"endpoint", m.endpoint}, {"lag", m.lag}, {"electable", m.electable}});
  j["members"] = members;
  return j;
}

}  // namespace

int Cluster(int argc, char **argv) {
  std::string pool, etcd;
  bool json = false;
  Flags flags("maructl cluster status --pool PATH [--etcd HOST:PORT,...] [--json]",
              "The servers of a pool: the leader and its epoch, each standby's lag, as etcd\n"
              "and the pool's control page see them.");
  flags.String("pool", &pool, "the pool device");
  flags.String("etcd", &etcd, "etcd endpoints (without: the pool's view only)");
  flags.Bool("json", &json, "print JSON");
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 3, &args);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  if (argc < 3 || std::string(argv[2]) != "status" || !args.empty())
    return Fail("unknown cluster command (maructl cluster status --pool PATH [--etcd ...])");
  if (pool.empty()) return Fail("cluster status needs --pool PATH");
  Result<ClusterView> view = Look(pool, etcd);
  if (!view.ok()) return Fail(view.status().message());
  if (json)
    PrintJson(ToJson(pool, *view));
  else
    Print(pool, *view);
  return view->etcd_error.empty() ? 0 : 1;
}

}  // namespace maru::ctl
