// IndexSession: which shared-memory index a client process reads now.
//
// The server names its index (and this session's lease slots) in the
// session reply; after a server restart, or a resume that gave the session
// a new region, the next call attaches to what the new reply names. Readers
// attached before stay mapped while the process lives: chunks leased
// through their slots still point into them (one per restart, a few pages).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "client/index_reader.h"
#include "client/meta_client.h"
#include "util/mutex.h"

namespace maru {

class IndexSession {
 public:
  // `enabled` false (MARU_INDEX=0, a remote pool): never used.
  // `flush`: the pool is not kept coherent by the hardware (PoolMap::flush).
  // `pool`: the pool's index region as this process maps it. `local`: the
  // server is on this host (a Unix socket), so the index file it names is
  // the one it writes; a remote server's is read only from the pool.
  IndexSession(MetaClient *client, bool enabled, bool flush, PoolIndex pool, bool local);
  // The live index to read, or null: ask the server.
  IndexReader *Current();

 private:
  MetaClient *client_;
  const bool enabled_;
  const bool flush_;
  const PoolIndex pool_;
  const bool local_;
  std::atomic<IndexReader *> current_{nullptr};
  std::atomic<uint64_t> seen_epoch_{UINT64_MAX};
  Mutex mu_;  // one attach at a time
  std::vector<std::unique_ptr<IndexReader>> readers_ GUARDED_BY(mu_);
};

// The canonical form ("/a/b", as the server names it) of a path that
// passed CheckPath: the path itself, or built in `scratch`; empty if the
// path is not valid after all.
std::string_view CanonicalPath(const char *path, std::string *scratch);

}  // namespace maru
