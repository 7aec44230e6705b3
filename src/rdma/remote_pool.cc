#include "rdma/remote_pool.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "rdma/ucx_wire.h"
#include "util/address.h"
#include "util/log.h"

namespace maru {

Result<std::unique_ptr<RemotePool>> RemotePool::Create(AgentMap agents, int64_t timeout_ms,
                                                       std::function<AgentMap()> refresh,
                                                       Issuer issue) {
  std::unique_ptr<RemotePool> pool(new RemotePool());
  pool->timeout_ms_ = timeout_ms;
  pool->refresh_ = std::move(refresh);
  pool->issue_ = std::move(issue);
  Result<std::unique_ptr<UcxWorker>> ucx = UcxWorker::Create();
  if (!ucx.ok()) return ucx.status();
  pool->ucx_ = std::move(*ucx);
  pool->staging_ = StagingCache::Create(pool->ucx_->context(), kStagingCacheBytes);
  MARU_RETURN_IF_ERROR(pool->ucx_->SetHandler(wire::kGrantReplyId, OnReply, pool.get()));
  MARU_RETURN_IF_ERROR(pool->ucx_->SetHandler(wire::kReadReplyId, OnDataReply, pool.get()));
  MARU_RETURN_IF_ERROR(pool->ucx_->SetHandler(wire::kWriteReplyId, OnDataReply, pool.get()));
  MutexLock lock(&pool->mu_);  // nobody else has the pool yet
  for (auto &[device, address] : agents) {
    Result<Address> a = ParseAddress(address);
    if (!a.ok() || a->kind != Address::Kind::kTcp)
      return Status::Error(EINVAL, "agent address must be tcp://HOST:PORT, not '" + address + "'");
    pool->agents_[device].address = address;
  }
  return pool;
}

RemotePool::~RemotePool() {
  MutexLock lock(&mu_);
  for (auto &[device, agent] : agents_) Disconnect(agent);
  staging_->Close();  // before the UCX context goes
}

void RemotePool::OnError(void *arg, ucp_ep_h, ucs_status_t status) {
  auto *agent = static_cast<Agent *>(arg);
  LOG_DEBUG("agent %s: %s", agent->address.c_str(), ucs_status_string(status));
  agent->failed = true;
}

ucs_status_t RemotePool::OnReply(void *arg, const void *, size_t, void *data, size_t length,
                                 const ucp_am_recv_param_t *param) {
  auto *self = static_cast<RemotePool *>(arg);
  self->mu_.AssertHeld();  // run by ucx_'s progress within a Move
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length < sizeof(wire::GrantReply))
    return UCS_OK;
  // The message may sit at any alignment in UCX's buffer: copy its header out.
  wire::GrantReply r;
  memcpy(&r, data, sizeof(r));
  Reply out;
  out.error = r.error;
  out.base = r.remote_base;
  out.checked = r.flags & wire::kReplyChecked;
  const auto *at = static_cast<const uint8_t *>(data) + sizeof(wire::GrantReply);
  const auto *end = static_cast<const uint8_t *>(data) + length;
  for (uint32_t i = 0; i < r.count && out.error == 0; ++i) {
    uint32_t n = 0;
    if (end - at < static_cast<ptrdiff_t>(sizeof(n))) break;
    memcpy(&n, at, sizeof(n));
    at += sizeof(n);
    if (static_cast<size_t>(end - at) < n) break;
    out.rkeys.emplace_back(at, at + n);
    at += n;
  }
  if (r.error == 0 && !out.checked && (r.count == 0 || out.rkeys.size() != r.count))
    out.error = EPROTO;
  self->replies_[r.request_id] = std::move(out);
  return UCS_OK;
}

void RemotePool::DropKeys(Agent &agent) {
  for (ucp_rkey_h k : agent.rkeys) ucp_rkey_destroy(k);
  agent.rkeys.clear();
}

void RemotePool::Disconnect(Agent &agent) {
  if (agent.failed) agent.lost = true;
  DropKeys(agent);
  if (agent.ep) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucx_->Wait(ucp_ep_close_nbx(agent.ep, &p), 1000);
  }
  agent.ep = nullptr;
  agent.failed = false;
  agent.proven = false;
}

