#include "rdma/ucx_agent.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "proto/grant_mac.h"
#include "rdma/ucx_wire.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/units.h"

namespace maru {

Result<std::unique_ptr<UcxAgent>> UcxAgent::Start(
    std::unique_ptr<MetaClient> client, std::map<uint32_t, std::unique_ptr<PoolDevice>> devices,
    const std::string &listen_host, int port, bool checked) {
  std::unique_ptr<UcxAgent> agent(new UcxAgent());
  agent->client_ = std::move(client);
  agent->devices_ = std::move(devices);
  agent->checked_ = checked;
  Result<std::unique_ptr<UcxWorker>> ucx = UcxWorker::Create(!checked);
  if (!ucx.ok()) return ucx.status();
  agent->ucx_ = std::move(*ucx);

  // Extents are registered one by one as grants name them.
  agent->registry_ = std::make_unique<ExtentRegistry>(agent->ucx_->context());

  // Every other id gets a handler that drops the message: UCX 1.13 crashed
  // the agent on a message under an id with no handler (a test sends some).
  for (unsigned id = 0; id <= UINT16_MAX; ++id)
    if (id != wire::kGrantRequestId &&
        (!checked || (id != wire::kReadRequestId && id != wire::kWriteRequestId)))
      MARU_RETURN_IF_ERROR(agent->ucx_->SetHandler(id, OnStray, nullptr));
  MARU_RETURN_IF_ERROR(agent->ucx_->SetHandler(wire::kGrantRequestId, OnGrant, agent.get()));
  if (checked) {
    MARU_RETURN_IF_ERROR(agent->ucx_->SetHandler(wire::kReadRequestId, OnRead, agent.get()));
    MARU_RETURN_IF_ERROR(agent->ucx_->SetHandler(wire::kWriteRequestId, OnWrite, agent.get()));
  }

  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(listen_host.empty() ? nullptr : listen_host.c_str(), std::to_string(port).c_str(),
                  &hints, &res) != 0)
    return Status::Error(EINVAL, "cannot resolve " + listen_host);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = res->ai_addr;
  lp.sockaddr.addrlen = res->ai_addrlen;
  lp.conn_handler.cb = OnConnect;
  lp.conn_handler.arg = agent.get();
  ucs_status_t st = ucp_listener_create(agent->ucx_->worker(), &lp, &agent->listener_);
  freeaddrinfo(res);
  if (st != UCS_OK)
    return Status::Error(UcsErrno(st) == EIO ? EADDRINUSE : UcsErrno(st),
                         "cannot listen on " + listen_host + ":" + std::to_string(port) + ": " +
                             ucs_status_string(st));
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (ucp_listener_query(agent->listener_, &attr) == UCS_OK) {
    auto *sa = reinterpret_cast<sockaddr *>(&attr.sockaddr);
    agent->port_ = ntohs(sa->sa_family == AF_INET6 ? reinterpret_cast<sockaddr_in6 *>(sa)->sin6_port
                                                   : reinterpret_cast<sockaddr_in *>(sa)->sin_port);
  }
  return agent;
}

UcxAgent::~UcxAgent() {
  for (ucp_ep_h ep : endpoints_) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucx_->Wait(ucp_ep_close_nbx(ep, &p), 1000);
  }
  ReapReplies();
  if (listener_) ucp_listener_destroy(listener_);
  registry_.reset();
}

void UcxAgent::OnConnect(ucp_conn_request_h request, void *arg) {
  auto *self = static_cast<UcxAgent *>(arg);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.conn_request = request;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = OnEndpointError;
  ep.err_handler.arg = self;
  ucp_ep_h handle;
  ucs_status_t st = ucp_ep_create(self->ucx_->worker(), &ep, &handle);
  if (st != UCS_OK) {
    LOG_WARN("cannot accept a client: %s", ucs_status_string(st));
    return;
  }
  self->endpoints_.push_back(handle);
  LOG_DEBUG("client connected (%zu now)", self->endpoints_.size());
}

void UcxAgent::OnEndpointError(void *arg, ucp_ep_h ep, ucs_status_t status) {
  // A client went away; its endpoint is closed outside the callback.
  auto *self = static_cast<UcxAgent *>(arg);
  LOG_DEBUG("client endpoint failed: %s", ucs_status_string(status));
  self->failed_.push_back(ep);
}

