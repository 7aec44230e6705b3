// Agents (maru-agent) serve the pool to hosts without CXL. An agent
// registers the devices it serves and gets the key that signs grants; a
// client gets a grant for extents its session holds; an agent asks whether
// a session still holds the extents of a grant before it serves them.
#include <algorithm>
#include <deque>

#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "meta/pool_identity.h"
#include "proto/grant_mac.h"
#include "util/clock.h"

namespace maru {

void MetaEngine::RegisterAgent(const Caller &c, const rpc::RegisterAgentRequest &req,
                               rpc::RegisterAgentReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *session) REQUIRES(mu_) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "agents run as root");
    if (req.address().empty()) return Status::Error(EINVAL, "an agent needs an address");
    if (grant_key_.empty()) return Status::Error(EIO, "no grant key (no randomness at start)");
    for (const std::string &uuid : req.device_uuids()) {
      const SpaceManager::Device *found = nullptr;
      for (const SpaceManager::Device &d : space_.devices())
        if (UuidBytes(d.superblock.device_uuid) == uuid) found = &d;
      if (!found) return Status::Error(ENODEV, "not a device of this pool");
      agents_[found->index] = AgentInfo{req.address(), session->id};
    }
    rep->set_grant_key(grant_key_);
    return Status::Ok();
  });
}

// The extents behind the first `published` parts of a version being
// written: what a layer-wise reader may be granted.
ExtentList MetaEngine::PublishedExtents(const Version &v) {
  const uint32_t parts = std::max<uint32_t>(v.parts, 1);
  uint64_t left = v.published >= parts ? v.size : v.size / parts * v.published;
  ExtentList out;
  for (const Extent &e : v.extents) {
    if (left == 0) break;
    const uint64_t n = std::min(left, e.length);
    out.push_back({e.device, e.offset, n});
    left -= n;
  }
  return out;
}

Status MetaEngine::HoldsExtents(const Session &client, uint32_t device,
                                const google::protobuf::RepeatedPtrField<rpc::Extent> &extents,
                                bool writable) {
  // Every extent asked for must lie inside a version the client holds: a
  // lease on it, or its own reservation. Only a reservation is writable.
  std::vector<const ExtentList *> held, reserved;
  std::deque<ExtentList> published;  // owns the lists of layer-wise readers' leases
  for (uint64_t lease_id : client.leases) {
    const Lease *lease = leases_.Find(lease_id);
    const Inode *inode = lease ? tree_.Find(lease->ino) : nullptr;
    if (inode && inode->current && inode->current->gen == lease->gen) {
      held.push_back(&inode->current->extents);
    } else if (inode && inode->pending && inode->pending->gen == lease->gen) {
      // A layer-wise reader's (OpenPartial): only the parts published so
      // far, never the bytes the writer has not written yet.
      published.push_back(PublishedExtents(*inode->pending));
      held.push_back(&published.back());
    } else if (lease && space_.retired().count(lease->gen))
      held.push_back(&space_.retired().at(lease->gen));
  }
  for (uint64_t ino : client.reservations)
    if (const Inode *inode = tree_.Find(ino); inode && inode->pending)
      reserved.push_back(&inode->pending->extents);
  // Its allocations under no name (Alloc, until Publish) and its writes
  // whose file was removed: still its own, unsealed, so writable.
  for (uint64_t gen : client.orphan_gens)
    if (auto it = space_.retired().find(gen); it != space_.retired().end())
      reserved.push_back(&it->second);
  if (extents.empty()) return Status::Error(EINVAL, "no extents to check");
  auto covers = [&](const std::vector<const ExtentList *> &lists, const rpc::Extent &want) {
    for (const ExtentList *list : lists)
      for (const Extent &e : *list)
        if (e.device == device && e.device == want.device() && want.offset() >= e.offset &&
            want.offset() < e.end() && want.length() <= e.end() - want.offset())
          return true;
    return false;
  };
  for (const rpc::Extent &want : extents) {
    if (covers(reserved, want)) continue;
    // Not (or no longer) held: for a reader, its lease is gone.
    if (!covers(held, want))
      return Status::Error(ESTALE, "extent not leased or reserved by that session");
    if (writable) return Status::Error(EACCES, "a lease grants reading only");
  }
  return Status::Ok();
}

void MetaEngine::CheckExtents(const Caller &c, const rpc::CheckExtentsRequest &req,
                              rpc::ErrorReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) -> Status {
    // The session and uid come from a grant the agent verified (a MAC the
    // server made): the session must still be that uid's.
    if (!c.is_root()) return Status::Error(EPERM, "only agents check extents");
    Session *client = sessions_.Find(req.client_session());
    if (!client || client->orphaned || client->uid != req.client_uid())
      return Status::Error(ESTALE, "no such session of that uid");
    return HoldsExtents(*client, req.device(), req.extents(), req.writable());
  });
}

void MetaEngine::IssueGrant(const Caller &c, const rpc::IssueGrantRequest &req,
                            rpc::GrantReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *session) REQUIRES(mu_) -> Status {
    // A grant speaks for its session: only that session's own uid gets one.
    if (session->uid != c.uid && !c.is_root())
      return Status::Error(EPERM, "grants go to the session's own uid");
    if (req.extents_size() > 256) return Status::Error(E2BIG, "at most 256 extents per grant");
    MARU_RETURN_IF_ERROR(HoldsExtents(*session, req.device(), req.extents(), req.writable()));
    const uint32_t ttl =
        req.ttl_ms() == 0 ? kMaxGrantTtlMs : std::min(req.ttl_ms(), kMaxGrantTtlMs);
    rpc::Grant *g = rep->mutable_grant();
    g->set_session(session->id);
    g->set_uid(session->uid);
    g->set_device(req.device());
    *g->mutable_extents() = req.extents();
    g->set_writable(req.writable());
    g->set_serial(++grant_serial_);
    g->set_expires_ms(RealtimeNs() / 1000000 + ttl);
    g->set_mac(GrantMac(grant_key_, *g));
    return Status::Ok();
  });
}

}  // namespace maru
