#include "client/meta_client.h"

#include <sys/stat.h>

#include <unistd.h>
#include <cstring>
#include <iterator>
#include <unordered_map>

#include "client/tcp_auth.h"
#include "proto/conversions.h"
#include "proto/fast_lane.h"
#include "util/address.h"
#include "util/clock.h"
#include "util/log.h"

namespace maru {
namespace {

constexpr size_t kReleaseBatch = 1024;  // leases per Release call
constexpr int kReleaseDelayMs = 2;      // how long a release may wait for company

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

int GrpcErrno(const grpc::Status &status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return 0;
    case grpc::StatusCode::UNAVAILABLE:
    // A server that does not lead: as good as away (the next one is tried).
    case grpc::StatusCode::FAILED_PRECONDITION:
      return -ENOTCONN;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return -ETIMEDOUT;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return -E2BIG;
    // An older server: not ENOSYS, which FUSE would remember as "never".
    case grpc::StatusCode::UNIMPLEMENTED:
      return -EPROTONOSUPPORT;
    case grpc::StatusCode::CANCELLED:
      return -ECANCELED;
    // The server does not know this caller's token or certificate.
    case grpc::StatusCode::UNAUTHENTICATED:
      return -EACCES;
    case grpc::StatusCode::PERMISSION_DENIED:
      return -EPERM;
    default:
      return -EIO;
  }
}

MetaClient::MetaClient(std::string address, ClientOptions options)
    : address_(std::move(address)), options_(std::move(options)) {}

Result<std::unique_ptr<MetaClient>> MetaClient::Connect(const std::string &address,
                                                        const ClientOptions &options) {
  std::vector<Address> addrs;
  for (size_t pos = 0; pos <= address.size();) {
    size_t comma = address.find(',', pos);
    if (comma == std::string::npos) comma = address.size();
    Result<Address> addr = ParseAddress(address.substr(pos, comma - pos));
    if (!addr.ok()) return addr.status();
    addrs.push_back(*addr);
    pos = comma + 1;
  }
  std::unique_ptr<MetaClient> client(new MetaClient(address, options));
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  std::shared_ptr<grpc::ChannelCredentials> tcp_credentials;
  bool tls = false;
  for (const Address &addr : addrs) {
    if (addr.kind != Address::Kind::kTcp || tcp_credentials) continue;
    Result<TcpClientAuth> auth = TcpClientAuthFromEnv();
    if (!auth.ok()) return auth.status();
    tcp_credentials = auth->credentials;
    tls = auth->tls;
    client->token_ = auth->token;
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  // With a list of servers, a standby starts to listen the moment it is
  // elected: a channel that waited longer to try again would add its wait
  // to the failover a client sees.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, addrs.size() > 1 ? kFailoverBackoffMs : 500);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // Each client its own connection: subchannel sharing would make forked
  // processes and threads of separate clients contend on one socket.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (const Address &addr : addrs) {
    Target t;
    t.address = addr.ToString();
    t.channel = grpc::CreateCustomChannel(
        addr.GrpcTarget(), addr.kind == Address::Kind::kTcp ? tcp_credentials : credentials, args);
    t.stub = rpc::Meta::NewStub(t.channel);
    client->targets_.push_back(std::move(t));
  }
  Status status;
  for (size_t i = 0; i < addrs.size(); ++i) {
    client->current_.store(i);
    status = client->OpenTarget(i, tls && addrs[i].kind == Address::Kind::kTcp);
    if (status.ok()) break;
  }
  if (!status.ok()) return status;
  if (options.heartbeat) client->background_ = std::thread([c = client.get()] { c->Background(); });
  return client;
}

Status MetaClient::OpenTarget(size_t i, bool tls) {
  Result<Address> addr = ParseAddress(targets_[i].address);
  if (!addr.ok()) return addr.status();
  if (addr->kind == Address::Kind::kUnix) {
    struct stat st;
    if (stat(addr->path.c_str(), &st) < 0)
      return Status::Error(errno, "no server socket at " + addr->path);
  }
  // A refused TLS handshake looks like a server that is away; a plain TCP
  // connection tells them apart, so that the user is told the real reason.
  auto refused_handshake = [&] {
    const std::string why = "TLS handshake failed with " + addr->ToString() +
                            " (is MARU_TLS_CA the server's CA, and MARU_TLS_CERT / MARU_TLS_KEY "
                            "a client certificate its --tls-client-ca signed?)";
    LOG_ERROR("%s", why.c_str());
    return Status::Error(EACCES, why);
  };
  if (!targets_[i].channel->WaitForConnected(
          std::chrono::system_clock::now() +
          std::chrono::milliseconds(options_.connect_timeout_ms))) {
    if (tls && TcpReachable(*addr, 1000)) return refused_handshake();
    return Status::Error(ECONNREFUSED, "no server answers at " + addr->ToString());
  }
  int rc = OpenSession(false);
  // With TLS 1.3 the server checks the client's certificate after the
  // client thinks the handshake is done: the first call finds it closed.
  if (rc == -ENOTCONN && tls) return refused_handshake();
  if (rc == -EACCES && !token_.empty()) {
    const std::string why = "token refused by " + addr->ToString() + " (MARU_TOKEN_FILE)";
    LOG_ERROR("%s", why.c_str());
    return Status::Error(EACCES, why);
  }
  return FromReturnCode(rc, "cannot open a session with " + addr->ToString());
}

void MetaClient::set_pool_control(const PoolControl &control) {
  if (control_) return;
  control_ = std::make_unique<PoolControl>(control);
  fence_.store(control_.get(), std::memory_order_release);
}

bool MetaClient::StaleServer() const {
  const PoolControl *control = fence_.load(std::memory_order_acquire);
  const uint64_t epoch = server_epoch_.load(std::memory_order_relaxed);
  if (!control || epoch == 0 || control->Holds(epoch)) return false;
  if (control->FenceEpoch() < epoch) return false;  // it has yet to raise it
  LOG_INFO("server %s leads with epoch %lu, fenced out by the pool's %lu; trying the next",
           current_address().c_str(), epoch, control->FenceEpoch());
  return true;
}

bool MetaClient::NextTarget(size_t seen) {
  if (targets_.size() < 2) return false;
  size_t expected = seen;
  if (current_.compare_exchange_strong(expected, (seen + 1) % targets_.size()))
    LOG_INFO("server %s away or not leading; trying %s", targets_[seen].address.c_str(),
             current_address().c_str());
  return true;
}

void MetaClient::Authorize(grpc::ClientContext *ctx) const {
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
}

MetaClient::~MetaClient() {
  {
    MutexLock lock(&bg_mu_);
    stopping_ = true;
  }
  bg_cv_.SignalAll();
  if (background_.joinable()) background_.join();
  FlushReleases();
  rpc::HeartbeatRequest req;
  req.mutable_header()->set_session(session_.load());
  rpc::ErrorReply rep;
  grpc::ClientContext ctx;
  Authorize(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
  if (!targets_.empty()) stub()->CloseSession(&ctx, req, &rep);
}

rpc::OpenSessionReply MetaClient::session_info() const {
  MutexLock lock(&session_mu_);
  return info_;
}

int MetaClient::OpenSession(bool resume) {
  rpc::OpenSessionRequest req;
  req.set_client(options_.client_name);
  req.set_instance(options_.instance);
  req.set_hostname(Hostname());
  req.set_pid(static_cast<uint32_t>(getpid()));
  if (resume) {
    req.set_resume(session_.load());
    ListHeld(&req);
  }
  rpc::OpenSessionReply rep;
  // From the moment the server may drop a lease until the lease is marked
  // lost here, LeaseHeld() must not trust it: it sees `resuming_` odd.
  if (resume) resuming_.fetch_add(1);
  int rc = CallOnce(&Stub::OpenSession, req, &rep);
  if (rc == 0 && resume && rep.pool_uuid() != session_info().pool_uuid()) {
    // A server of another pool (a list that mixes pools): the session's
    // leases and mappings mean nothing there.
    LOG_ERROR("%s serves another pool: refusing to resume there", current_address().c_str());
    rc = -ESTALE;
  }
  if (rc < 0) {
    if (resume) resuming_.fetch_add(1);
    return rc;
  }
  if (resume) {
    // Leases were renewed under new ids; ones not renewed are gone, and
    // their readers find out when they next check (never silently reuse).
    std::unordered_map<uint64_t, uint64_t> renewed;
    for (const rpc::HeldLease &r : rep.renewed()) {
      RenewedLease lease = RenewedFromWire(r);
      renewed[lease.old_lease] = lease.new_lease;
    }
    for (LeaseShard &shard : lease_shards_) {
      MutexLock lock(&shard.mu);
      shard.tracked.ForEach([&](Tracked &t) {
        if (t.lease == 0) return;
        auto it = renewed.find(t.lease);
        t.lease.store(it == renewed.end() ? 0 : it->second);
      });
    }
    resuming_.fetch_add(1);
  }
  UseFastLane(rep);
  MutexLock lock(&session_mu_);
  info_ = rep;
  session_.store(rep.session());
  server_epoch_.store(rep.leader_epoch());
  // Half the session timeout of silence is the most a lease may be trusted.
  lease_trust_ms_.store(std::max<int64_t>(rep.timeout_ms() / 2, 1));
  return 0;
}

void MetaClient::UseFastLane(const rpc::OpenSessionReply &rep) {
  const char *env = getenv("MARU_FAST_LANE");
  if (env && strcmp(env, "0") == 0) return;
  // Not with a list of servers: the lane is to one server, and a call
  // answered on it could not move to the next.
  if (targets_.size() > 1) return;
  if (address_.rfind("unix://", 0) == 0) {
    if (!fast_ && !rep.fast_lane().empty())
      fast_ = std::make_unique<FastLaneClient>(rep.fast_lane(), options_.call_timeout_ms);
    return;
  }
  // Over TCP the lane admits a connection by a ticket of this session.
  if (rep.fast_lane_port() == 0 || rep.fast_lane_ticket().empty()) return;
  if (fast_) return fast_->SetTicket(rep.fast_lane_ticket());
  Result<Address> server = ParseAddress(address_);
  if (!server.ok()) return;
  server->port = static_cast<int>(rep.fast_lane_port());
  fast_ = std::make_unique<FastLaneClient>(*server, token_, rep.fast_lane_ticket(),
                                           options_.call_timeout_ms);
}

void MetaClient::ListHeld(rpc::OpenSessionRequest *req) {
  for (LeaseShard &shard : lease_shards_) shard.mu.Lock();
  {
    MutexLock lock(&lease_mu_);
    // What is not held is dropped by the resume; queued releases would name
    // leases that no longer exist.
    to_release_.clear();
    for (LeaseShard &shard : lease_shards_)
      shard.tracked.ForEach([&](const Tracked &t) {
        if (t.lease == 0) return;  // lost at an earlier resume: stays lost
        rpc::HeldLease *h = req->add_held();
        h->set_lease(t.lease);
        h->set_ino(t.ino);
        h->set_gen(t.gen);
      });
  }
  for (LeaseShard &shard : lease_shards_) shard.mu.Unlock();
}

void MetaClient::AwaitServer(int64_t ms, bool *early) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  // Already up: the call failed for another reason, and waiting on the
  // connection would not wait at all.
  if (channel()->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY &&
      channel()->WaitForConnected(std::chrono::system_clock::now() +
                                  std::chrono::milliseconds(ms)) &&
      *early) {
    *early = false;
    return;
  }
  std::this_thread::sleep_until(until);
}

int MetaClient::Resume(uint64_t seen_epoch) {
  {
    MutexLock lock(&resume_mu_);
    // The session keeps its id across a resume; the epoch tells whether
    // another thread resumed it since this caller's call went out. A second
    // resume would drop the leases granted in between.
    if (resume_epoch_.load() != seen_epoch) return 0;
    int rc = OpenSession(true);
    if (rc < 0) return rc;
    resume_epoch_.fetch_add(1);
    LOG_INFO("session %016lx resumed with %s", session_.load(), current_address().c_str());
  }
  if (on_resume_) on_resume_();  // may call back into this client
  return 0;
}

MetaClient::LeaseShard &MetaClient::ThreadShard() {
  static std::atomic<uint64_t> threads{0};
  thread_local const uint64_t mine = threads.fetch_add(1, std::memory_order_relaxed) % kLeaseShards;
  return lease_shards_[mine];
}

uint64_t MetaClient::NewHandle(LeaseShard &shard, Tracked **tracked) {
  uint64_t handle = 0;
  *tracked = shard.tracked.Add(static_cast<uint64_t>(&shard - lease_shards_), &handle);
  return *tracked ? handle : 0;
}

uint64_t MetaClient::TrackLease(uint64_t lease, uint64_t ino, uint64_t gen) {
  LeaseShard &shard = ThreadShard();
  MutexLock lock(&shard.mu);
  Tracked *t;
  const uint64_t handle = NewHandle(shard, &t);
  if (!handle) return 0;
  t->lease.store(lease);
  t->ino = ino;
  t->gen = gen;
  return handle;
}

size_t MetaClient::TrackSlotLeases(const SlotLease *leases, size_t n) {
  const uint64_t lapses = lapses_.load();
  LeaseShard &shard = ThreadShard();
  MutexLock lock(&shard.mu);
  for (size_t i = 0; i < n; ++i) {
    Tracked *t;
    const uint64_t handle = NewHandle(shard, &t);
    if (!handle) return i;
    // Handles are unique in this client: with the high bit, never a server's id.
    // Release: the lock orders it for the other threads that look it up;
    // a seq_cst store is a locked exchange on x86, one per lease.
    t->lease.store((uint64_t{1} << 63) | handle, std::memory_order_release);
    t->ino = leases[i].ino;
    t->gen = leases[i].gen;
    *leases[i].handle = handle;
    leases[i].watch->lapses = lapses;
    leases[i].watch->lease = &t->lease;
  }
  return n;
}

MetaClient::LeaseWatch MetaClient::WatchLease(uint64_t handle) {
  LeaseWatch watch;
  const bool answered = answered_client_ == this;
  watch.lapses = answered ? answered_lapses_ : lapses_.load();
  // A resume since the answer may not have renewed a lease not tracked yet.
  if (answered && resuming_.load() != answered_resuming_) return watch;
  LeaseShard &shard = ShardOf(handle);
  MutexLock lock(&shard.mu);
  // Records stay put until erased (by ReleaseLease).
  if (Tracked *t = shard.tracked.Find(handle)) watch.lease = &t->lease;
  return watch;
}

bool MetaClient::LeaseHeld(const LeaseWatch &watch) const {
  if (!watch.lease) return false;
  const uint64_t resuming = resuming_.load();
  if (resuming % 2) return false;
  // NoteAnswer() counts a lapse before it makes the answer fresh: whoever
  // sees the fresh answer also sees the lapse.
  const int64_t last = last_answer_ms_.load();
  if (MonotonicMs() - last >= lease_trust_ms_.load()) return false;
  if (lapses_.load() != watch.lapses) return false;
  return watch.lease->load() != 0 && resuming_.load() == resuming;
}

void MetaClient::NoteAnswer() {
  const int64_t now = MonotonicMs();
  const uint64_t seen = now - last_answer_ms_.load() >= lease_trust_ms_.load()
                            ? lapses_.fetch_add(1) + 1
                            : lapses_.load();
  last_answer_ms_.store(now);
  answered_client_ = this;
  answered_lapses_ = seen;
  answered_resuming_ = resuming_.load();
}

void MetaClient::ReleaseLeases(const uint64_t *handles, size_t n) {
  bool queued = false, flush_now = false;
  uint64_t granted[64];
  size_t held = 0;
  // Granted leases are queued before their shard lets go (a resume sees
  // each tracked or queued), under one hold of the queue's lock for many.
  auto queue = [&] {
    if (held == 0) return;
    MutexLock lock(&lease_mu_);
    to_release_.insert(to_release_.end(), granted, granted + held);
    held = 0;
    queued = true;
    flush_now = flush_now || to_release_.size() >= kReleaseBatch || !options_.heartbeat;
  };
  for (size_t i = 0; i < n;) {
    // A run of one shard's handles under one hold of its lock (a batch's
    // handles usually share one: the thread that took them).
    LeaseShard &shard = ShardOf(handles[i]);
    MutexLock lock(&shard.mu);
    for (; i < n && &ShardOf(handles[i]) == &shard; ++i) {
      Tracked *t = shard.tracked.Find(handles[i]);
      if (!t) continue;
      const uint64_t lease = t->lease;
      shard.tracked.Erase(t);
      if (lease == 0 || IsSlotLease(lease)) continue;  // lost, or its slot was cleared: no message
      granted[held++] = lease;
      if (held == std::size(granted)) queue();
    }
    queue();
  }
  if (flush_now) {
    FlushReleases();
  } else if (queued && !release_pending_.exchange(true)) {
    bg_cv_.SignalAll();
  }
}

void MetaClient::AttachReleases(rpc::Header *header) {
  MutexLock lock(&lease_mu_);
  for (uint64_t lease : to_release_) header->add_release(lease);
  to_release_.clear();
}

void MetaClient::RequeueReleases(const google::protobuf::RepeatedField<uint64_t> &leases) {
  MutexLock lock(&lease_mu_);
  to_release_.insert(to_release_.end(), leases.begin(), leases.end());
}

bool MetaClient::LeaseValid(uint64_t handle) {
  {
    LeaseShard &shard = ShardOf(handle);
    MutexLock lock(&shard.mu);
    const Tracked *t = shard.tracked.Find(handle);
    if (!t || t->lease == 0) return false;
  }
  return MonotonicMs() - last_answer_ms_.load() < lease_trust_ms_.load();
}

void MetaClient::FlushReleases() {
  rpc::ReleaseRequest req;
  {
    MutexLock lock(&lease_mu_);
    if (to_release_.empty()) return;
    for (uint64_t l : to_release_) req.add_leases(l);
    to_release_.clear();
  }
  rpc::ErrorReply rep;
  req.mutable_header()->set_session(session_.load());
  // A lease the server already forgot needs no release; one that did not
  // reach it is sent again later (ids are never reused, so twice is safe).
  if (fast_ && fast_->Call(fastlane::kRelease, req, &rep) == 0) return;
  if (CallOnce(&Stub::Release, req, &rep) < 0 && rep.error() == 0) RequeueReleases(req.leases());
}

void MetaClient::Background() {
  int64_t next_beat = 0;
  bool early = true;  // see AwaitServer
  bg_mu_.Lock();
  while (!stopping_) {
    const int64_t wait_ms = std::max<int64_t>(0, next_beat - MonotonicMs());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    while (!stopping_ && !release_pending_.load() && bg_cv_.WaitUntil(&bg_mu_, deadline)) {
    }
    if (stopping_) break;
    bg_mu_.Unlock();
    if (release_pending_.load()) {
      // Gather releases for a moment: one RPC carries many.
      std::this_thread::sleep_for(std::chrono::milliseconds(kReleaseDelayMs));
      release_pending_.store(false);
      FlushReleases();
    }
    const int64_t now = MonotonicMs();
    if (now >= next_beat) {
      uint32_t every = session_info().heartbeat_ms();
      next_beat = now + (every ? every : 1000);
      rpc::HeartbeatRequest req;
      rpc::HeartbeatReply rep;
      req.mutable_header()->set_session(session_.load());
      const uint64_t epoch = resume_epoch_.load();
      const size_t target = current_.load();
      int rc = CallOnce(&Stub::Heartbeat, req, &rep);
      if (rc == -ENOTCONN && rep.error() == ENOTCONN) Resume(epoch);
      if (rc == -ENOTCONN && rep.error() == 0) {  // server away: beat again once it is back
        NextTarget(target);
        AwaitServer(100, &early);
        next_beat = MonotonicMs();
      } else {
        early = true;  // the server answered
      }
    }
    bg_mu_.Lock();
  }
  bg_mu_.Unlock();
}

}  // namespace maru