ucs_status_t UcxAgent::OnGrant(void *arg, const void *, size_t, void *data, size_t length,
                               const ucp_am_recv_param_t *param) {
  auto *self = static_cast<UcxAgent *>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
      !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
    return UCS_OK;  // not a grant request this agent can answer
  // An honest client waits for each answer: one that piles up requests (or
  // does not read its replies) is dropped rather than queued without bound.
  if (self->Backlog(param->reply_ep) >= kMaxBacklog) {
    LOG_WARN("a client has %zu grant requests outstanding; dropping it", kMaxBacklog);
    self->failed_.push_back(param->reply_ep);
    return UCS_OK;
  }
  // Answered from the main loop: asking the server must not block progress.
  PendingGrant g{param->reply_ep, std::vector<uint8_t>(static_cast<uint8_t *>(data),
                                                       static_cast<uint8_t *>(data) + length)};
  self->pending_.push_back(std::move(g));
  return UCS_OK;
}

ucs_status_t UcxAgent::OnStray(void *, const void *, size_t, void *, size_t,
                               const ucp_am_recv_param_t *) {
  return UCS_OK;  // not ours to answer
}

bool UcxAgent::Authentic(const rpc::Grant &grant) {
  if (GrantMacValid(grant_key_, grant)) return true;
  const int64_t now_ms = MonotonicNs() / 1000000;
  if (!refresh_key_ || now_ms - key_refreshed_ms_ < 1000) return false;
  key_refreshed_ms_ = now_ms;
  refresh_key_();
  return GrantMacValid(grant_key_, grant);
}

size_t UcxAgent::Backlog(ucp_ep_h ep, bool data) const {
  const size_t sending = std::count_if(sending_.begin(), sending_.end(), [&](const Sending &s) {
    return s.ep == ep && s.data == data;
  });
  if (data)
    return sending + std::count_if(answers_.begin(), answers_.end(),
                                   [&](const DataAnswer &a) { return a.ep == ep; });
  return sending + std::count_if(pending_.begin(), pending_.end(),
                                 [&](const PendingGrant &g) { return g.reply_ep == ep; });
}

int UcxAgent::Verify(const std::vector<uint8_t> &request, rpc::Grant *grant) {
  wire::GrantRequest head;
  if (request.size() < sizeof(head)) return EINVAL;
  memcpy(&head, request.data(), sizeof(head));
  if (head.grant_bytes > wire::kMaxGrantBytes || request.size() < sizeof(head) + head.grant_bytes)
    return EINVAL;
  if (!grant->ParseFromArray(request.data() + sizeof(head), static_cast<int>(head.grant_bytes)))
    return EINVAL;
  // The server's signature, not the client's word: a forged or altered grant
  // (another session, other extents, write for read) fails here.
  if (!Authentic(*grant)) {
    LOG_WARN("refused a grant with a bad MAC (session %016lx)", grant->session());
    return EKEYREJECTED;
  }
  if (grant->expires_ms() <= RealtimeNs() / 1000000) return EKEYEXPIRED;
  auto dev = devices_.find(grant->device());
  if (dev == devices_.end()) return ENODEV;
  if (grant->extents_size() == 0 ||
      grant->extents_size() > static_cast<int>(wire::kMaxGrantExtents))
    return EINVAL;
  const uint64_t size = dev->second->mapped_bytes();
  for (const rpc::Extent &e : grant->extents())
    if (e.device() != grant->device() || e.length() == 0 || e.offset() >= size ||
        e.length() > size - e.offset())
      return EINVAL;
  return 0;
}

