// maru-server: the metadata server. See man/maru-server.8.
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "ha/ha_member.h"
#include "ha/snapshot_service.h"
#include "ha/standby_server.h"
#include "meta/acceptor.h"
#include "meta/connection_gate.h"
#include "meta/fast_lane_server.h"
#include "meta/identity.h"
#include "meta/meta_engine.h"
#include "meta/meta_service.h"
#include "meta/metrics_server.h"
#include "meta/tcp_credentials.h"
#include "meta/tcp_relay.h"
#include "proto/fast_lane.h"
#include "util/address.h"
#include "util/flags.h"
#include "util/log.h"
#include "util/mutex.h"

using namespace maru;

namespace {

constexpr const char *kDefaultConfig = MARU_SYSCONFDIR "/maru/maru-server.conf";

struct ServerFlags {
  std::vector<std::string> pools, listen;
  std::string db = "/var/lib/maru/db";
  bool standby = false;
  std::string etcd, member, advertise;
  int64_t lease_ttl_s = 1, leader_silence_ms = 400;
  std::string snapshot_from, replication_key_file;
  std::string config;
  std::string log_level = "info";
  std::string root_mode = "1777";
  std::string eviction = "frequency";
  std::string metrics_listen;
  int64_t session_timeout_ms = 15000;
  int64_t heartbeat_ms = 3000;
  int64_t grace_ms = -1;
  int64_t max_fragments = 64;
  // What one request and one session may ask (meta/client_limits.h); 0: no limit.
  Limits d;
  int64_t max_keys = d.keys_per_call, max_leases = d.leases_per_session,
          max_reservations = d.reservations_per_session, max_pins = d.pins_per_session,
          max_sessions_per_uid = d.sessions_per_uid;
  double high_watermark = 0.95, low_watermark = 0.90;
  bool sync = false, squash_tcp = true, no_fast_lane = false, no_index = false,
       no_idle_poll = false;
  std::string tcp_fast_lane = "auto";
  int64_t tcp_fast_lane_port = 0;
  std::string index_path;
  int64_t index_entries = 0, index_sessions = 256, index_sessions_per_uid = 0;
  ConnectionGate::Limits g;
  int64_t max_tcp_connections = g.tcp_per_listener, max_tcp_per_peer = g.tcp_per_peer;
  TcpAuthConfig tcp;
};

HaMemberOptions MemberOptions(const ServerFlags &f, const std::vector<Address> &addresses,
                              const std::string &log_key) {
  HaMemberOptions m;
  m.log_key = log_key;
  m.pool = f.pools[0];
  m.db = f.db;
  m.sync_writes = f.sync;
  m.election.etcd.endpoints = ParseEtcdEndpoints(f.etcd);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  m.election.id = f.member.empty() ? host : f.member;
  m.election.endpoint = f.advertise.empty() ? addresses[0].ToString() : f.advertise;
  m.election.ttl_s = f.lease_ttl_s;
  m.election.silence_ms = f.leader_silence_ms;
  return m;
}

pthread_t g_main_thread;  // where SIGINT and SIGTERM are taken (sigwait)

int Fail(const std::string &message) {
  fprintf(stderr, "maru-server: %s\n", message.c_str());
  return 1;
}

// The process's limit on descriptors, raised to the hard limit first: every
// client connection and RocksDB file is one.
uint64_t RaiseDescriptorLimit() {
  rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 1024;
  if (files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_NOFILE, &files);
  }
  return files.rlim_cur == RLIM_INFINITY ? 1u << 20 : files.rlim_cur;
}

// Who may listen on TCP without proof is said at start: such a listener
// makes every caller nobody, and tokens without TLS cross the network in
// clear.
void WarnAboutPlainTcp(const TcpAuthConfig &tcp, const Address &a) {
  if (!tcp.tls_cert.empty()) return;
  if (tcp.token_file.empty())
    LOG_WARN(
        "%s: listening without TLS or tokens: every TCP caller is nobody, and what it "
        "sends and reads crosses the network in clear (docs/security.md, TCP)",
        a.ToString().c_str());
  else
    LOG_WARN(
        "%s: listening with tokens but without TLS: tokens and data cross the network in "
        "clear (docs/security.md, TCP)",
        a.ToString().c_str());
}

