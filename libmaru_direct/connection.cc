// libmaru_direct: the C API over MetaClient (control) and, for data, either
// PoolMap (the pool is mapped here: loads and stores in place) or
// RemotePool (it is not: through maru-agent, one-sided get/put on RDMA, checked
// two-sided transfers on TCP).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "handles.h"
#include "util/address.h"
#include "util/status.h"

using maru::MetaClient;
namespace rpc = maru::rpc;
using Stub = maru::rpc::Meta::Stub;

namespace {

constexpr size_t kMaxInstanceName = 64;

int64_t EnvInt(const char *name, int64_t fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  long long n = strtoll(v, &end, 10);
  return *end ? fallback : n;
}

// The option if given, else $MARU_POPULATE, else the bounded default.
maru::Populate PopulateMode(const maru_connect_opts_t *opts) {
  const int mode = opts ? opts->populate : MARU_POPULATE_AUTO;
  if (mode == MARU_POPULATE_NEVER) return maru::Populate::kNever;
  if (mode == MARU_POPULATE_ALWAYS) return maru::Populate::kAlways;
  const int64_t env = EnvInt("MARU_POPULATE", -1);
  if (env < 0) return maru::Populate::kAuto;
  return env ? maru::Populate::kAlways : maru::Populate::kNever;
}

// Where the agents are now, as the server knows it: an agent that went away
// may come back elsewhere.
maru::RemotePool::AgentMap AgentsNow(MetaClient *meta) {
  maru::RemotePool::AgentMap now;
  rpc::StatfsRequest req;
  rpc::StatfsReply rep;
  if (meta->Call(&Stub::Statfs, req, &rep) == 0)
    for (const rpc::Device &d : rep.devices()) now[d.index()] = d.agent();
  return now;
}

// The server vouches to the agent for what this session holds.
maru::Result<std::string> IssueGrant(MetaClient *meta, uint32_t device,
                                     const std::vector<maru::RemotePool::Range> &ranges,
                                     bool writable) {
  rpc::IssueGrantRequest req;
  req.set_device(device);
  req.set_writable(writable);
  for (const maru::RemotePool::Range &r : ranges) {
    rpc::Extent *e = req.add_extents();
    e->set_device(device);
    e->set_offset(r.offset);
    e->set_length(r.length);
  }
  rpc::GrantReply rep;
  if (int rc = meta->Call(&Stub::IssueGrant, req, &rep))
    return maru::FromReturnCode(rc, "no grant for the extents");
  return rep.grant().SerializeAsString();
}

// The pool through the agents that `info` names, where this host does not
// map it: 0, or `no_agent` when a device has no agent.
int ReachAgents(maru_t *m, const rpc::OpenSessionReply &info, int64_t timeout_ms, int no_agent) {
  maru::RemotePool::AgentMap agents;
  for (const rpc::Device &d : info.devices())
    if (!d.agent().empty()) agents[d.index()] = d.agent();
  if (agents.size() != static_cast<size_t>(info.devices_size())) return no_agent;
  MetaClient *meta = m->client.get();
  auto remote = maru::RemotePool::Create(
      agents, timeout_ms, [meta] { return AgentsNow(meta); },
      [meta](uint32_t device, const std::vector<maru::RemotePool::Range> &ranges, bool writable) {
        return IssueGrant(meta, device, ranges, writable);
      });
  if (!remote.ok()) return maru::ReturnCode(remote.status());
  m->remote = std::move(*remote);
  return 0;
}

// The pool's region for the index in this process's mapping of its first
// device, by this process's own read of the superblock; none if the pool
// has none or this process may not write it (lease slots are written).
maru::PoolIndex PoolIndexOf(const maru::PoolMap *pool) {
  const maru::PoolDevice *d = pool && pool->writable() ? pool->device(0) : nullptr;
  if (!d) return {};
  const maru::Superblock &sb = d->superblock();
  if (sb.index_bytes == 0 || sb.index_offset > d->mapped_bytes() ||
      sb.index_bytes > d->mapped_bytes() - sb.index_offset)
    return {};
  return {d->base() + sb.index_offset, static_cast<size_t>(sb.index_bytes)};
}

}  // namespace