int UcxAgent::Admit(const PendingGrant &pending, std::vector<uint8_t> *out) {
  rpc::Grant grant;
  if (int error = Verify(pending.request, &grant)) return error;
  PoolDevice *dev = devices_.at(grant.device()).get();
  // Still held? A lease released or a reservation sealed or aborted revokes
  // the grant before it expires.
  rpc::CheckExtentsRequest check;
  check.set_client_session(grant.session());
  check.set_client_uid(grant.uid());
  check.set_device(grant.device());
  *check.mutable_extents() = grant.extents();
  check.set_writable(grant.writable());
  rpc::ErrorReply rep;
  if (int rc = client_->Call(&rpc::Meta::Stub::CheckExtents, check, &rep)) return -rc;
  if (checked_) {
    auto *reply = reinterpret_cast<wire::GrantReply *>(out->data());
    reply->flags = wire::kReplyChecked;
    reply->count = 0;
    reply->remote_base = NewTicket(grant, pending.reply_ep);
    return 0;
  }
  // Keys outlive the grant by one more TTL: transfers posted just before it
  // expires must be able to finish.
  const int64_t until_ms = grant.expires_ms() + kMaxGrantTtlMs;
  for (const rpc::Extent &e : grant.extents()) {
    auto key = registry_->Key(
        grant.device(), dev->base(), e.offset(), e.length(), grant.writable(), until_ms,
        grant.writable() ? ExtentRegistry::Writer{grant.session(), grant.uid()}
                         : ExtentRegistry::Writer{});
    if (!key.ok()) return key.status().errnum();
    const uint32_t n = static_cast<uint32_t>((*key)->size());
    out->insert(out->end(), reinterpret_cast<const uint8_t *>(&n),
                reinterpret_cast<const uint8_t *>(&n) + sizeof(n));
    out->insert(out->end(), (*key)->begin(), (*key)->end());
  }
  auto *reply = reinterpret_cast<wire::GrantReply *>(out->data());
  reply->count = static_cast<uint32_t>(grant.extents_size());
  reply->remote_base = reinterpret_cast<uint64_t>(dev->base());
  return 0;
}

void UcxAgent::Answer(const PendingGrant &grant) {
  Sending s{grant.reply_ep, nullptr, std::vector<uint8_t>(sizeof(wire::GrantReply)),
            MonotonicNs() / 1000000 + kReplyTimeoutMs};
  wire::GrantRequest head{};
  if (grant.request.size() >= sizeof(head)) memcpy(&head, grant.request.data(), sizeof(head));
  const int error = Admit(grant, &s.buffer);
  auto *reply = reinterpret_cast<wire::GrantReply *>(s.buffer.data());
  reply->request_id = head.request_id;
  reply->error = error;
  if (error) {
    LOG_DEBUG("grant refused: %s", strerror(error));
    s.buffer.resize(sizeof(wire::GrantReply));
    reply = reinterpret_cast<wire::GrantReply *>(s.buffer.data());
    reply->count = 0;
  }
  // Sent without waiting: a client that does not read its replies must not
  // hold up the others. ReapReplies() frees the buffer once UCX is done.
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  s.request = ucp_am_send_nbx(grant.reply_ep, wire::kGrantReplyId, nullptr, 0, s.buffer.data(),
                              s.buffer.size(), &p);
  if (s.request == nullptr) return;  // sent already
  if (UCS_PTR_IS_ERR(s.request)) {
    LOG_DEBUG("grant reply not sent: %s", ucs_status_string(UCS_PTR_STATUS(s.request)));
    return;
  }
  sending_.push_back(std::move(s));
}

uint64_t UcxAgent::NewTicket(const rpc::Grant &grant, ucp_ep_h ep) {
  // A client holds a bounded number: its oldest goes first.
  size_t held = 0;
  auto oldest = tickets_.end();
  for (auto it = tickets_.begin(); it != tickets_.end(); ++it)
    if (it->second.ep == ep && held++ == 0) oldest = it;
  if (held >= kMaxTicketsPerClient) tickets_.erase(oldest);
  Ticket t{ep, grant.device(), grant.writable(), {}, {}, grant.expires_ms() + kMaxGrantTtlMs};
  if (grant.writable()) t.writer = {grant.session(), grant.uid()};
  for (const rpc::Extent &e : grant.extents()) t.extents.emplace_back(e.offset(), e.length());
  const uint64_t id = next_ticket_++;
  tickets_.emplace(id, std::move(t));
  return id;
}

int UcxAgent::Locate(ucp_ep_h ep, uint64_t ticket, uint64_t offset, uint64_t length, bool write,
                     uint8_t **at) {
  auto it = tickets_.find(ticket);
  // Another client's ticket is as good as none.
  if (it == tickets_.end() || it->second.ep != ep) return EKEYREJECTED;
  const Ticket &t = it->second;
  if (t.until_ms <= RealtimeNs() / 1000000) return EKEYEXPIRED;
  if (write && !t.writable) return EACCES;
  if (length == 0) return EINVAL;
  for (const auto &[first, size] : t.extents)
    if (offset >= first && offset - first < size && length <= size - (offset - first)) {
      *at = devices_.at(t.device)->base() + offset;
      return 0;
    }
  return ERANGE;
}

