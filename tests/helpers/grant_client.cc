// grant_client: a remote client that talks to maru-agent with grants it may
// have tampered with, to show what the agent refuses. Exits with the errno
// of the last transfer (0 when it worked).
//
//   grant_client SERVER CASE PATH|DEV:OFF:LEN
//
// CASE: ok, forged (MAC replaced), modified (session changed), write-flip (a
// read grant turned writable, used to put), write-on-lease (asks the server
// for a write grant on a lease), expired, released (a grant used again after
// its lease is released), other (extents this session does not hold),
// extents (prints PATH's extents as DEV:OFF:LEN), stall (sends grant
// requests for PATH as fast as it can and never reads a reply: prints
// "stalled", exits once the file GO exists), odd-ids (the same with
// messages under ids the agent does not handle), rma (PATH is an address
// in the agent, in hex: one-sided put then get there, with a remote key
// this client made up), read-write (a read grant's ticket used to write),
// outside (a read just past the granted extent), many (PATH is PREFIX:N:SIZE:
// chunks PREFIX0..N-1, stored with the test pattern, read in one batch of N
// transfers: several grants, more than a window in flight).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <netdb.h>
#include <unistd.h>

#include "client/meta_client.h"
#include "grant_mac.h"
#include "pattern.h"
#include "rdma/remote_pool.h"
#include "rdma/ucx_wire.h"
#include "util/address.h"
#include "util/clock.h"
#include "util/units.h"

using namespace maru;
using Stub = rpc::Meta::Stub;

namespace {

struct Grants {
  MetaClient *meta = nullptr;
  std::string mode;
  std::string saved;  // "released": the grant used again
  std::string last;   // the last one issued
  uint32_t ttl_ms = 0;

  Result<std::string> Issue(uint32_t device, const std::vector<RemotePool::Range> &ranges,
                            bool writable) {
    if (!saved.empty()) return saved;
    rpc::IssueGrantRequest req;
    req.set_device(device);
    // write-flip: ask for what a lease gets, then claim more.
    req.set_writable(mode == "write-on-lease" || (writable && mode != "write-flip"));
    req.set_ttl_ms(ttl_ms);
    for (const RemotePool::Range &r : ranges) {
      rpc::Extent *e = req.add_extents();
      e->set_device(device);
      e->set_offset(r.offset);
      e->set_length(r.length);
    }
    rpc::GrantReply rep;
    if (int rc = meta->Call(&Stub::IssueGrant, req, &rep))
      return Status::Error(-rc, "server refused the grant");
    rpc::Grant g = rep.grant();
    if (mode == "forged") g.set_mac(std::string(32, 'x'));
    if (mode == "modified") g.set_session(g.session() ^ 1);
    if (mode == "write-flip") g.set_writable(true);
    if (mode == "expired") {
      printf("waiting for the grant to expire\n");
      while (RealtimeNs() / 1000000 <= g.expires_ms()) {
      }
    }
    last = g.SerializeAsString();
    return last;
  }
};

// An endpoint to the agent at `address` on `ucx`'s worker.
ucp_ep_h Connect(UcxWorker &ucx, const std::string &address) {
  Result<Address> a = ParseAddress(address);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (!a.ok() || getaddrinfo(a->host.c_str(), std::to_string(a->port).c_str(), &hints, &res) != 0)
    return nullptr;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  // As the agent's side. No error handler: UCX logs it when the agent
  // drops this client, which is what should happen.
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.sockaddr.addr = res->ai_addr;
  ep.sockaddr.addrlen = res->ai_addrlen;
  ucp_ep_h handle = nullptr;
  if (ucp_ep_create(ucx.worker(), &ep, &handle) != UCS_OK) handle = nullptr;
  freeaddrinfo(res);
  return handle;
}

// A client that does not drain: floods the agent at `address` with grant
// requests (each answered with many keys) and never progresses its worker,
// so the replies pile up in the network.
int Stall(const std::string &address, const std::string &grant, const std::string &go,
          bool odd_ids) {
  auto ucx = UcxWorker::Create();
  if (!ucx.ok() || !ParseAddress(address).ok())
    return fprintf(stderr, "bad agent address %s\n", address.c_str()), 2;
  // Replies that arrive while sending are thrown away.
  Status handled = (*ucx)->SetHandler(
      wire::kGrantReplyId,
      [](void *, const void *, size_t, void *, size_t, const ucp_am_recv_param_t *) {
        return UCS_OK;
      },
      nullptr);
  if (!handled.ok()) return 2;
  ucp_ep_h handle = Connect(**ucx, address);
  if (!handle) return 2;
  std::vector<uint8_t> msg(sizeof(wire::GrantRequest) + grant.size());
  wire::GrantRequest head{};
  head.grant_bytes = static_cast<uint32_t>(grant.size());
  memcpy(msg.data(), &head, sizeof(head));
  memcpy(msg.data() + sizeof(head), grant.data(), grant.size());
  // Requests as fast as they go out, far more than the agent answers at
  // once (it should drop this client); then no progress at all, so replies
  // still coming are never read.
  int sent = 0;
  for (; sent < 2000; ++sent) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    // odd-ids: messages under ids the agent has no handler for.
    static const unsigned kOdd[] = {2, 3, 77, 1000};
    if (odd_ids && sent == 40) break;
    const unsigned id = odd_ids ? kOdd[sent % 4] : wire::kGrantRequestId;
    void *r = ucp_am_send_nbx(handle, id, nullptr, 0, msg.data(), msg.size(), &p);
    bool closed = false;
    ucs_status_t st = (*ucx)->Wait(r, 2000, [&] {
      ucp_request_param_t c{};
      c.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      c.flags = UCP_EP_CLOSE_FLAG_FORCE;
      (*ucx)->Wait(ucp_ep_close_nbx(handle, &c), 2000);
      closed = true;
    });
    if (st != UCS_OK || closed) break;  // dropped by the agent (or stuck)
  }
  printf("stalled after %d requests\n", sent);
  fflush(stdout);
  while (access(go.c_str(), F_OK) != 0) usleep(10000);
  _exit(0);  // no goodbye to the agent either
}