extern "C" {

int maru_connect(const char *target, maru_t **out) {
  return maru_connect_ex(target, nullptr, out);
}

int maru_connect_ex(const char *target, const maru_connect_opts_t *opts, maru_t **out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (opts && opts->instance && strlen(opts->instance) > kMaxInstanceName) return -ENAMETOOLONG;
  if (opts && (opts->populate < MARU_POPULATE_AUTO || opts->populate > MARU_POPULATE_ALWAYS))
    return -EINVAL;
  if (!target) target = getenv("MARU_SERVER");
  if (!target || !*target) target = maru::kDefaultServerAddress;
  maru::ClientOptions options;
  options.client_name = "libmaru_direct";
  if (opts && opts->instance) options.instance = opts->instance;
  options.call_timeout_ms = EnvInt("MARU_TIMEOUT_MS", options.call_timeout_ms);
  options.connect_timeout_ms = std::min(options.connect_timeout_ms, options.call_timeout_ms);
  options.retry_window_ms = EnvInt("MARU_RETRY_MS", options.retry_window_ms);
  auto client = MetaClient::Connect(target, options);
  if (!client.ok()) return maru::ReturnCode(client.status());
  auto m = std::unique_ptr<maru_t>(new (std::nothrow) maru_t());
  if (!m) return -ENOMEM;
  const rpc::OpenSessionReply info = (*client)->session_info();
  m->client = std::move(*client);
  // Map the pool if this host sees it; else go through the agents.
  const char *data_path = getenv("MARU_DATA");
  const bool force_remote = data_path && strcmp(data_path, "remote") == 0;
  maru::Result<std::unique_ptr<maru::PoolMap>> pool = maru::Status::Error(ENODEV, "remote");
  if (!force_remote) pool = maru::PoolMap::Open(info, PopulateMode(opts));
  if (pool.ok()) {
    m->pool = std::move(*pool);
  } else {
    const int err = pool.status().errnum();
    if (!force_remote && err != ENOENT && err != ENODEV && err != EACCES)
      return maru::ReturnCode(pool.status());
    const int no_agent = force_remote ? -ENODEV : maru::ReturnCode(pool.status());
    if (int rc = ReachAgents(m.get(), info, options.call_timeout_ms, no_agent); rc < 0) return rc;
  }
  // A server fenced out of the pool by a newer leader is refused.
  if (m->pool && m->pool->device(0)) {
    const maru::PoolDevice *dev = m->pool->device(0);
    maru::Result<maru::PoolControl> control = maru::PoolControl::At(dev->base(), dev->superblock());
    if (control.ok()) m->client->set_pool_control(*control);
  }
  m->stream_writes = EnvInt("MARU_STREAM_WRITES", 1) != 0;
  // The index is read where the pool is mapped: from the pool's region on
  // any host, or from the file of a server on this one.
  const char *use_index = getenv("MARU_INDEX");
  const bool index_ok = m->pool && !(use_index && strcmp(use_index, "0") == 0);
  // The index file is one server's: read only with that server alone. The
  // pool's region is every leader's in turn.
  const bool local = m->client->targets() == 1 && m->client->address().rfind("unix://", 0) == 0;
  m->index = std::make_unique<maru::IndexSession>(
      m->client.get(), index_ok, m->pool && m->pool->flush(), PoolIndexOf(m->pool.get()), local);
  *out = m.release();
  return 0;
}

void maru_disconnect(maru_t *m) {
  delete m;
}

int maru_pool_info(maru_t *m, maru_pool_info_t *out) {
  if (!m || !out) return -EINVAL;
  maru::rpc::StatfsRequest req;
  maru::rpc::StatfsReply rep;
  int rc = m->client->Call(&Stub::Statfs, req, &rep);
  if (rc < 0) return rc;
  out->total = rep.total();
  out->free = rep.free();
  out->unit = rep.unit();
  out->files = rep.files();
  return 0;
}

int maru_pool_regions(maru_t *m, maru_region_t *out, size_t max, size_t *count) {
  if (count) *count = 0;
  if (!m || !count || (!out && max)) return -EINVAL;
  if (!m->pool) return 0;  // reached through agents: nothing mapped here
  size_t found = 0;
  for (uint32_t i = 0; i < m->pool->device_slots(); ++i) {
    const maru::PoolDevice *d = m->pool->device(i);
    if (!d) continue;
    if (found < max) out[found] = maru_region_t{d->base(), d->mapped_bytes(), i};
    ++found;
  }
  *count = found;
  return 0;
}

}  // extern "C"
