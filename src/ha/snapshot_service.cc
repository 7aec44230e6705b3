#include "ha/snapshot_service.h"

#include <vector>

namespace maru {
namespace {

// Records go out in messages of about this many bytes.
constexpr size_t kChunkBytes = 1 << 20;

// Writes the chunks one after another, then finishes.
class ChunkWriter : public grpc::ServerWriteReactor<rpc::SnapshotChunk> {
 public:
  explicit ChunkWriter(std::vector<rpc::SnapshotChunk> chunks) : chunks_(std::move(chunks)) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the standby went away"));
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (next_ == chunks_.size()) return Finish(grpc::Status::OK);
    StartWrite(&chunks_[next_++]);
  }
  std::vector<rpc::SnapshotChunk> chunks_;
  size_t next_ = 0;
};

class Refusal : public grpc::ServerWriteReactor<rpc::SnapshotChunk> {
 public:
  explicit Refusal(grpc::Status status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

SnapshotService::SnapshotService(MetaEngine *engine, const PeerRegistry *peers,
                                 IdentityPolicy policy)
    : engine_(engine), peers_(peers), policy_(std::move(policy)) {}

grpc::ServerWriteReactor<rpc::SnapshotChunk> *SnapshotService::Snapshot(
    grpc::CallbackServerContext *ctx, const rpc::SnapshotRequest *req) {
  const std::string peer = ctx->peer();
  Result<Caller> caller =
      peer.rfind("fd:", 0) == 0
          ? Result<Caller>(ResolveCaller(peers_->Identify(peer), req->header(), policy_))
          : Status::Error(EPERM, "a snapshot is asked over a Unix socket");
  if (!caller.ok() || !caller->is_root())
    return new Refusal(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                    "maru-server: a snapshot of the metadata is for root only"));
  std::vector<rpc::SnapshotChunk> chunks(1);
  size_t bytes = 0;
  Status s = engine_->ScanMetadata([&](std::string_view key, std::string_view value) {
    if (bytes >= kChunkBytes) {
      chunks.emplace_back();
      bytes = 0;
    }
    rpc::SnapshotRecord *r = chunks.back().add_records();
    r->set_key(std::string(key));
    r->set_value(std::string(value));
    bytes += key.size() + value.size();
    return true;
  });
  if (!s.ok())
    return new Refusal(grpc::Status(grpc::StatusCode::INTERNAL, "maru-server: " + s.ToString()));
  return new ChunkWriter(std::move(chunks));
}

}  // namespace maru