Status RemotePool::Connect(Agent &agent) {
  if (agent.ep && !agent.failed) return Status::Ok();
  Disconnect(agent);
  if (agent.lost && refresh_) {
    for (auto &[device, address] : refresh_())
      if (auto it = agents_.find(device); it != agents_.end() && !address.empty())
        it->second.address = address;
    agent.lost = false;
  }
  Result<Address> a = ParseAddress(agent.address);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(a->host.c_str(), std::to_string(a->port).c_str(), &hints, &res) != 0)
    return Status::Error(EHOSTUNREACH, "cannot resolve agent " + agent.address);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = res->ai_addr;
  ep.sockaddr.addrlen = res->ai_addrlen;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = OnError;
  ep.err_handler.arg = &agent;
  ucs_status_t st = ucp_ep_create(ucx_->worker(), &ep, &agent.ep);
  freeaddrinfo(res);
  if (st != UCS_OK) {
    agent.ep = nullptr;
    return Status::Error(UcsErrno(st), "cannot reach agent " + agent.address);
  }
  return Status::Ok();
}

Status RemotePool::Grant(Agent &agent, uint32_t device,
                         const std::vector<const Transfer *> &transfers, bool put,
                         std::vector<ucp_rkey_h> *keys, uint64_t *base) {
  std::vector<Range> ranges;
  for (const Transfer *t : transfers) ranges.push_back({t->offset, t->length});
  Result<std::string> grant =
      issue_ ? issue_(device, ranges, put) : Status::Error(EPERM, "no grant issuer");
  if (!grant.ok()) return grant.status();
  std::vector<uint8_t> msg(sizeof(wire::GrantRequest) + grant->size());
  wire::GrantRequest head{};
  head.request_id = next_request_++;
  head.grant_bytes = static_cast<uint32_t>(grant->size());
  memcpy(msg.data(), &head, sizeof(head));
  memcpy(msg.data() + sizeof(head), grant->data(), grant->size());
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  const uint64_t id = head.request_id;
  ucs_status_t st = ucx_->Wait(
      ucp_am_send_nbx(agent.ep, wire::kGrantRequestId, nullptr, 0, msg.data(), msg.size(), &p),
      timeout_ms_, [&]() REQUIRES(mu_) {
        agent.failed = true;  // stuck: closing the endpoint gives `msg` back
        Disconnect(agent);
      });
  if (st != UCS_OK)
    return Status::Error(agent.failed ? ECONNRESET : UcsErrno(st),
                         "grant request to " + agent.address);
  if (!ucx_->ProgressUntil([&]() REQUIRES(mu_) { return replies_.count(id) || agent.failed; },
                           timeout_ms_))
    return Status::Error(ETIMEDOUT, "agent " + agent.address + " did not answer");
  if (!replies_.count(id))
    return Status::Error(ECONNRESET, "agent " + agent.address + " went away");
  Reply reply = std::move(replies_[id]);
  replies_.erase(id);
  agent.proven = true;  // a full round trip: the connection is up
  if (reply.error)
    return Status::Error(reply.error,
                         "agent " + agent.address + " refused the grant: " + strerror(reply.error));
  agent.checked = reply.checked;
  if (reply.checked) {
    *base = reply.base;  // the ticket
    return Status::Ok();
  }
  if (reply.rkeys.size() != transfers.size())
    return Status::Error(EPROTO, "agent " + agent.address + " sent the wrong number of keys");
  for (const std::vector<uint8_t> &packed : reply.rkeys) {
    ucp_rkey_h k = nullptr;
    st = ucp_ep_rkey_unpack(agent.ep, packed.data(), &k);
    if (st != UCS_OK) return Status::Error(UcsErrno(st), "bad remote key from " + agent.address);
    agent.rkeys.push_back(k);  // destroyed once the transfers are done
    keys->push_back(k);
  }
  *base = reply.base;
  return Status::Ok();
}

size_t RemotePool::OpsInFlight() const {
  return std::count_if(ops_.begin(), ops_.end(), [](const auto &o) { return !o.second.done; });
}

