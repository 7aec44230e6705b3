// The handles of the C API (maru_t, maru_chunk_t), for the files of
// libmaru_direct that implement it: connection.cc, create_and_seal.cc,
// open_and_lookup.cc, read_and_write.cc, parts.cc, async.cc and the rest.
#pragma once

#include <atomic>
#include <cstdlib>
#include <memory>

#include "alloc/extent_map.h"
#include "async_worker.h"
#include "client/index_reader.h"
#include "client/index_session.h"
#include "client/meta_client.h"
#include "client/pool_map.h"
#include "maru_direct_internal.h"
#include "rdma/remote_pool.h"
#include "util/mutex.h"

struct maru_handle {
  std::unique_ptr<maru::MetaClient> client;
  std::unique_ptr<maru::PoolMap> pool;        // the pool is mapped here
  std::unique_ptr<maru::RemotePool> remote;   // or reached through agents
  std::unique_ptr<maru::IndexSession> index;  // lookups without a message, where allowed
  std::atomic<uint64_t> next_request{1};
  // Large writes into the pool stream past the caches (util/stream_copy.h);
  // MARU_STREAM_WRITES=0 makes them plain copies.
  bool stream_writes = true;
  // Runs the async batches (maru_*_batch_async); started at the first.
  // Last member: stopped before the client and the pool go.
  maru::Mutex worker_mu;
  std::unique_ptr<maru::AsyncWorker> worker GUARDED_BY(worker_mu);
};

struct maru_chunk {
  maru_t *m = nullptr;
  uint64_t ino = 0, gen = 0, size = 0;
  uint8_t *data = nullptr;
  std::unique_ptr<maru::ChunkView> view;
  bool writing = false;
  bool allocated = false;  // from maru_alloc(): published, not sealed
  uint32_t mode = 0644;    // an allocation's, applied at publish
  int checksum = MARU_CHECKSUM_NONE;
  maru::rpc::ChecksumType recorded_type = maru::rpc::CHECKSUM_NONE;
  uint64_t recorded = 0;
  uint64_t lease_handle = 0;
  maru::MetaClient::LeaseWatch lease_watch;  // for maru_lease_check()
  // Remote chunks: where the bytes are, and a local copy once fetched (or,
  // for a writer, the staging buffer written to the pool at seal).
  maru::ExtentMap extents;
  std::unique_ptr<maru::StagingCache::Buffer> staging;
  bool remote = false;
  // Leased through a slot of the shared-memory index (else slot < 0).
  maru::IndexReader *index = nullptr;
  int slot = -1;
  // Layer-wise (maru_publish_part, maru_wait_part): parts in all, and how
  // many this handle knows are published; `partial` while a reader's chunk
  // may still be being written.
  uint32_t parts = 1;
  std::atomic<uint32_t> published{0};  // atomic: a wait may run beside reads
  std::atomic<bool> partial{false};
};
