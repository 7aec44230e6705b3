// Sessions: the server's record of a connection (session_table.h).
//
// A session opens new, or is taken back after a restart by its client
// (orphaned until then); heartbeats keep it alive and carry lease
// releases; closing or expiry ends everything it held: its leases, its
// reservations, the agents it registered and its index region.
#include <sys/random.h>

#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "util/clock.h"

namespace maru {
namespace {

constexpr size_t kMaxInstanceName = 64;

// An instance name is shown by tools and in metric labels: printable only.
int CheckInstanceName(const std::string &name) {
  if (name.size() > kMaxInstanceName) return ENAMETOOLONG;
  for (unsigned char ch : name)
    if (ch < 0x20 || ch == 0x7f) return EINVAL;
  return 0;
}

uint64_t RandomSessionId() {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != sizeof(id)) id = static_cast<uint64_t>(MonotonicNs());
  }
  return id;
}

}  // namespace

void MetaEngine::OpenSession(const Caller &c, const rpc::OpenSessionRequest &req,
                             rpc::OpenSessionReply *rep) {
  if (int err = CheckSessionStrings(options_.limits, req)) return rep->set_error(err);
  MutexLock lock(&mu_);
  uint64_t id = req.resume();
  if (int err = CheckInstanceName(req.instance())) return rep->set_error(err);
  Session *s = id ? sessions_.Find(id) : nullptr;
  // Only a session waiting for its client (orphaned by a restart) may be
  // taken back, and only by its uid. A live one is someone's: taking it
  // would revoke leases its client still trusts. (A client whose resume
  // reply was lost gets a new session; the old one times out.)
  // Any other id is the server's to choose: a client that could pick one
  // could take an id another uid will be told to resume.
  if (s && (s->uid != c.uid || !s->orphaned)) s = nullptr;
  // Every session costs the server memory and every lease it may take:
  // one uid other than root holds a bounded number (root's are maru-fuse's
  // and the agents').
  const uint32_t max = options_.limits.sessions_per_uid;
  if (!s && c.uid != 0 && max && sessions_.CountOf(c.uid) >= max) return rep->set_error(EMFILE);
  Txn txn(this);
  if (!s) {
    do id = RandomSessionId();
    while (sessions_.Find(id));
    s = sessions_.Create(id, c.uid);
    s->since_ns = RealtimeNs();
  } else {
    rep->set_resumed(true);
  }
  s->orphaned = false;
  s->client = req.client();
  s->hostname = req.hostname();
  s->instance = req.instance();
  s->pid = req.pid() ? req.pid() : c.pid;
  s->last_seen_ns = MonotonicNs();
  RenewHeldLeases(c, req, s, rep);
  txn.Commit();
  rep->set_session(id);
  rep->set_heartbeat_ms(options_.heartbeat_ms);
  rep->set_timeout_ms(static_cast<uint32_t>(options_.session_timeout_ms));
  rep->set_pool_uuid(pool_uuid_);
  rep->set_fast_lane(options_.fast_lane);
  AssignIndexRegion(c, s, rep);
  for (const SpaceManager::Device &d : space_.devices()) FillDevice(d, rep->add_devices());
}

void MetaEngine::Heartbeat(const Caller &c, const rpc::HeartbeatRequest &req,
                           rpc::HeartbeatReply *rep) {
  MutexLock lock(&mu_);
  Result<Session *> found = LiveSession(c, req.header().session());
  if (!found.ok()) return rep->set_error(found.status().errnum());
  Session *s = *found;
  if (req.header().release_size()) {
    Txn txn(this);
    ReleaseLeases(txn, s, req.header().release());
    txn.Commit();
  }
  rep->set_leases(static_cast<uint32_t>(s->leases.size()));
}

void MetaEngine::CloseSession(const Caller &c, const rpc::HeartbeatRequest &req,
                              rpc::ErrorReply *rep) {
  MutexLock lock(&mu_);
  Result<Session *> found = LiveSession(c, req.header().session());
  if (!found.ok()) return rep->set_error(found.status().errnum());
  Txn txn(this);
  ExpireSession(txn, req.header().session());
  rep->set_error(txn.Commit().errnum());
}

void MetaEngine::ExpireSession(Txn &txn, uint64_t id) {
  Session *s = sessions_.Find(id);
  if (!s) return;
  for (uint64_t lease_id : s->leases)
    if (std::optional<Lease> lease = leases_.Take(lease_id, id)) LeaseEnded(txn, lease_id, *lease);
  for (uint64_t ino : std::vector<uint64_t>(s->reservations.begin(), s->reservations.end())) {
    Inode *inode = tree_.Find(ino);
    if (inode && inode->pending && inode->pending->writer_session == id)
      DropPending(txn, inode, false);
  }
  for (uint64_t gen : s->orphan_gens) UnrefGen(txn, gen);
  std::erase_if(agents_, [&](const auto &a) { return a.second.session == id; });
  if (index_) {
    index_->DropRegion(id);  // its lease slots end with it: what they held may go
    space_.Tick(MonotonicNs(), &txn.batch);
  }
  sessions_.Remove(id);
}

}  // namespace maru