Status RemotePool::PostChecked(Agent &agent, uint64_t ticket,
                               const std::vector<const Transfer *> &part, bool put,
                               std::vector<std::pair<Agent *, void *>> *requests) {
  for (const Transfer *t : part) {
    // A window in flight: more would only queue in the agent.
    if (!ucx_->ProgressUntil(
            [&]() REQUIRES(mu_) { return OpsInFlight() < kWindow || agent.failed; }, timeout_ms_))
      return Status::Error(ETIMEDOUT, "agent " + agent.address + " did not answer");
    if (agent.failed) return Status::Error(ECONNRESET, "agent " + agent.address + " went away");
    const uint64_t id = next_request_++;
    DataOp &op = ops_.emplace(id, DataOp{t, put, {id, ticket, t->offset, t->length}}).first->second;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    if (put && t->memh) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = t->memh;
    }
    // The header lives in `op` until the answer; a write's bytes follow it.
    void *r =
        ucp_am_send_nbx(agent.ep, put ? wire::kWriteRequestId : wire::kReadRequestId, &op.head,
                        sizeof(op.head), put ? t->local : nullptr, put ? t->length : 0, &p);
    requests->emplace_back(&agent, r);
  }
  return Status::Ok();
}

ucs_status_t RemotePool::OnDataReply(void *arg, const void *header, size_t header_length,
                                     void *data, size_t length, const ucp_am_recv_param_t *param) {
  auto *self = static_cast<RemotePool *>(arg);
  self->mu_.AssertHeld();  // run by ucx_'s progress within a Move
  if (header_length != sizeof(wire::DataReply)) return UCS_OK;
  wire::DataReply r;
  memcpy(&r, header, sizeof(r));
  auto it = self->ops_.find(r.request_id);
  if (it == self->ops_.end() || it->second.done) return UCS_OK;  // an abandoned op
  DataOp &op = it->second;
  const Transfer *t = op.transfer;
  if (r.error || op.write) {
    op.error = r.error;
    op.done = true;
    return UCS_OK;
  }
  if (length != t->length) {
    op.error = EPROTO;
    op.done = true;
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    memcpy(t->local, data, length);
    op.done = true;
    return UCS_OK;
  }
  // Large: straight into the caller's buffer.
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = OnDataReceived;
  p.user_data = &op;
  if (t->memh) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = t->memh;
  }
  void *req = ucp_am_recv_data_nbx(self->ucx_->worker(), data, t->local, length, &p);
  if (req == nullptr) {
    op.done = true;
  } else if (!UCS_PTR_IS_ERR(req)) {
    op.receiving = true;
  } else if (UCS_PTR_IS_ERR(req)) {
    op.error = UcsErrno(UCS_PTR_STATUS(req));
    op.done = true;
  }
  return UCS_OK;
}

void RemotePool::OnDataReceived(void *request, ucs_status_t status, size_t, void *user_data) {
  auto *op = static_cast<DataOp *>(user_data);
  op->error = UcsErrno(status);
  op->done = true;
  op->receiving = false;
  ucp_request_free(request);
}

Status RemotePool::AwaitChecked() {
  if (ops_.empty()) return Status::Ok();
  Status result;
  auto failed = [&]() REQUIRES(mu_) {
    return std::any_of(agents_.begin(), agents_.end(),
                       [](const auto &a) { return a.second.checked && a.second.failed; });
  };
  if (!ucx_->ProgressUntil([&]() REQUIRES(mu_) { return OpsInFlight() == 0 || failed(); },
                           timeout_ms_))
    result = Status::Error(ETIMEDOUT, "the agent did not answer");
  if (OpsInFlight() != 0) {
    if (result.ok()) result = Status::Error(ECONNRESET, "the agent went away");
    // Closing the endpoints finishes any receive into the caller's buffers.
    for (auto &[device, agent] : agents_)
      if (agent.checked) {
        agent.failed = true;
        Disconnect(agent);
      }
    // The caller frees its buffers after this: no receive may still run.
    while (!ucx_->ProgressUntil(
        [&]() REQUIRES(mu_) {
          return std::none_of(ops_.begin(), ops_.end(),
                              [](const auto &o) { return o.second.receiving; });
        },
        10000))
      LOG_WARN("a receive from the agent is still running after its endpoint closed; waiting");
  }
  for (const auto &[id, op] : ops_)
    if (op.done && op.error && result.ok())
      result = Status::Error(op.error, std::string(op.write ? "write to" : "read from") +
                                           " the agent: " + strerror(op.error));
  ops_.clear();
  return result;
}

Status RemotePool::Move(const std::vector<Transfer> &transfers, bool put) {
  MutexLock lock(&mu_);
  bool fresh_failed = false;
  Status s = MoveOnce(transfers, put, &fresh_failed);
  // UCX may reset a connection while setting it up (seen over TCP under
  // load). One that never completed an exchange is made again, once: the
  // transfers are idempotent. A proven connection that breaks is reported.
  if (!s.ok() && fresh_failed) {
    LOG_INFO("%s; connecting again", s.ToString().c_str());
    s = MoveOnce(transfers, put, &fresh_failed);
  }
  if (!s.ok()) LOG_WARN("%s", s.ToString().c_str());
  return s;
}