// A directory only this server may enter, for the Unix sockets gRPC
// serves TCP callers on behind the relays (meta/tcp_relay.h):
// TMPDIR/maru-server-PID-XXXXXX. Removed with what it holds when the
// server returns from main, on every path; one a killed server left is
// removed by the next start (its process is gone).
class PrivateDirectory {
 public:
  ~PrivateDirectory() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  Status Make() {
    if (!path_.empty()) return Status::Ok();
    const char *tmp = getenv("TMPDIR");
    const std::string parent = tmp && *tmp ? tmp : "/tmp";
    RemoveStale(parent);
    std::string dir = parent + "/maru-server-" + std::to_string(getpid()) + "-XXXXXX";
    if (!mkdtemp(dir.data())) return Status::Error(errno, "cannot make a directory in " + parent);
    path_ = dir;
    return Status::Ok();
  }
  const std::string &path() const { return path_; }

 private:
  // This user's directories of servers that no longer run.
  static void RemoveStale(const std::string &parent) {
    std::error_code ec;
    for (const auto &entry : std::filesystem::directory_iterator(parent, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("maru-server-", 0) != 0) continue;
      const long pid = strtol(name.c_str() + 12, nullptr, 10);
      struct stat st;
      if (pid <= 0 || lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
          st.st_uid != geteuid() || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
        continue;
      std::filesystem::remove_all(entry.path(), ec);
    }
  }

  std::string path_;
};

}  // namespace