// Waits for `r` on `ep`; closes the endpoint if it hangs. Returns an errno.
int Finish(UcxWorker &ucx, ucp_ep_h ep, void *r) {
  ucs_status_t st = ucx.Wait(r, 3000, [&] {
    ucp_request_param_t c{};
    c.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    c.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucx.Wait(ucp_ep_close_nbx(ep, &c), 2000);
  });
  return UcsErrno(st);
}

// rma: what a client could do if the agent's UCX served get/put: write
// then read `address` in the agent under a key of its own making.
int Rma(const std::string &agent, uint64_t address) {
  auto ucx = UcxWorker::Create();
  if (!ucx.ok()) return 2;
  ucp_ep_h ep = Connect(**ucx, agent);
  if (!ep) return 2;
  std::vector<uint8_t> bytes(4096, 0xab);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = bytes.data();
  mp.length = bytes.size();
  ucp_mem_h memh;
  if (ucp_mem_map((*ucx)->context(), &mp, &memh) != UCS_OK) return 2;
  void *packed = nullptr;
  size_t packed_size = 0;
  ucp_rkey_h rkey = nullptr;
  if (ucp_rkey_pack((*ucx)->context(), memh, &packed, &packed_size) != UCS_OK) return 2;
  ucs_status_t st = ucp_ep_rkey_unpack(ep, packed, &rkey);
  ucp_rkey_buffer_release(packed);
  if (st != UCS_OK) {
    printf("no key: %s\n", ucs_status_string(st));
    return UcsErrno(st);
  }
  ucp_request_param_t p{};
  int put = Finish(**ucx, ep, ucp_put_nbx(ep, bytes.data(), bytes.size(), address, rkey, &p));
  if (put == 0) put = Finish(**ucx, ep, ucp_ep_flush_nbx(ep, &p));
  printf("put: %s\n", strerror(put));
  int result = put;
  if (put == 0) {  // else the endpoint may be gone
    result = Finish(**ucx, ep, ucp_get_nbx(ep, bytes.data(), bytes.size(), address, rkey, &p));
    printf("get: %s\n", strerror(result));
  }
  ucp_rkey_destroy(rkey);
  ucp_mem_unmap((*ucx)->context(), memh);
  return result;
}

