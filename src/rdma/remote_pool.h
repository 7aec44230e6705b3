// RemotePool: a client's way to pool devices it cannot map, through the
// maru-agent of each device. Bytes move with one-sided UCX get/put between
// the caller's buffers and the agent's pool memory. Before each batch of
// transfers the client gets a grant for their extents from maru-server
// (read-only under a lease, writable for its own reservation) and presents
// it to the agent, which answers with remote keys for just those extents;
// or, on the checked data path (TCP), with a ticket: then each transfer is
// an active message the agent checks against the grant, up to kWindow in
// flight (see ucx_agent.h).
//
// Thread-safe (one lock around the UCX worker). An agent that dies makes the
// transfers in flight fail with ECONNRESET; the next call reconnects.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rdma/staging_cache.h"
#include "rdma/ucx_wire.h"
#include "rdma/ucx_worker.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

class RemotePool {
 public:
  struct Transfer {
    uint32_t device;
    uint64_t offset;  // in the device
    uint64_t length;
    void *local;               // the caller's buffer
    ucp_mem_h memh = nullptr;  // its UCX registration, if it has one (a staging buffer)
  };

  using AgentMap = std::map<uint32_t, std::string>;  // device index -> tcp://HOST:PORT
  struct Range {
    uint64_t offset;
    uint64_t length;
  };
  // Asks maru-server for a grant on `ranges` of `device` (rpc::Grant,
  // serialized), or its error.
  using Issuer = std::function<Result<std::string>(
      uint32_t device, const std::vector<Range> &ranges, bool writable)>;

  // `refresh` asks the server where the agents are now: an agent that went
  // away may come back elsewhere.
  static Result<std::unique_ptr<RemotePool>> Create(AgentMap agents, int64_t timeout_ms,
                                                    std::function<AgentMap()> refresh,
                                                    Issuer issue);
  ~RemotePool();

  // The devices are fixed at Create (only their Agents change, under mu_):
  // read without the lock, unchecked.
  bool serves(uint32_t device) const NO_THREAD_SAFETY_ANALYSIS { return agents_.count(device) > 0; }
  // Registered buffers for remote chunks, reused across chunks and calls.
  StagingCache &staging() { return *staging_; }
  // What the staging cache keeps at most, in buffers given back.
  static constexpr uint64_t kStagingCacheBytes = 256ull << 20;
  // All transfers in flight at once; returns when all are done or one failed.
  // The session is the one the issuer's grants name.
  Status Get(uint64_t /*session*/, const std::vector<Transfer> &transfers) {
    return Move(transfers, false);
  }
  Status Put(uint64_t /*session*/, const std::vector<Transfer> &transfers) {
    return Move(transfers, true);
  }

 private:
  struct Agent {
    std::string address;
    ucp_ep_h ep = nullptr;
    bool failed = false;
    std::vector<ucp_rkey_h> rkeys;  // of the grants of the transfers in flight
    bool lost = false;              // went away: look its address up again before reconnecting
    bool proven = false;            // this connection completed an exchange
    bool checked = false;           // the agent serves bytes two-sided (TCP)
  };
  // A read or write on the checked path, until the agent answers.
  struct DataOp {
    const Transfer *transfer;
    bool write;
    wire::DataRequest head;
    bool done = false;
    bool receiving = false;  // UCX is writing the caller's buffer
    int error = 0;
  };
  struct Reply {
    int error = 0;
    uint64_t base = 0;
    std::vector<std::vector<uint8_t>> rkeys;  // one per extent of the grant
    bool checked = false;
  };

  RemotePool() = default;
  Status Move(const std::vector<Transfer> &transfers, bool put) EXCLUDES(mu_);
  // One try; `fresh_failed` tells whether a connection failed before its
  // first complete exchange.
  Status MoveOnce(const std::vector<Transfer> &transfers, bool put, bool *fresh_failed)
      REQUIRES(mu_);
  // Grants and posts the transfers of one device, appending the requests.
  Status Post(uint32_t device, const std::vector<const Transfer *> &list, bool put,
              std::vector<std::pair<Agent *, void *>> *requests) REQUIRES(mu_);
  // Sends the reads or writes of `part` under `ticket`, a window at a time.
  Status PostChecked(Agent &agent, uint64_t ticket, const std::vector<const Transfer *> &part,
                     bool put, std::vector<std::pair<Agent *, void *>> *requests) REQUIRES(mu_);
  // Waits for the agent's answers to the data ops in flight.
  Status AwaitChecked() REQUIRES(mu_);
  static ucs_status_t OnDataReply(void *arg, const void *header, size_t header_length, void *data,
                                  size_t length, const ucp_am_recv_param_t *param);
  static void OnDataReceived(void *request, ucs_status_t status, size_t length, void *user_data);
  size_t OpsInFlight() const REQUIRES(mu_);
  Status Connect(Agent &agent) REQUIRES(mu_);
  void Disconnect(Agent &agent);
  static void DropKeys(Agent &agent);
  // Presents a grant for `t` to the agent; `keys` gets one remote key per
  // transfer, and `base` where the device sits in the agent.
  Status Grant(Agent &agent, uint32_t device, const std::vector<const Transfer *> &t, bool put,
               std::vector<ucp_rkey_h> *keys, uint64_t *base) REQUIRES(mu_);
  static void OnError(void *arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnReply(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);

  // Held for a whole transfer: UCX's callbacks (OnReply, OnDataReply) run
  // in its progress loop, under it. ucx_, staging_, timeout_ms_, refresh_
  // and issue_ are set before the pool is shared.
  Mutex mu_;
  std::unique_ptr<UcxWorker> ucx_;
  std::shared_ptr<StagingCache> staging_;  // its registrations are ucx_'s
  std::map<uint32_t, Agent> agents_ GUARDED_BY(mu_);
  std::map<uint64_t, Reply> replies_ GUARDED_BY(mu_);
  std::map<uint64_t, DataOp> ops_ GUARDED_BY(mu_);  // by request id
  static constexpr size_t kWindow = 64;             // data ops in flight (the agent allows 128)
  uint64_t next_request_ GUARDED_BY(mu_) = 1;
  int64_t timeout_ms_ = 10000;
  std::function<AgentMap()> refresh_;
  Issuer issue_;
};

}  // namespace maru