int main(int argc, char **argv) {
  SetLogTag("maru-server");
  ServerFlags f;
  Flags flags("maru-server --pool PATH [--pool PATH...] [OPTIONS]",
              "Serves the namespace, extents, sessions and leases of a Maru pool over gRPC.");
  flags.Strings("pool", &f.pools,
                "pool device: a file formatted by 'maructl mkpool' or /dev/daxX.Y (repeatable)");
  flags.String("db", &f.db, "RocksDB directory for the metadata");
  flags.Bool("standby", &f.standby,
             "follow the leader through the pool's replication log into --db; SIGUSR1 "
             "promotes (then serves as usual), state in DB/STANDBY");
  flags.String("etcd", &f.etcd,
               "etcd endpoints (host:port,...): this server is one of the pool's servers; "
               "it follows as a hot standby until elected to lead (docs/ha.md)");
  flags.String("member", &f.member, "this server's name among the pool's (default: the host name)");
  flags.String("advertise", &f.advertise,
               "where clients reach this server when it leads (default: the first --listen)");
  flags.Int("lease-ttl-s", &f.lease_ttl_s,
            "the leader's etcd lease, in seconds: how long a dead leader goes unnoticed");
  flags.Int("leader-silence-ms", &f.leader_silence_ms,
            "a standby revokes the lease of a leader whose heartbeat in the pool stood "
            "still this long, and takes over (0: wait for the lease to expire)");
  flags.String("replication-key-file", &f.replication_key_file,
               "a secret the pool's servers share (mode 0600): each record of the "
               "replication log is signed with it, and a record a member of the pool's "
               "group forged is refused (docs/ha.md)");
  flags.String("snapshot-from", &f.snapshot_from,
               "with --standby: the leader (unix://PATH) to take a snapshot from when behind");
  flags.Strings("listen", &f.listen,
                "unix:///PATH or tcp://HOST:PORT to serve on (repeatable; default "
                "unix:///run/maru/maru.sock)");
  flags.String(
      "config", &f.config,
      "configuration file of 'option = value' lines; flags override it (default: " MARU_SYSCONFDIR
      "/maru/maru-server.conf if it exists)");
  flags.Int("session-timeout-ms", &f.session_timeout_ms,
            "a client silent this long loses its leases and unfinished writes");
  flags.Int("heartbeat-ms", &f.heartbeat_ms, "how often clients are asked to heartbeat");
  flags.Int("grace-ms", &f.grace_ms,
            "after a restart, keep freed extents this long for returning readers (-1: the session "
            "timeout)");
  flags.Double("high-watermark", &f.high_watermark,
               "evict when the pool is fuller than this fraction");
  flags.Double("low-watermark", &f.low_watermark, "... until it is below this fraction");
  flags.String(
      "eviction", &f.eviction,
      "eviction policy: frequency (default; takes maru_hint; 'hinted' is an old name for it), "
      "lru or prefix");
  flags.Int("max-fragments", &f.max_fragments, "most extents one chunk may span");
  flags.Int("max-keys", &f.max_keys, "most paths one lookup or batch may name (0: no limit)");
  flags.Int("max-leases", &f.max_leases,
            "most leases (open chunks) one non-root session may hold (0: no limit)");
  flags.Int("max-reservations", &f.max_reservations,
            "most unsealed writes one non-root session may hold (0: no limit)");
  flags.Int("max-pins", &f.max_pins, "most pins one non-root session may set (0: no limit)");
  flags.Int("max-tcp-connections", &f.max_tcp_connections,
            "most connections one TCP listener holds at once (0: as many as the descriptor "
            "limit allows)");
  flags.Int("max-tcp-per-peer", &f.max_tcp_per_peer,
            "most TCP connections one peer address holds at once (0: no limit)");
  flags.Int("max-sessions-per-uid", &f.max_sessions_per_uid,
            "most sessions one uid other than root may hold at once (0: no limit)");
  flags.String("root-mode", &f.root_mode,
               "permissions of the root directory when the database is new (octal)");
  flags.Bool("sync", &f.sync, "fsync every metadata write (survives power loss, slower)");
  flags.Bool("tcp-squash", &f.squash_tcp,
             "accepted for compatibility: an unauthenticated TCP caller is always nobody");
  flags.String("tls-cert", &f.tcp.tls_cert,
               "PEM certificate of this server for TCP (mutual TLS, with --tls-key and "
               "--tls-client-ca)");
  flags.String("tls-key", &f.tcp.tls_key, "PEM private key of --tls-cert");
  flags.String("tls-client-ca", &f.tcp.tls_client_ca,
               "PEM CA that must have signed every TCP client's certificate");
  flags.Strings("tls-identity", &f.tcp.tls_identities,
                "CN=NAME=UID[:GID] or SAN=NAME=UID[:GID]: a client certificate acts as this "
                "user (repeatable; unmapped certificates are nobody)");
  flags.String("tls-identity-map", &f.tcp.tls_identity_map,
               "file of --tls-identity lines ('#' comments)");
  flags.String("token-file", &f.tcp.token_file,
               "file of 'TOKEN UID[:GID]' lines (mode 0600 or 0400): a TCP caller sending "
               "'authorization: Bearer TOKEN' acts as that user");
  flags.Bool("no-fast-lane", &f.no_fast_lane,
             "serve lookups, opens and releases over gRPC only (no SOCKET.fast)");
  flags.String("tcp-fast-lane", &f.tcp_fast_lane,
               "auto|on|off: serve the fast lane over TCP too, to callers that proved who they "
               "are (auto: on unless --tls-cert, as the lane is not encrypted; docs/security.md)");
  flags.Int("tcp-fast-lane-port", &f.tcp_fast_lane_port,
            "port of the TCP fast lane, on the first TCP listener's host (0: any free one)");
  flags.Bool("no-idle-poll", &f.no_idle_poll,
             "do not keep idle CPUs polling while fast-lane requests come (a PM QoS request, "
             "root only)");
  flags.Bool("no-index", &f.no_index,
             "publish no shared-memory index (clients look up, open and release by message)");
  flags.String("index", &f.index_path,
               "the shared-memory index file (default: POOL.index, or "
               "/dev/shm/maru-UUID.index for a device)");
  flags.Int("index-entries", &f.index_entries,
            "entries of the index, a power of two (0: twice the pool's units)");
  flags.Int("index-sessions", &f.index_sessions,
            "sessions that may hold lease slots in the index at once");
  flags.Int("index-sessions-per-uid", &f.index_sessions_per_uid,
            "of those, how many one uid other than root may hold (0: a quarter of them)");
  flags.String("metrics-listen", &f.metrics_listen,
               "HOST:PORT to serve Prometheus metrics on at /metrics");
  flags.String("log-level", &f.log_level, "error, warn, info or debug");
  std::vector<std::string> positional;
  Status s = flags.Parse(argc, argv, 1, &positional);
  if (!s.ok()) return Fail(s.message());
  if (flags.help_requested()) {
    fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (!positional.empty()) return Fail("unexpected argument '" + positional[0] + "' (see --help)");
  if (!f.config.empty() || access(kDefaultConfig, R_OK) == 0) {
    s = flags.ParseConfigFile(f.config.empty() ? kDefaultConfig : f.config);
    if (!s.ok()) return Fail(s.message());
  }
  if (!SetLogLevel(f.log_level)) return Fail("unknown log level '" + f.log_level + "'");
  if (f.pools.empty())
    return Fail(
        "--pool is required (format one with: maructl mkpool /dev/shm/maru.pool --size 4G)");
  if (f.listen.empty()) f.listen.push_back(kDefaultServerAddress);
  // Clients trust a lease for half the timeout since the server last
  // answered: a heartbeat must fit in that window with room for one loss.
  if (f.session_timeout_ms < 100 || f.heartbeat_ms < 10 ||
      f.heartbeat_ms * 3 > f.session_timeout_ms)
    return Fail(
        "need --heartbeat-ms at most a third of --session-timeout-ms, and a timeout of "
        "at least 100 ms");

  EngineOptions options;
  options.pool_paths = f.pools;
  options.db_dir = f.db;
  options.sync_writes = f.sync;
  options.session_timeout_ms = f.session_timeout_ms;
  options.heartbeat_ms = static_cast<uint32_t>(f.heartbeat_ms);
  options.grace_ms = f.grace_ms;
  options.high_watermark = f.high_watermark;
  options.low_watermark = f.low_watermark;
  options.eviction = f.eviction;
  options.max_fragments = static_cast<uint32_t>(std::max<int64_t>(1, f.max_fragments));
  auto limit = [](int64_t v) {
    return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, UINT32_MAX));
  };
  options.limits.keys_per_call = limit(f.max_keys);
  options.limits.leases_per_session = limit(f.max_leases);
  options.limits.reservations_per_session = limit(f.max_reservations);
  options.limits.pins_per_session = limit(f.max_pins);
  options.limits.sessions_per_uid = limit(f.max_sessions_per_uid);
  options.index = !f.no_index;
  options.index_options.path = f.index_path;
  options.index_options.entries = static_cast<uint64_t>(std::max<int64_t>(0, f.index_entries));
  options.index_options.regions = limit(std::clamp<int64_t>(f.index_sessions, 1, 65536));
  options.index_options.regions_per_uid = limit(f.index_sessions_per_uid);
  char *end = nullptr;
  options.root_mode = static_cast<uint32_t>(strtoul(f.root_mode.c_str(), &end, 8));
  if (*end || options.root_mode > 07777) return Fail("--root-mode takes octal permissions");

  std::vector<Address> addresses;
  for (const std::string &l : f.listen) {
    Result<Address> a = ParseAddress(l);
    if (!a.ok()) return Fail(a.status().message());
    addresses.push_back(*a);
  }

  // Who TCP callers may prove to be: refuse to start on a bad token file
  // rather than serve with fewer users than configured.
  Result<IdentityPolicy> policy = LoadIdentityPolicy(f.tcp);
  if (!policy.ok()) return Fail(policy.status().message());
  Result<std::shared_ptr<grpc::ServerCredentials>> tcp_credentials = TcpServerCredentials(f.tcp);
  if (!tcp_credentials.ok()) return Fail(tcp_credentials.status().message());
  if (f.tcp_fast_lane != "auto" && f.tcp_fast_lane != "on" && f.tcp_fast_lane != "off")
    return Fail("--tcp-fast-lane is auto, on or off, not '" + f.tcp_fast_lane + "'");
  if (f.tcp_fast_lane_port < 0 || f.tcp_fast_lane_port > 65535)
    return Fail("--tcp-fast-lane-port is 0 to 65535");
  const bool tcp_fast_lane_wanted =
      !f.no_fast_lane &&
      (f.tcp_fast_lane == "on" || (f.tcp_fast_lane == "auto" && f.tcp.tls_cert.empty()));

  // Signals are taken synchronously by the main thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A thread started before main (a sanitizer's) still takes the signals:
  // there their default action would end the process without a clean stop
  // (the index file left behind). Handled there, they go to main's sigwait.
  g_main_thread = pthread_self();
  struct sigaction forward = {};
  forward.sa_handler = [](int sig) { pthread_kill(g_main_thread, sig); };
  sigaction(SIGINT, &forward, nullptr);
  sigaction(SIGTERM, &forward, nullptr);
  signal(SIGPIPE, SIG_IGN);
  ConnectionGate gate(RaiseDescriptorLimit(),
                      {limit(f.max_tcp_connections), limit(f.max_tcp_per_peer)});

  if (!f.no_fast_lane)
    for (const Address &a : addresses)
      if (a.kind == Address::Kind::kUnix && options.fast_lane.empty())
        options.fast_lane = a.path + fastlane::kSuffix;
  if (!f.replication_key_file.empty()) {
    Result<std::string> key = ReadSecretFile("replication key file", f.replication_key_file);
    if (!key.ok()) return Fail(key.status().message());
    options.log_key = key->substr(0, key->find_last_not_of(" \t\r\n") + 1);
    if (options.log_key.size() < 16)
      return Fail("replication key file " + f.replication_key_file +
                  ": at least 16 bytes of secret (head -c 32 /dev/urandom | base64)");
  }
  if (f.standby && !f.etcd.empty()) return Fail("--standby is for a server without --etcd");
  if (f.standby) {
    Result<bool> promoted =
        RunStandby({f.pools[0], f.db, f.sync, f.snapshot_from, options.log_key});
    if (!promoted.ok()) return Fail(promoted.status().message());
    if (!*promoted) return 0;
  }
  // One server leads a pool at a time: elected through etcd, or alone.
  Result<std::unique_ptr<HaMember>> member =
      f.etcd.empty() ? HaMember::LeadAlone(f.pools[0], addresses[0].ToString())
                     : HaMember::FollowUntilLeading(MemberOptions(f, addresses, options.log_key),
                                                    stop_signals);
  if (!member.ok()) return Fail(member.status().message());
  if (!f.etcd.empty() && !*member) return 0;  // stopped while a standby
  if (!f.etcd.empty()) {
    HaMember *m = member->get();
    options.log_epoch = m->epoch();
    options.log_fence = [m] { return m->MayWrite(); };
    options.fill_server_stats =
        [m, id = MemberOptions(f, addresses, "").election.id](rpc::StatsReply *rep) {
          for (const MemberInfo &info : m->Members()) {
            rpc::ServerMember *out = rep->add_members();
            out->set_id(info.id);
            out->set_endpoint(info.endpoint);
            out->set_lag_bytes(info.lag);
            out->set_electable(info.electable);
            out->set_leads(info.id == id);
          }
        };
  }
  Result<std::unique_ptr<MetaEngine>> engine = MetaEngine::Open(options);
  if (!engine.ok()) return Fail(engine.status().message());

  PeerRegistry peers;
  FastLaneTickets tickets;  // outlives the service and the lane that use it
  MetaService service(engine->get(), &peers, *policy);
  if (!f.etcd.empty()) service.set_leader_gate(&(*member)->gate());
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  SnapshotService snapshots(engine->get(), &peers, *policy);  // for standbys' bootstraps
  builder.RegisterService(&snapshots);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  std::vector<std::unique_ptr<Acceptor>> unix_listeners;
  std::vector<std::unique_ptr<TcpRelay>> tcp_listeners;
  PrivateDirectory relay_dir;  // gRPC's sockets behind the TCP relays
  // Outlives the fast lane, whose threads tell it of each request. Held
  // for a second after the last: a writer's create and seal come
  // milliseconds apart (the copy between them), further than a mount's
  // requests, and each found the server's CPU halted without it.
  CpuWakeLatency wake(!f.no_fast_lane && !f.no_idle_poll, std::chrono::seconds(1));
  std::unique_ptr<FastLaneServer> fast_lane, tcp_fast_lane;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].kind == Address::Kind::kUnix) {
      Result<std::unique_ptr<Acceptor>> l = Acceptor::ListenUnix(addresses[i].path);
      if (!l.ok()) return Fail(l.status().message());
      unix_listeners.push_back(std::move(*l));
      if (!fast_lane && !f.no_fast_lane) {
        fast_lane =
            std::make_unique<FastLaneServer>(addresses[i].path + fastlane::kSuffix, engine->get(),
                                             IdentityPolicy{},  // Unix peers only
                                             gate.fast_lane_connections(), &wake);
        if (!f.etcd.empty()) fast_lane->set_leader_gate(&(*member)->gate());
        s = fast_lane->Bind();
        if (!s.ok()) return Fail(s.message());
      }
    } else {
      s = relay_dir.Make();
      if (!s.ok()) return Fail(s.message());
      const std::string target = relay_dir.path() + "/tcp" + std::to_string(i) + ".sock";
      Result<std::unique_ptr<TcpRelay>> relay =
          TcpRelay::Listen(addresses[i].ToString().substr(6), target, &gate);
      if (!relay.ok()) return Fail(relay.status().message());
      tcp_listeners.push_back(std::move(*relay));
      builder.AddListeningPort("unix:" + target, *tcp_credentials);
      WarnAboutPlainTcp(f.tcp, addresses[i]);
      if (!tcp_fast_lane && tcp_fast_lane_wanted) {
        const std::string host_port = addresses[i].ToString().substr(6);
        tcp_fast_lane = std::make_unique<FastLaneServer>(
            host_port.substr(0, host_port.rfind(':') + 1) + std::to_string(f.tcp_fast_lane_port),
            engine->get(), *policy, FastLaneServer::TcpDoor{&gate, &tickets},
            gate.fast_lane_connections(), &wake);
        s = tcp_fast_lane->Bind();
        if (!s.ok()) return Fail("the TCP fast lane: " + s.message());
        service.EnableTcpFastLane(&tickets, tcp_fast_lane->port());
      }
    }
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return Fail("cannot start the gRPC server");
  for (auto &l : tcp_listeners) l->Start();
  // Unix connections are accepted here, so that the kernel tells who is
  // calling (SO_PEERCRED), then handed to gRPC, which names the peer "fd:N".
  for (auto &l : unix_listeners)
    l->Start(
        [&peers, &gate, srv = server.get()](int conn) {
          std::optional<PeerCredentials> creds = ReadPeerCredentials(conn);
          if (!creds || !gate.AdmitUnix(conn)) return (void)close(conn);
          peers.Set(conn, *creds);
          grpc::AddInsecureChannelFromFd(srv, conn);
        },
        /*nonblocking=*/true);  // gRPC needs non-blocking sockets
  if (fast_lane) fast_lane->Start();
  if (tcp_fast_lane) tcp_fast_lane->Start();

  std::unique_ptr<MetricsServer> metrics;
  if (!f.metrics_listen.empty()) {
    Result<std::unique_ptr<MetricsServer>> m =
        MetricsServer::Start(f.metrics_listen, engine->get());
    if (!m.ok()) return Fail(m.status().message());
    metrics = std::move(*m);
  }

  // tick_mu guards `stopping` (a local, which GUARDED_BY cannot mark).
  Mutex tick_mu;
  CondVar tick_cv;
  bool stopping = false;
  const auto tick_every =
      std::chrono::milliseconds(std::clamp<int64_t>(f.session_timeout_ms / 4, 20, 500));
  std::thread ticker([&] {
    tick_mu.Lock();
    for (;;) {
      const auto deadline = std::chrono::steady_clock::now() + tick_every;
      while (!stopping && tick_cv.WaitUntil(&tick_mu, deadline)) {
      }
      if (stopping) break;
      tick_mu.Unlock();
      (*engine)->Tick();
      tick_mu.Lock();
    }
    tick_mu.Unlock();
  });

  std::string where;
  for (const Address &a : addresses) where += " " + a.ToString();
  LOG_INFO("serving%s", where.c_str());
  // systemd (Type=notify) starts what depends on us, the mount, only now;
  // without NOTIFY_SOCKET this does nothing.
  sd_notify(0, "READY=1");

  int sig = 0;
  sigwait(&stop_signals, &sig);
  sd_notify(0, "STOPPING=1");
  LOG_INFO("stopping on signal %d", sig);
  {
    MutexLock lock(&tick_mu);
    stopping = true;
  }
  tick_cv.SignalAll();
  ticker.join();
  for (auto &l : unix_listeners) l->Stop();
  for (auto &l : tcp_listeners) l->Stop();
  if (fast_lane) fast_lane->Stop();
  if (tcp_fast_lane) tcp_fast_lane->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  metrics.reset();
  return 0;
}
