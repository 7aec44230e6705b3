#include "rdma/ucx_agent.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "rdma/ucx_wire.h"
#include "util/log.h"

namespace maru {

Result<std::unique_ptr<UcxAgent>> UcxAgent::Start(
    std::unique_ptr<MetaClient> client, std::map<uint32_t, std::unique_ptr<PoolDevice>> devices,
    const std::string &listen_host, int port) {
  std::unique_ptr<UcxAgent> agent(new UcxAgent());
  agent->client_ = std::move(client);
  agent->devices_ = std::move(devices);
  Result<std::unique_ptr<UcxWorker>> ucx = UcxWorker::Create();
  if (!ucx.ok()) return ucx.status();
  agent->ucx_ = std::move(*ucx);

  // Register each device once, whole: remote clients address it directly.
  for (auto &[index, dev] : agent->devices_) {
    Registered reg;
    reg.device = dev.get();
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = dev->base();
    mp.length = dev->mapped_bytes();
    ucs_status_t st = ucp_mem_map(agent->ucx_->context(), &mp, &reg.memh);
    if (st != UCS_OK)
      return Status::Error(UcsErrno(st), "cannot register " + dev->path() + " with UCX");
    void *packed = nullptr;
    size_t size = 0;
    st = ucp_rkey_pack(agent->ucx_->context(), reg.memh, &packed, &size);
    if (st != UCS_OK || size > wire::kMaxRkeyBytes)
      return Status::Error(EIO, "cannot pack a remote key");
    reg.rkey.assign(static_cast<uint8_t *>(packed), static_cast<uint8_t *>(packed) + size);
    ucp_rkey_buffer_release(packed);
    agent->registered_[index] = std::move(reg);
  }

  MARU_RETURN_IF_ERROR(agent->ucx_->SetHandler(wire::kGrantRequestId, OnGrant, agent.get()));

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
  if (listener_) ucp_listener_destroy(listener_);
  for (auto &[index, reg] : registered_)
    if (reg.memh) ucp_mem_unmap(ucx_->context(), reg.memh);
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
  // Answered from the main loop: asking the server must not block progress.
  PendingGrant g{param->reply_ep, std::vector<uint8_t>(static_cast<uint8_t *>(data),
                                                       static_cast<uint8_t *>(data) + length)};
  self->pending_.push_back(std::move(g));
  return UCS_OK;
}

void UcxAgent::Answer(const PendingGrant &grant) {
  std::vector<uint8_t> out(sizeof(wire::GrantReply));
  auto reply = [&]() { return reinterpret_cast<wire::GrantReply *>(out.data()); };
  reply()->error = EINVAL;
  if (grant.request.size() >= sizeof(wire::GrantRequest)) {
    const auto *req = reinterpret_cast<const wire::GrantRequest *>(grant.request.data());
    reply()->request_id = req->request_id;
    const size_t need =
        sizeof(wire::GrantRequest) + static_cast<size_t>(req->count) * sizeof(req->extents[0]);
    auto reg = registered_.find(req->device);
    if (req->count > wire::kMaxGrantExtents || grant.request.size() < need) {
      reply()->error = EINVAL;
    } else if (reg == registered_.end()) {
      reply()->error = ENODEV;
    } else {
      rpc::CheckExtentsRequest check;
      check.set_client_session(req->session);
      check.set_device(req->device);
      for (uint32_t i = 0; i < req->count; ++i) {
        rpc::Extent *e = check.add_extents();
        e->set_device(req->device);
        e->set_offset(req->extents[i].offset);
        e->set_length(req->extents[i].length);
      }
      rpc::ErrorReply rep;
      int rc = client_->Call(&rpc::Meta::Stub::CheckExtents, check, &rep);
      reply()->error = -rc;
      if (rc == 0) {
        const std::vector<uint8_t> &rkey = reg->second.rkey;
        out.resize(sizeof(wire::GrantReply) + rkey.size());
        reply()->rkey_bytes = static_cast<uint32_t>(rkey.size());
        reply()->remote_base = reinterpret_cast<uint64_t>(reg->second.device->base());
        memcpy(reply()->rkey, rkey.data(), rkey.size());
      }
    }
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  ucs_status_t st = ucx_->Wait(
      ucp_am_send_nbx(grant.reply_ep, wire::kGrantReplyId, nullptr, 0, out.data(), out.size(), &p),
      5000, [&] {
        failed_.push_back(grant.reply_ep);  // a client that does not drain: drop it
        CloseFailedEndpoints();
      });
  if (st != UCS_OK) LOG_DEBUG("grant reply not delivered: %s", ucs_status_string(st));
}

void UcxAgent::CloseFailedEndpoints() {
  for (ucp_ep_h ep : failed_) {
    auto it = std::find(endpoints_.begin(), endpoints_.end(), ep);
    if (it == endpoints_.end()) continue;
    endpoints_.erase(it);
    std::erase_if(pending_, [&](const PendingGrant &g) { return g.reply_ep == ep; });
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucx_->Wait(ucp_ep_close_nbx(ep, &p), 1000);
  }
  failed_.clear();
}

void UcxAgent::Run(const std::function<void()> &tick) {
  while (!stop_) {
    tick();
    ucx_->Progress();
    if (pending_.empty() && failed_.empty()) {
      ucx_->Sleep(200);
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
