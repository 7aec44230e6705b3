// MetaClient: a client's session with maru-server, shared by libmaru_direct,
// maru-fuse and the tools.
//
// It owns the gRPC channel and the session: heartbeats keep the session
// alive; when the server restarts, calls wait (up to a window) for it to come
// back, then the session is resumed under the same id, with the leases this
// client still holds renewed, so unfinished writes and open chunks survive.
// Every call is bounded by a deadline: nothing hangs on a dead server.
//
// The address may list several servers ("unix:///a.sock,tcp://h:7000"): the
// servers of one pool, of which one leads. A call that finds its server
// gone, or not leading (it refuses with FAILED_PRECONDITION), moves on to
// the next one and resumes the session there.
//
// Thread-safe: one MetaClient serves all threads of a process.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "alloc/pool_control.h"
#include "client/fast_lane_client.h"
#include "client/held_leases.h"
#include "proto/fast_lane.h"
#include "proto/maru.grpc.pb.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

struct ClientOptions {
  std::string client_name = "maru-client";
  std::string instance;               // this client's own name ("vllm-0"), shown by the tools
  int64_t connect_timeout_ms = 3000;  // to reach the server at connect time
  int64_t call_timeout_ms = 10000;    // one attempt of one call
  int64_t retry_window_ms = 30000;    // how long a call waits for a restarting server
  bool heartbeat = true;
};

// The longest a client with a list of servers waits before it tries them
// again: about what a new leader takes to start serving after it is elected.
constexpr int64_t kFailoverBackoffMs = 100;

// Converts a gRPC transport failure into a negative errno.
int GrpcErrno(const grpc::Status &status);

class MetaClient {
 public:
  using Stub = rpc::Meta::Stub;
  template <typename Req, typename Rep>
  using Method = grpc::Status (Stub::*)(grpc::ClientContext *, const Req &, Rep *);

  // Connects and opens a session, with the first server of the
  // comma-separated `address` list that answers and leads. -ENOENT when a
  // Unix socket does not exist, -ECONNREFUSED / -ETIMEDOUT when no server
  // answers in time.
  static Result<std::unique_ptr<MetaClient>> Connect(const std::string &address,
                                                     const ClientOptions &options);
  // Releases what is pending and closes the session.
  ~MetaClient();

  // Calls `method`, filling in the session (and `as`, the identity a
  // trusted daemon asserts for its caller). Returns 0 or a negative errno,
  // from the reply's `error` or from the transport.
  template <typename Req, typename Rep>
  int Call(Method<Req, Rep> method, Req &req, Rep *rep, const rpc::Caller *as = nullptr);
  // Call() over the fast lane (op from src/proto/fast_lane.h) when the server
  // offers one here; gRPC when not, or when the lane breaks.
  template <typename Req, typename Rep>
  int CallFast(uint8_t op, Method<Req, Rep> method, Req &req, Rep *rep);
  // CallFast() of each fast-lane operation: see the end of the class.

  // Leases this client holds. Tracking them lets a resumed session renew
  // them; the handle stays valid across renewals. 0 when out of memory (the
  // lease is then not tracked: it ends with the session).
  uint64_t TrackLease(uint64_t lease, uint64_t ino, uint64_t gen);
  // Stops tracking and releases the lease in the background (batched).
  void ReleaseLease(uint64_t handle) { ReleaseLeases(&handle, 1); }
  void ReleaseLeases(const uint64_t *handles, size_t n) EXCLUDES(lease_mu_);
  // Sends pending releases now.
  void FlushReleases() EXCLUDES(lease_mu_);
  // True if the lease behind `handle` surely still holds: it was renewed
  // across any server restart, and the server heard from this session
  // recently enough that it cannot have expired it. A one-sided read that
  // finds this false afterwards may have read reused bytes.
  bool LeaseValid(uint64_t handle);

