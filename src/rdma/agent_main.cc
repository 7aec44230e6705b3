// maru-agent: serves the pool of a memory node to hosts without CXL, over
// UCX one-sided get/put. See man/maru-agent.8.
#include <signal.h>
#include <unistd.h>
#include <filesystem>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>

#include "rdma/ucx_agent.h"
#include "util/address.h"
#include "util/flags.h"
#include "util/log.h"

using namespace maru;

namespace {

std::atomic<UcxAgent *> g_agent{nullptr};

int Fail(const std::string &message) {
  fprintf(stderr, "maru-agent: %s\n", message.c_str());
  return 1;
}

// Tells the server which devices this agent serves, and where; the reply
// carries the key the server signs grants with (new after a restart).
int Register(MetaClient &client, const rpc::RegisterAgentRequest &req, UcxAgent *agent) {
  rpc::RegisterAgentRequest r = req;
  rpc::RegisterAgentReply rep;
  int rc = client.Call(&rpc::Meta::Stub::RegisterAgent, r, &rep);
  if (rc == 0) agent->set_grant_key(rep.grant_key());
  return rc;
}

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Whether UCX may pick an RDMA transport here: a device under
// /sys/class/infiniband and UCX_TLS (if set) naming a verbs transport or
// "all". Only RDMA transports check remote keys in hardware.
bool RdmaUsable() {
  std::error_code ec;
  if (std::filesystem::directory_iterator("/sys/class/infiniband", ec) ==
      std::filesystem::directory_iterator())
    return false;
  const char *tls = getenv("UCX_TLS");
  if (!tls || !*tls) return true;
  const std::string t(tls);
  if (t[0] == '^') return true;  // all but some
  for (const char *rdma : {"rc", "ud", "dc", "ib", "all"})
    if (t.find(rdma) != std::string::npos) return true;
  return false;
}

}  // namespace

int main(int argc, char **argv) {
  SetLogTag("maru-agent");
  std::vector<std::string> pools;
  std::string server = kDefaultServerAddress, listen = "tcp://127.0.0.1:7071", advertise,
              log_level = "info", data_path = "auto";
  Flags flags(
      "maru-agent --pool PATH [--pool PATH...] [--server ADDRESS] [--listen tcp://HOST:PORT]",
      "Serves pool devices of this memory node to hosts that cannot map them: remote\n"
      "clients read and write extents with UCX one-sided get/put, under grants that\n"
      "maru-server issues for extents their session holds. UCX picks the transport (UCX_TLS): "
      "RDMA\n"
      "verbs where there is a NIC, TCP where there is none.");
  flags.Strings("pool", &pools,
                "pool device to serve (repeatable); it must belong to the server's pool");
  flags.String("server", &server, "maru-server address");
  flags.String("listen", &listen,
               "where remote clients connect (default tcp://127.0.0.1:7071, loopback only: name\n"
               "the address of a trusted network to serve other hosts; port 0: any free port)");
  flags.String(
      "advertise", &advertise,
      "the address clients are told (default: --listen, with this host's name for 0.0.0.0)");
  flags.String("log-level", &log_level, "error, warn, info or debug");
  flags.String("data-path", &data_path,
               "checked (bytes through the agent, every range checked against its grant), rma\n"
               "(one-sided get/put under remote keys; sound only where the transport enforces\n"
               "keys, i.e. RDMA) or auto (default: rma only when an RDMA device is present and\n"
               "UCX_TLS allows it)");
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 1, &args);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  if (!args.empty()) return Fail("unexpected argument '" + args[0] + "'");
  if (pools.empty()) return Fail("--pool is required");
  if (!SetLogLevel(log_level)) return Fail("unknown log level " + log_level);
  if (data_path != "auto" && data_path != "checked" && data_path != "rma")
    return Fail("--data-path takes checked, rma or auto");
  const bool checked = data_path == "checked" || (data_path == "auto" && !RdmaUsable());
  Result<Address> where = ParseAddress(listen);
  if (!where.ok() || where->kind != Address::Kind::kTcp)
    return Fail("--listen takes tcp://HOST:PORT");

  ClientOptions options;
  options.client_name = "maru-agent";
  Result<std::unique_ptr<MetaClient>> client = MetaClient::Connect(server, options);
  if (!client.ok()) return Fail(client.status().ToString());
  rpc::OpenSessionReply info = (*client)->session_info();

  std::map<uint32_t, std::unique_ptr<PoolDevice>> devices;
  for (const std::string &path : pools) {
    Result<std::unique_ptr<PoolDevice>> dev = PoolDevice::Open(path, {true, Populate::kNever});
    if (!dev.ok()) return Fail(dev.status().message());
    const Uuid &u = (*dev)->superblock().device_uuid;
    const rpc::Device *match = nullptr;
    for (const rpc::Device &d : info.devices())
      if (d.device_uuid() == std::string(u.begin(), u.end()) &&
          d.epoch() == (*dev)->superblock().epoch)
        match = &d;
    if (!match) return Fail(path + " is not a device of the pool that " + server + " serves");
    devices[match->index()] = std::move(*dev);
  }
  rpc::RegisterAgentRequest registration;
  for (const auto &[index, dev] : devices) {
    const Uuid &u = dev->superblock().device_uuid;
    registration.add_device_uuids(std::string(u.begin(), u.end()));
  }
  MetaClient *meta = client->get();
  // After a server restart the registration must be made again.
  std::atomic<bool> resumed{false};
  meta->set_on_resume([&] { resumed = true; });

  Result<std::unique_ptr<UcxAgent>> agent =
      UcxAgent::Start(std::move(*client), std::move(devices), where->host, where->port, checked);
  if (!agent.ok()) return Fail(agent.status().ToString());
  if (advertise.empty()) {
    std::string host = where->host == "0.0.0.0" || where->host == "::" ? Hostname() : where->host;
    advertise = "tcp://" + host + ":" + std::to_string((*agent)->port());
  }
  registration.set_address(advertise);
  // A grant the agent cannot verify may come from a restarted server.
  (*agent)->set_key_refresher([&] { Register(*meta, registration, agent->get()); });
  if (int rc = Register(*meta, registration, agent->get()))
    return Fail("cannot register with " + server + ": " + strerror(-rc));
  LOG_INFO("serving %d device(s) at %s (%s data path)", registration.device_uuids_size(),
           advertise.c_str(), checked ? "checked" : "rma");

  g_agent = agent->get();
  struct sigaction sa {};
  sa.sa_handler = [](int) {
    if (UcxAgent *a = g_agent.load()) a->Stop();
  };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  (*agent)->Run([&] {
    if (resumed.exchange(false)) Register(*meta, registration, agent->get());
  });
  g_agent = nullptr;
  LOG_INFO("stopping");
  return 0;
}
