// A chunk handle beside the server and the pool: made from a chunk reply,
// reading under a lease, fetched when the pool is remote, released alone or
// in runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "handles.h"
#include "rdma/remote_pool.h"

namespace maru::direct {

// A registered buffer from the connection's cache; a writer's reads as
// zeros, as fresh extents do.
int AllocateStaging(maru_chunk_t *c, bool writer);

// The one-sided transfers that move [off, off+len) of a remote chunk to or
// from `local`.
// `memh`: the registration of `local`, if it is a staging buffer.
void AddTransfers(const maru_chunk_t *c, uint64_t off, uint64_t len, uint8_t *local,
                  std::vector<maru::RemotePool::Transfer> *out, ucp_mem_h memh = nullptr);

// Reads land in place: a read is good only if the lease held throughout.
int CheckStillLeased(maru_chunk_t *c);

// The handle reads under `lease` from now on.
void HoldLease(maru_chunk_t *c, uint64_t lease);

// Fetches a remote chunk into a local copy.
int Fetch(maru_chunk_t *c);

// Turns a chunk reply into a handle: its address in the pool mapping and
// its lease (or reservation).
// Before a read handle's first read, in a pool without hardware coherence
// (PoolMap::flush): drops this CPU's lines of the chunk's bytes.
void ForgetStale(maru_t *m, const uint8_t *data, uint64_t size);
int MakeChunk(maru_t *m, const maru::rpc::ChunkReply &rep, bool writing, maru_chunk_t **out);

// Releases out[0..n) and returns rc: a lookup takes all of its leases or none.
int ReleaseAll(maru_chunk_t **out, size_t n, int rc);

}  // namespace maru::direct