  // A lease watched without locks, for readers that check after every
  // in-place read (maru_lease_check). Valid until ReleaseLease(handle).
  struct LeaseWatch {
    const std::atomic<uint64_t> *lease = nullptr;  // 0 once a resume lost it
    uint64_t lapses = 0;  // lapses_ as of the answer that granted the lease
  };
  LeaseWatch WatchLease(uint64_t handle);
  // True if the watched lease certainly held from WatchLease() until now:
  // no silence of half the session timeout since (the server may have
  // expired the session), no resume lost it, none is under way. Atomics and
  // the monotonic clock only: no lock, no round trip.
  bool LeaseHeld(const LeaseWatch &watch) const;

  // Leases taken without a message, in slots of the shared-memory index
  // (client/index_reader.h), all `n` under one hold of the lock: each is
  // tracked like a granted one, so that a resume renews it as a granted
  // lease, and watched from now (no answer granted it). ReleaseLease()
  // sends no release for one while it is a slot lease.
  struct SlotLease {
    uint64_t ino, gen;
    uint64_t *handle;   // out
    LeaseWatch *watch;  // out
  };
  // How many were tracked: fewer than `n` (the first ones) only when out of
  // memory.
  size_t TrackSlotLeases(const SlotLease *leases, size_t n);
  // True for the id of a slot lease (not yet renewed as a granted one).
  static bool IsSlotLease(uint64_t lease) { return lease >> 63; }
  // Resumes so far: a reader of the index looks again after one.
  uint64_t resume_epoch() const { return resume_epoch_.load(); }

  uint64_t session() const { return session_.load(); }
  // The session's description from the server (devices, timeouts).
  rpc::OpenSessionReply session_info() const EXCLUDES(session_mu_);
  // The whole list, as given.
  const std::string &address() const { return address_; }
  // The server of the list this client talks to now.
  const std::string &current_address() const { return targets_[current_.load()].address; }
  size_t targets() const { return targets_.size(); }
  // The pool's control page, once this process maps the pool: from then on
  // a reply from a server whose epoch (told at session open) is below the
  // pool's fencing epoch is refused, as if the server were away. Set once;
  // checked by Call() only (not by the heartbeat, which may outlive the
  // pool's mapping).
  void set_pool_control(const PoolControl &control);
  // Called after the session was resumed under a restarted server.
  void set_on_resume(std::function<void()> f) { on_resume_ = std::move(f); }

 private:
  using Tracked = HeldLeases::Record;

  MetaClient(std::string address, ClientOptions options);
  int OpenSession(bool resume) EXCLUDES(session_mu_, lease_mu_);
  // Takes the fast lane the session reply offers (a Unix socket, or a TCP
  // port and ticket), unless MARU_FAST_LANE=0.
  void UseFastLane(const rpc::OpenSessionReply &rep);
  // For a resume: lists the leases held in `req`, and drops the queued
  // releases (they would name leases the resume drops), with every shard's
  // lock and lease_mu_ held. Unchecked: the shards' locks are taken in a
  // loop, which the analysis cannot follow.
  void ListHeld(rpc::OpenSessionRequest *req) NO_THREAD_SAFETY_ANALYSIS;
  // Resumes the session unless it was resumed since `seen_epoch`.
  int Resume(uint64_t seen_epoch);
  void Background() EXCLUDES(bg_mu_);
  template <typename Req, typename Rep>
  int CallOnce(Method<Req, Rep> method, const Req &req, Rep *rep);
  // Adds the bearer token (MARU_TOKEN_FILE, TCP only) to a call.
  void Authorize(grpc::ClientContext *ctx) const;
  // Moves queued lease releases into a request's header (they ride along)
  // and, if the request then never reached the server, back to the queue.
  void AttachReleases(rpc::Header *header) EXCLUDES(lease_mu_);
  void RequeueReleases(const google::protobuf::RepeatedField<uint64_t> &leases) EXCLUDES(lease_mu_);
  // Waits `ms` for the server to be reachable again, on the channel: gRPC's
  // synchronous channels make progress on a reconnect only while some
  // thread waits on them (a sleep left the handshake to gRPC's backup
  // poller, every 5 s). With `*early`, returns as soon as the connection is
  // up, and clears it: a connection that comes up only to fail the next
  // call again (a refused TLS client certificate) must not be retried
  // without pause.
  void AwaitServer(int64_t ms, bool *early);
  // The server answered this session now; counts a lapse if it had been
  // silent so long that it may have expired the session meanwhile.
  void NoteAnswer();
  // Connects to target `i` and opens the session there.
  Status OpenTarget(size_t i, bool tls);
  // After target `seen` failed: moves to the next one (once, whichever
  // threads saw it fail). True if there was another.
  bool NextTarget(size_t seen);
  // True if the server answering now leads with an epoch the pool fenced
  // out.
  bool StaleServer() const;
  Stub *stub() const { return targets_[current_.load()].stub.get(); }
  grpc::Channel *channel() const { return targets_[current_.load()].channel.get(); }

