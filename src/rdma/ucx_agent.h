// UcxAgent: the heart of maru-agent. It maps the pool devices of a memory
// node and lets remote clients read and write extents with one-sided
// get/put. A client presents a grant that maru-server issued (rpc::Grant);
// the agent checks its MAC and expiry itself, asks the server only whether
// it was revoked (the lease or reservation ended), and answers with remote
// keys registered for just the granted extents, read-only for a lease.
// The bytes never pass through the agent's CPU.
//
// Only RDMA transports enforce those keys. Over TCP, UCX emulates get/put
// in software and would copy to or from any address a client names, so
// there (the checked data path) the agent's UCX context has no RMA at all:
// a verified grant gets a ticket instead of keys, and reads and writes are
// active messages naming {ticket, offset, length}, each checked against the
// grant's extents and mode before the agent copies from or into its pool
// mapping (no copy of its own: UCX sends from and receives into it).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "alloc/pool_device.h"
#include "client/meta_client.h"
#include "rdma/extent_registry.h"
#include "rdma/ucx_wire.h"
#include "rdma/ucx_worker.h"

namespace maru {

class UcxAgent {
 public:
  // `devices` are opened pool devices, by the server's device index.
  static Result<std::unique_ptr<UcxAgent>> Start(
      std::unique_ptr<MetaClient> client, std::map<uint32_t, std::unique_ptr<PoolDevice>> devices,
      const std::string &listen_host, int port, bool checked = false);
  ~UcxAgent();

  // Serves until Stop() (from a signal handler, say), calling `tick` now
  // and then on the same thread.
  void Run(const std::function<void()> &tick);
  void Stop() { stop_ = true; }
  // The key maru-server signs grants with (from RegisterAgent).
  void set_grant_key(const std::string &key) { grant_key_ = key; }
  // Registers again, for the server's current key (after its restart).
  void set_key_refresher(std::function<void()> refresh) { refresh_key_ = std::move(refresh); }
  int port() const { return port_; }

 private:
  // A verified grant on the checked path, usable by the endpoint it was
  // presented on only.
  struct Ticket {
    ucp_ep_h ep;
    uint32_t device;
    bool writable;
    ExtentWriter writer;
    std::vector<std::pair<uint64_t, uint64_t>> extents;  // offset, length
    int64_t until_ms;
  };
  // A data reply waiting to be sent from the main loop.
  struct DataAnswer {
    ucp_ep_h ep;
    unsigned id;
    wire::DataReply head;
    const void *data;
    size_t length;
  };
  struct PendingGrant {
    ucp_ep_h reply_ep;
    std::vector<uint8_t> request;
  };
  // A reply on its way: its buffer lives until UCX is done with it.
  struct Sending {
    ucp_ep_h ep;
    void *request;
    std::vector<uint8_t> buffer;
    int64_t deadline_ms;
    bool data = false;  // a data reply, not a grant reply
  };

  static constexpr size_t kMaxBacklog = 16;  // requests + replies per client
  static constexpr int64_t kReplyTimeoutMs = 5000;
  static constexpr size_t kMaxDataBacklog = 128;  // reads + writes in flight per client
  static constexpr size_t kMaxTicketsPerClient = 64;

  UcxAgent() = default;
  static void OnConnect(ucp_conn_request_h request, void *arg);
  static ucs_status_t OnGrant(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);
  static ucs_status_t OnRead(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param);
  static ucs_status_t OnWrite(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);
  static void OnWriteReceived(void *request, ucs_status_t status, size_t length, void *user_data);
  // Where `length` bytes at `offset` under `ticket` of `ep` are in this
  // process, if they lie inside one extent of it and its mode allows
  // `write`; else a positive errno.
  int Locate(ucp_ep_h ep, uint64_t ticket, uint64_t offset, uint64_t length, bool write,
             uint8_t **at);
  // Admits a data request: false (and the client is dropped) past its backlog.
  bool AdmitData(ucp_ep_h ep);
  // A read's or write's header, from a client that may send one (it can
  // be answered, and it is within its window), into `req`.
  bool TakeDataRequest(const void *header, size_t header_length, const ucp_am_recv_param_t *param,
                       wire::DataRequest *req);
  void SendDataAnswers();
  uint64_t NewTicket(const rpc::Grant &grant, ucp_ep_h ep);
  static void OnEndpointError(void *arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnStray(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);
  void Answer(const PendingGrant &grant);
  // Parses the grant of a request and checks its MAC, expiry and extents;
  // returns a positive errno.
  int Verify(const std::vector<uint8_t> &request, rpc::Grant *grant);
  // Verifies a grant, checks it was not revoked, and fills `out` with its
  // keys; returns a positive errno.
  int Admit(const PendingGrant &request, std::vector<uint8_t> *out);
  // Whether `grant` carries the server's MAC; on a mismatch asks the server
  // for its key again, at most once a second (it may have restarted).
  bool Authentic(const rpc::Grant &grant);
  // Requests and replies queued or in flight for `ep`.
  // `data`: data requests and replies, else grant ones (each has its bound).
  size_t Backlog(ucp_ep_h ep, bool data = false) const;
  // Unmaps the writable keys whose reservation was sealed or aborted: the
  // chunk's bytes are final then, even on RDMA.
  void RevokeEndedWrites();
  // Frees the replies delivered; drops clients whose replies are stuck.
  void ReapReplies();
  void CloseFailedEndpoints();

  std::unique_ptr<MetaClient> client_;
  std::unique_ptr<UcxWorker> ucx_;
  std::map<uint32_t, std::unique_ptr<PoolDevice>> devices_;
  std::unique_ptr<ExtentRegistry> registry_;
  std::string grant_key_;
  std::function<void()> refresh_key_;
  int64_t key_refreshed_ms_ = 0;
  ucp_listener_h listener_ = nullptr;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<ucp_ep_h> failed_;
  std::deque<PendingGrant> pending_;
  std::vector<Sending> sending_;
  std::deque<DataAnswer> answers_;
  std::map<uint64_t, Ticket> tickets_;
  uint64_t next_ticket_ = 1;
  bool checked_ = false;
  std::atomic<bool> stop_{false};
  int port_ = 0;
};

}  // namespace maru