// read-write, outside: a data request under the ticket an honest grant
// for `extent` gets. Returns the agent's errno.
int Raw(const std::string &agent, const std::string &grant, const rpc::Extent &extent, bool write) {
  auto ucx = UcxWorker::Create();
  if (!ucx.ok()) return 2;
  struct Answers {
    std::vector<uint8_t> grant;
    int data_error = -1;
  } answers;
  auto keep_grant = [](void *arg, const void *, size_t, void *data, size_t length,
                       const ucp_am_recv_param_t *) {
    auto *a = static_cast<Answers *>(arg);
    a->grant.assign(static_cast<uint8_t *>(data), static_cast<uint8_t *>(data) + length);
    return UCS_OK;
  };
  auto keep_data = [](void *arg, const void *header, size_t header_length, void *, size_t,
                      const ucp_am_recv_param_t *) {
    wire::DataReply r{};
    if (header_length == sizeof(r)) memcpy(&r, header, sizeof(r));
    static_cast<Answers *>(arg)->data_error = header_length == sizeof(r) ? r.error : EPROTO;
    return UCS_OK;
  };
  if (!(*ucx)->SetHandler(wire::kGrantReplyId, keep_grant, &answers).ok() ||
      !(*ucx)->SetHandler(wire::kReadReplyId, keep_data, &answers).ok() ||
      !(*ucx)->SetHandler(wire::kWriteReplyId, keep_data, &answers).ok())
    return 2;
  ucp_ep_h ep = Connect(**ucx, agent);
  if (!ep) return 2;
  std::vector<uint8_t> msg(sizeof(wire::GrantRequest) + grant.size());
  wire::GrantRequest head{};
  head.grant_bytes = static_cast<uint32_t>(grant.size());
  memcpy(msg.data(), &head, sizeof(head));
  memcpy(msg.data() + sizeof(head), grant.data(), grant.size());
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  if (int e = Finish(
          **ucx, ep,
          ucp_am_send_nbx(ep, wire::kGrantRequestId, nullptr, 0, msg.data(), msg.size(), &p)))
    return e;
  if (!(*ucx)->ProgressUntil([&] { return !answers.grant.empty(); }, 5000)) return ETIMEDOUT;
  wire::GrantReply reply{};
  if (answers.grant.size() < sizeof(reply)) return EPROTO;
  memcpy(&reply, answers.grant.data(), sizeof(reply));
  if (reply.error) return reply.error;
  if (!(reply.flags & wire::kReplyChecked)) return printf("not the checked path\n"), 2;
  // The extent's own bytes to write; a read one byte longer than it.
  std::vector<uint8_t> bytes(extent.length(), 0xcd);
  wire::DataRequest req{7, reply.remote_base, extent.offset(), extent.length() + (write ? 0 : 1)};
  if (int e = Finish(**ucx, ep,
                     ucp_am_send_nbx(ep, write ? wire::kWriteRequestId : wire::kReadRequestId, &req,
                                     sizeof(req), write ? bytes.data() : nullptr,
                                     write ? bytes.size() : 0, &p)))
    return e;
  if (!(*ucx)->ProgressUntil([&] { return answers.data_error >= 0; }, 5000)) return ETIMEDOUT;
  printf("agent: %s\n", strerror(answers.data_error));
  return answers.data_error;
}

// many: N chunks read in one Get, each checked against its pattern.
int Many(MetaClient *meta, RemotePool &pool, const std::string &target) {
  char prefix[256] = {};
  unsigned n = 0;
  unsigned long long size = 0;
  if (sscanf(target.c_str(), "%255[^:]:%u:%llu", prefix, &n, &size) != 3) return 2;
  std::vector<std::vector<uint8_t>> buffers(n, std::vector<uint8_t>(size));
  std::vector<RemotePool::Transfer> transfers;
  for (unsigned i = 0; i < n; ++i) {
    rpc::RefRequest open;
    open.mutable_ref()->set_path(prefix + std::to_string(i));
    rpc::ChunkReply chunk;
    if (int rc = meta->Call(&Stub::Open, open, &chunk)) return -rc;
    uint64_t at = 0;
    for (const rpc::Extent &e : chunk.extents()) {
      transfers.push_back({e.device(), e.offset(), std::min<uint64_t>(e.length(), size - at),
                           buffers[i].data() + at});
      at += transfers.back().length;
    }
  }
  printf("%zu transfers\n", transfers.size());
  Status s = pool.Get(0, transfers);
  if (!s.ok()) return printf("%s\n", s.ToString().c_str()), s.errnum();
  for (unsigned i = 0; i < n; ++i)
    if (!maru_test::CheckPattern(buffers[i].data(), size, prefix + std::to_string(i)))
      return printf("chunk %u differs\n", i), EIO;
  printf("ok\n");
  return 0;
}