Status RemotePool::MoveOnce(const std::vector<Transfer> &transfers, bool put, bool *fresh_failed) {
  std::map<uint32_t, std::vector<const Transfer *>> by_device;
  for (const Transfer &t : transfers) by_device[t.device].push_back(&t);
  std::vector<std::pair<Agent *, void *>> requests;
  Status result;
  for (auto &[device, list] : by_device) {
    result = Post(device, list, put, &requests);
    if (!result.ok()) break;  // but what was posted is still waited for
  }
  // The caller frees its buffers once this returns: every request posted
  // must be finished first, even after an error.
  for (auto &[agent, r] : requests) {
    Agent *a = agent;
    ucs_status_t st = ucx_->Wait(r, timeout_ms_, [&] {
      // A stuck transfer: closing the endpoint makes UCX give it back.
      a->failed = true;
      Disconnect(*a);
    });
    if (st != UCS_OK && result.ok())
      result = Status::Error(
          st == UCS_ERR_TIMED_OUT ? ETIMEDOUT
          : a->failed || a->lost  ? ECONNRESET
                                  : UcsErrno(st),
          std::string(put ? "put to " : "get from ") + a->address + ": " + ucs_status_string(st));
  }
  if (Status s = AwaitChecked(); !s.ok() && result.ok()) result = s;
  for (auto &[device, agent] : agents_) {
    if (agent.failed && !agent.proven) *fresh_failed = true;
    if (agent.failed) Disconnect(agent);
    DropKeys(agent);  // every transfer that used them is finished
  }
  return result;
}

Status RemotePool::Post(uint32_t device, const std::vector<const Transfer *> &list, bool put,
                        std::vector<std::pair<Agent *, void *>> *requests) {
  auto it = agents_.find(device);
  if (it == agents_.end())
    return Status::Error(ENODEV, "no agent serves device " + std::to_string(device));
  Agent &agent = it->second;
  MARU_RETURN_IF_ERROR(Connect(agent));
  // The agent checks at most kMaxGrantExtents per grant.
  for (size_t first = 0; first < list.size(); first += wire::kMaxGrantExtents) {
    const size_t n = std::min<size_t>(wire::kMaxGrantExtents, list.size() - first);
    std::vector<const Transfer *> part(list.begin() + first, list.begin() + first + n);
    std::vector<ucp_rkey_h> keys;
    uint64_t base = 0;
    Status granted = Grant(agent, device, part, put, &keys, &base);
    // A grant can expire on its way: an agent that first had to fetch a
    // restarted server's key, or one slow to be scheduled. A fresh grant,
    // issued now, is what the caller asked for; a second expiry is reported.
    if (granted.errnum() == EKEYEXPIRED && !agent.failed) {
      LOG_INFO("a grant expired on its way to agent %s; asking for a fresh one",
               agent.address.c_str());
      granted = Grant(agent, device, part, put, &keys, &base);
      if (granted.errnum() == EKEYEXPIRED)
        granted = Status::Error(EKEYEXPIRED, granted.message() +
                                                 " (twice: is the agent's clock ahead of the "
                                                 "server's?)");
    }
    if (!granted.ok()) {
      if (agent.failed) agent.lost = true;  // the next call reconnects, maybe elsewhere
      return granted;
    }
    if (agent.checked) {
      MARU_RETURN_IF_ERROR(PostChecked(agent, base, part, put, requests));
      continue;
    }
    // Every transfer of the grant in flight at once.
    for (size_t i = 0; i < part.size(); ++i) {
      const Transfer *t = part[i];
      ucp_request_param_t p{};
      if (t->memh) {
        p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
        p.memh = t->memh;
      }
      void *r = put ? ucp_put_nbx(agent.ep, t->local, t->length, base + t->offset, keys[i], &p)
                    : ucp_get_nbx(agent.ep, t->local, t->length, base + t->offset, keys[i], &p);
      requests->emplace_back(&agent, r);
    }
  }
  if (put && !agent.checked) {
    // Puts are complete only once flushed to the target.
    ucp_request_param_t p{};
    requests->emplace_back(&agent, ucp_ep_flush_nbx(agent.ep, &p));
  }
  return Status::Ok();
}

}  // namespace maru