  const std::string address_;
  const ClientOptions options_;
  std::string token_;  // set in Connect() only
  // One channel per server of the list, made at Connect() and kept: a
  // switch is a store to current_, safe while other threads call.
  struct Target {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<Stub> stub;
  };
  std::vector<Target> targets_;
  std::unique_ptr<PoolControl> control_;             // set once
  std::atomic<const PoolControl *> fence_{nullptr};  // control_, once set
  std::atomic<uint64_t> server_epoch_{0};            // the server's, at session open
  std::atomic<size_t> current_{0};
  std::atomic<uint64_t> session_{0};
  std::atomic<int64_t> last_answer_ms_{0};  // the server last answered this session
  std::atomic<int64_t> lease_trust_ms_{1};  // how long after that a lease surely holds
  std::atomic<uint64_t> lapses_{0};         // answers that came after such a silence
  std::atomic<uint64_t> resuming_{0};       // odd while a resume may be dropping leases
  // lapses_ and resuming_ as this thread's last answer found them: a lease
  // granted in that answer is watched from there, so a lapse or a resume
  // between the answer and WatchLease() (a stall right after the open) is
  // not missed.
  inline static thread_local const MetaClient *answered_client_ = nullptr;
  inline static thread_local uint64_t answered_lapses_ = 0;
  inline static thread_local uint64_t answered_resuming_ = 0;
  std::unique_ptr<FastLaneClient> fast_;
  mutable Mutex session_mu_;
  // Guards no data: one resume at a time.
  Mutex resume_mu_;
  std::atomic<uint64_t> resume_epoch_{0};  // resumes so far
  rpc::OpenSessionReply info_ GUARDED_BY(session_mu_);
  std::function<void()> on_resume_;

  // Tracked leases, sharded by the thread that took them (a handle names its
  // shard), so that threads opening and releasing through the index at once
  // do not queue on one lock. Lock order: shards (in index order), then
  // lease_mu_.
  static constexpr uint64_t kLeaseShards = uint64_t{1} << HeldLeases::kTagBits;
  struct alignas(64) LeaseShard {
    Mutex mu;
    HeldLeases tracked GUARDED_BY(mu);  // handles tagged with this shard's index
  };
  LeaseShard &ShardOf(uint64_t handle) { return lease_shards_[handle % kLeaseShards]; }
  // A new handle in `shard` (this thread's, its lock held), tracked; 0 when
  // out of memory.
  uint64_t NewHandle(LeaseShard &shard, Tracked **tracked) REQUIRES(shard.mu);
  LeaseShard &ThreadShard();
  LeaseShard lease_shards_[kLeaseShards];
  Mutex lease_mu_;
  std::vector<uint64_t> to_release_ GUARDED_BY(lease_mu_);
  std::atomic<bool> release_pending_{false};

  Mutex bg_mu_;
  CondVar bg_cv_;
  bool stopping_ GUARDED_BY(bg_mu_) = false;
  std::thread background_;