int Report(const Status &s) {
  printf("%s\n", s.ok() ? "ok" : s.ToString().c_str());
  return s.errnum();
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 4 || argc > 5)
    return fprintf(stderr, "usage: grant_client SERVER CASE PATH|DEV:OFF:LEN [GO]\n"), 2;
  const std::string mode = argv[2], target = argv[3];
  ClientOptions options;
  options.client_name = "grant_client";
  auto client = MetaClient::Connect(argv[1], options);
  if (!client.ok()) return fprintf(stderr, "%s\n", client.status().ToString().c_str()), 2;
  MetaClient *meta = client->get();
  RemotePool::AgentMap agents;
  const rpc::OpenSessionReply info = meta->session_info();
  for (const rpc::Device &d : info.devices()) agents[d.index()] = d.agent();
  Grants grants;
  grants.meta = meta;
  grants.mode = mode;
  if (mode == "expired") grants.ttl_ms = 1;
  auto pool = RemotePool::Create(agents, 5000, nullptr, [&](auto device, auto &ranges, bool w) {
    return grants.Issue(device, ranges, w);
  });
  if (!pool.ok()) return fprintf(stderr, "%s\n", pool.status().ToString().c_str()), 2;

  if (mode == "rma") return Rma(agents.begin()->second, std::stoull(target, nullptr, 16));
  if (mode == "many") return Many(meta, **pool, target);
  rpc::ChunkReply chunk;
  if (mode == "other") {
    unsigned device = 0;
    unsigned long long offset = 0, length = 0;
    if (sscanf(target.c_str(), "%u:%llu:%llu", &device, &offset, &length) != 3) return 2;
    rpc::Extent *e = chunk.add_extents();
    e->set_device(device);
    e->set_offset(offset);
    e->set_length(length);
  } else {
    rpc::RefRequest open;
    open.mutable_ref()->set_path(target);
    if (int rc = meta->Call(&Stub::Open, open, &chunk))
      return fprintf(stderr, "open %s: %s\n", target.c_str(), strerror(-rc)), 2;
  }
  uint64_t total = 0;
  for (const rpc::Extent &e : chunk.extents()) total += e.length();
  std::vector<uint8_t> buffer(total);
  std::vector<RemotePool::Transfer> transfers;
  uint64_t at = 0;
  for (const rpc::Extent &e : chunk.extents()) {
    transfers.push_back({e.device(), e.offset(), e.length(), buffer.data() + at});
    at += e.length();
  }
  if (mode == "extents") {
    for (const rpc::Extent &e : chunk.extents())
      printf("%u:%lu:%lu\n", e.device(), e.offset(), e.length());
    return 0;
  }
  if (mode == "stall" || mode == "odd-ids") {
    // A valid grant naming the chunk's first extent 256 times: long replies.
    std::vector<RemotePool::Range> ranges(256,
                                          {chunk.extents(0).offset(), chunk.extents(0).length()});
    auto grant = grants.Issue(chunk.extents(0).device(), ranges, false);
    if (!grant.ok()) return Report(grant.status());
    return Stall(agents[chunk.extents(0).device()], *grant, argc > 4 ? argv[4] : "/nonexistent",
                 mode == "odd-ids");
  }
  if (mode == "read-write" || mode == "outside") {
    const rpc::Extent &e = chunk.extents(0);
    auto grant = grants.Issue(e.device(), {{e.offset(), e.length()}}, false);
    if (!grant.ok()) return Report(grant.status());
    return Raw(agents[e.device()], *grant, e, mode == "read-write");
  }
  if (mode == "write-flip" || mode == "write-on-lease") return Report((*pool)->Put(0, transfers));
  if (mode != "released") return Report((*pool)->Get(0, transfers));

  // Keep the grant the first read used, release the lease, present it again.
  if (Status s = (*pool)->Get(0, transfers); !s.ok()) return Report(s);
  grants.saved = grants.last;
  rpc::ReleaseRequest release;
  release.add_leases(chunk.lease());
  rpc::ErrorReply released;
  if (int rc = meta->Call(&Stub::Release, release, &released))
    return fprintf(stderr, "release: %s\n", strerror(-rc)), 2;
  return Report((*pool)->Get(0, transfers));
}
