// The leader's side of a standby's bootstrap: the Replication service's
// Snapshot call streams every record of the metadata database, from one
// consistent view, to an admin caller.
#pragma once

#include "meta/identity.h"
#include "meta/meta_engine.h"
#include "replication.grpc.pb.h"

namespace maru {

class SnapshotService final : public rpc::Replication::CallbackService {
 public:
  SnapshotService(MetaEngine *engine, const PeerRegistry *peers, IdentityPolicy policy);

  grpc::ServerWriteReactor<rpc::SnapshotChunk> *Snapshot(grpc::CallbackServerContext *ctx,
                                                         const rpc::SnapshotRequest *req) override;

 private:
  MetaEngine *engine_;
  const PeerRegistry *peers_;
  IdentityPolicy policy_;
};

}  // namespace maru