 public:
  // CallFast() of each fast-lane operation (src/proto/fast_lane_ops.inc):
  // LookupPrefix(req, &rep), Open(req, &rep), ...
#define MARU_FAST_OP(Code, Name, Req, Rep) int Name(rpc::Req &req, rpc::Rep *rep);
#include "proto/fast_lane_ops.inc"
#undef MARU_FAST_OP
};

// --- Implementation of the call template ---------------------------------------

template <typename Req, typename Rep>
int MetaClient::CallOnce(Method<Req, Rep> method, const Req &req, Rep *rep) {
  grpc::ClientContext ctx;
  Authorize(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(options_.call_timeout_ms));
  rep->Clear();
  grpc::Status st = (stub()->*method)(&ctx, req, rep);
  if (!st.ok()) return GrpcErrno(st);
  if (rep->error() != ENOTCONN) NoteAnswer();
  return -rep->error();
}

template <typename Req, typename Rep>
int MetaClient::CallFast(uint8_t op, Method<Req, Rep> method, Req &req, Rep *rep) {
  if (fast_) {
    AttachReleases(req.mutable_header());
    req.mutable_header()->set_session(session_.load());
    int rc = fast_->Call(op, req, rep);
    if (rc == -ETIMEDOUT) {
      RequeueReleases(req.header().release());  // maybe never served
      return rc;
    }
    if (rc == 0 && rep->error() != ENOTCONN) {
      NoteAnswer();
      return -rep->error();
    }
  }
  return Call(method, req, rep);  // also resumes a session the server forgot
}

#define MARU_FAST_OP(Code, Name, Req, Rep)                     \
  inline int MetaClient::Name(rpc::Req &req, rpc::Rep *rep) {  \
    return CallFast(fastlane::k##Name, &Stub::Name, req, rep); \
  }
#include "proto/fast_lane_ops.inc"
#undef MARU_FAST_OP

template <typename Req, typename Rep>
int MetaClient::Call(Method<Req, Rep> method, Req &req, Rep *rep, const rpc::Caller *as) {
  if (as) *req.mutable_header()->mutable_caller() = *as;
  AttachReleases(req.mutable_header());
  const int64_t give_up = MonotonicMs() + options_.retry_window_ms;
  int64_t backoff_ms = 20;
  bool resumed = false, early = true;
  size_t moves = 0;
  for (;;) {
    const uint64_t epoch = resume_epoch_.load();
    const size_t target = current_.load();
    req.mutable_header()->set_session(session_.load());
    int rc = CallOnce(method, req, rep);
    if (rc != -ENOTCONN && StaleServer()) {
      rc = -ENOTCONN;  // a deposed leader: its answer is not trusted
      rep->set_error(0);
    }
    // A server that does not answer in time may be frozen: later calls try
    // the next one. This one may have been served, so it is not repeated.
    if (rc == -ETIMEDOUT && rep->error() == 0) NextTarget(target);
    if (rc == -ENOTCONN && rep->error() == ENOTCONN && !resumed) {
      // The server does not know our session: it restarted, or we were
      // silent too long. Take the session back and try once more.
      resumed = true;
      rc = Resume(epoch);
      // Releases of the old session's leases mean nothing to the new one:
      // those still held were renewed under new ids.
      req.mutable_header()->clear_release();
      if (rc == 0) continue;
    }
    if (rc != -ENOTCONN || rep->error() == ENOTCONN || MonotonicMs() >= give_up) {
      if (rc < 0 && rep->error() == 0) RequeueReleases(req.header().release());  // never served
      return rc;
    }
    // The server is unreachable or does not lead: try the next one, and
    // wait only once every one was tried. The next one resumes the session.
    if (NextTarget(target) && ++moves % targets_.size() != 0) {
      resumed = false;
      continue;
    }
    AwaitServer(backoff_ms, &early);
    backoff_ms = std::min<int64_t>(backoff_ms * 2, targets_.size() > 1 ? kFailoverBackoffMs : 500);
  }
}

}  // namespace maru