bool UcxAgent::AdmitData(ucp_ep_h ep) {
  // Honest clients keep a window of requests in flight; one that piles up
  // more (or does not read its replies) is dropped, not queued without bound.
  if (Backlog(ep, true) < kMaxDataBacklog) return true;
  LOG_WARN("a client has %zu data requests outstanding; dropping it", kMaxDataBacklog);
  if (std::find(failed_.begin(), failed_.end(), ep) == failed_.end()) failed_.push_back(ep);
  return false;
}

bool UcxAgent::TakeDataRequest(const void *header, size_t header_length,
                               const ucp_am_recv_param_t *param, wire::DataRequest *req) {
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
      header_length != sizeof(wire::DataRequest) || !AdmitData(param->reply_ep))
    return false;
  memcpy(req, header, sizeof(*req));
  return true;
}

ucs_status_t UcxAgent::OnRead(void *arg, const void *header, size_t header_length, void *, size_t,
                              const ucp_am_recv_param_t *param) {
  auto *self = static_cast<UcxAgent *>(arg);
  // Data sent with a read is not taken (UCX releases it on UCS_OK).
  wire::DataRequest req;
  if (!self->TakeDataRequest(header, header_length, param, &req)) return UCS_OK;
  uint8_t *at = nullptr;
  const int error = self->Locate(param->reply_ep, req.ticket, req.offset, req.length, false, &at);
  self->answers_.push_back({param->reply_ep,
                            wire::kReadReplyId,
                            {req.request_id, error, 0},
                            error ? nullptr : at,
                            error ? 0 : req.length});
  return UCS_OK;
}

namespace {
struct WriteInFlight {
  UcxAgent *agent;
  ucp_ep_h ep;
  uint64_t request_id;
};
}  // namespace

ucs_status_t UcxAgent::OnWrite(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param) {
  auto *self = static_cast<UcxAgent *>(arg);
  wire::DataRequest req;
  if (!self->TakeDataRequest(header, header_length, param, &req)) return UCS_OK;
  uint8_t *at = nullptr;
  int error = self->Locate(param->reply_ep, req.ticket, req.offset, req.length, true, &at);
  if (!error && req.length != length) error = EINVAL;
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  if (!error && !rndv) memcpy(at, data, length);
  if (!error && rndv) {
    // Straight into the extent; answered once the bytes are in.
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = OnWriteReceived;
    p.user_data = new WriteInFlight{self, param->reply_ep, req.request_id};
    void *r = ucp_am_recv_data_nbx(self->ucx_->worker(), data, at, length, &p);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) return UCS_OK;
    delete static_cast<WriteInFlight *>(p.user_data);
    if (UCS_PTR_IS_ERR(r)) error = UcsErrno(UCS_PTR_STATUS(r));
  }
  // A refused rendezvous is released by UCX on UCS_OK: nothing is copied.
  self->answers_.push_back(
      {param->reply_ep, wire::kWriteReplyId, {req.request_id, error, 0}, nullptr, 0});
  return UCS_OK;
}

void UcxAgent::OnWriteReceived(void *request, ucs_status_t status, size_t, void *user_data) {
  auto *w = static_cast<WriteInFlight *>(user_data);
  w->agent->answers_.push_back(
      {w->ep, wire::kWriteReplyId, {w->request_id, UcsErrno(status), 0}, nullptr, 0});
  delete w;
  ucp_request_free(request);
}

void UcxAgent::SendDataAnswers() {
  while (!answers_.empty()) {
    DataAnswer a = answers_.front();
    answers_.pop_front();
    // A client closed meanwhile: its endpoint is gone.
    if (std::find(endpoints_.begin(), endpoints_.end(), a.ep) == endpoints_.end()) continue;
    Sending s{a.ep, nullptr, std::vector<uint8_t>(sizeof(a.head)),
              MonotonicNs() / 1000000 + kReplyTimeoutMs, true};
    memcpy(s.buffer.data(), &a.head, sizeof(a.head));
    // A read's bytes go from the pool mapping itself (rendezvous when large).
    ucp_request_param_t p{};
    s.request = ucp_am_send_nbx(a.ep, a.id, s.buffer.data(), s.buffer.size(), a.data, a.length, &p);
    if (s.request == nullptr) continue;
    if (UCS_PTR_IS_ERR(s.request)) {
      LOG_DEBUG("data reply not sent: %s", ucs_status_string(UCS_PTR_STATUS(s.request)));
      continue;
    }
    sending_.push_back(std::move(s));
  }
}

