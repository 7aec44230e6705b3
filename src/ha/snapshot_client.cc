#include "ha/snapshot_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "replication.grpc.pb.h"

namespace maru {

Result<std::vector<std::pair<std::string, std::string>>> FetchSnapshot(const std::string &address) {
  std::unique_ptr<rpc::Replication::Stub> stub =
      rpc::Replication::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  rpc::SnapshotRequest req;
  std::unique_ptr<grpc::ClientReader<rpc::SnapshotChunk>> reader = stub->Snapshot(&ctx, req);
  std::vector<std::pair<std::string, std::string>> records;
  rpc::SnapshotChunk chunk;
  while (reader->Read(&chunk))
    for (const rpc::SnapshotRecord &r : chunk.records()) records.emplace_back(r.key(), r.value());
  grpc::Status st = reader->Finish();
  if (!st.ok())
    return Status::Error(st.error_code() == grpc::StatusCode::PERMISSION_DENIED ? EPERM : EIO,
                         "snapshot from " + address + ": " + st.error_message());
  return records;
}

}  // namespace maru