void UcxAgent::ReapReplies() {
  const int64_t now_ms = MonotonicNs() / 1000000;
  std::erase_if(sending_, [&](Sending &s) {
    if (ucp_request_check_status(s.request) != UCS_INPROGRESS) {
      ucp_request_free(s.request);
      return true;
    }
    if (now_ms > s.deadline_ms && std::find(failed_.begin(), failed_.end(), s.ep) == failed_.end())
      failed_.push_back(s.ep);  // a client that does not drain: drop it
    return false;
  });
}

void UcxAgent::RevokeEndedWrites() {
  for (const auto &[where, writer] : registry_->Writable()) {
    rpc::CheckExtentsRequest check;
    check.set_client_session(writer.session);
    check.set_client_uid(writer.uid);
    check.set_device(std::get<0>(where));
    rpc::Extent *e = check.add_extents();
    e->set_device(std::get<0>(where));
    e->set_offset(std::get<1>(where));
    e->set_length(std::get<2>(where));
    check.set_writable(true);
    rpc::ErrorReply rep;
    // Only the server's word that the reservation is over revokes a key.
    const int rc = client_->Call(&rpc::Meta::Stub::CheckExtents, check, &rep);
    if (rc == -ESTALE || rc == -EACCES) registry_->Drop(where);
  }
  // The same for writable tickets.
  std::erase_if(tickets_, [&](const auto &entry) {
    const Ticket &t = entry.second;
    if (!t.writable) return false;
    rpc::CheckExtentsRequest check;
    check.set_client_session(t.writer.session);
    check.set_client_uid(t.writer.uid);
    check.set_device(t.device);
    for (const auto &[offset, length] : t.extents) {
      rpc::Extent *e = check.add_extents();
      e->set_device(t.device);
      e->set_offset(offset);
      e->set_length(length);
    }
    check.set_writable(true);
    rpc::ErrorReply rep;
    const int rc = client_->Call(&rpc::Meta::Stub::CheckExtents, check, &rep);
    return rc == -ESTALE || rc == -EACCES;
  });
}

void UcxAgent::CloseFailedEndpoints() {
  for (ucp_ep_h ep : failed_) {
    auto it = std::find(endpoints_.begin(), endpoints_.end(), ep);
    if (it == endpoints_.end()) continue;
    endpoints_.erase(it);
    std::erase_if(pending_, [&](const PendingGrant &g) { return g.reply_ep == ep; });
    std::erase_if(answers_, [&](const DataAnswer &a) { return a.ep == ep; });
    std::erase_if(tickets_, [&](const auto &t) { return t.second.ep == ep; });
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucx_->Wait(ucp_ep_close_nbx(ep, &p), 1000);
    // Closing finishes the replies still queued for it.
    ucx_->ProgressUntil(
        [&] {
          return std::none_of(sending_.begin(), sending_.end(), [&](const Sending &s) {
            return s.ep == ep && ucp_request_check_status(s.request) == UCS_INPROGRESS;
          });
        },
        10000);
  }
  failed_.clear();
  ReapReplies();
}

void UcxAgent::Run(const std::function<void()> &tick) {
  int64_t next_expiry_ms = 0;
  while (!stop_) {
    tick();
    ucx_->Progress();
    ReapReplies();
    // A scan of the registrations, at most ten times a second.
    if (const int64_t now_ms = RealtimeNs() / 1000000; now_ms >= next_expiry_ms) {
      registry_->Expire(now_ms);
      std::erase_if(tickets_, [&](const auto &t) { return t.second.until_ms <= now_ms; });
      RevokeEndedWrites();
      next_expiry_ms = now_ms + 100;
    }
    SendDataAnswers();
    if (pending_.empty() && failed_.empty()) {
      ucx_->Sleep(sending_.empty() ? 200 : 10);
      continue;
    }
    CloseFailedEndpoints();
    while (!pending_.empty()) {
      PendingGrant g = std::move(pending_.front());
      pending_.pop_front();
      Answer(g);
    }
  }
}

}  // namespace maru
