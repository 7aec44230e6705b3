// RemotePool: a client's way to pool devices it cannot map, through the
// maru-agent of each device. Bytes move with one-sided UCX get/put between
// the caller's buffers and the agent's registered pool memory; before each
// transfer the agent checks with maru-server that this client's session
// holds the extents it names.
//
// Thread-safe (one lock around the UCX worker). An agent that dies makes the
// transfers in flight fail with ECONNRESET; the next call reconnects.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rdma/ucx_worker.h"
#include "util/status.h"

namespace maru {

class RemotePool {
 public:
  struct Transfer {
    uint32_t device;
    uint64_t offset;  // in the device
    uint64_t length;
    void *local;  // the caller's buffer
  };

  using AgentMap = std::map<uint32_t, std::string>;  // device index -> tcp://HOST:PORT

  // `refresh` asks the server where the agents are now: an agent that went
  // away may come back elsewhere.
  static Result<std::unique_ptr<RemotePool>> Create(AgentMap agents, int64_t timeout_ms,
                                                    std::function<AgentMap()> refresh);
  ~RemotePool();

  bool serves(uint32_t device) const { return agents_.count(device) > 0; }
  // All transfers in flight at once; returns when all are done or one failed.
  Status Get(uint64_t session, const std::vector<Transfer> &transfers) {
    return Move(session, transfers, false);
  }
  Status Put(uint64_t session, const std::vector<Transfer> &transfers) {
    return Move(session, transfers, true);
  }

 private:
  struct Agent {
    std::string address;
    ucp_ep_h ep = nullptr;
    bool failed = false;
    ucp_rkey_h rkey = nullptr;
    uint64_t base = 0;
    bool lost = false;    // went away: look its address up again before reconnecting
    bool proven = false;  // this connection completed an exchange
  };
  struct Reply {
    int error = 0;
    uint64_t base = 0;
    std::vector<uint8_t> rkey;
  };

  RemotePool() = default;
  Status Move(uint64_t session, const std::vector<Transfer> &transfers, bool put);
  // One try; `fresh_failed` tells whether a connection failed before its
  // first complete exchange.
  Status MoveOnce(uint64_t session, const std::vector<Transfer> &transfers, bool put,
                  bool *fresh_failed);
  // Grants and posts the transfers of one device, appending the requests.
  Status Post(uint64_t session, uint32_t device, const std::vector<const Transfer *> &list,
              bool put, std::vector<std::pair<Agent *, void *>> *requests);
  Status Connect(Agent &agent);
  void Disconnect(Agent &agent);
  Status Grant(Agent &agent, uint64_t session, uint32_t device,
               const std::vector<const Transfer *> &t);
  static void OnError(void *arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnReply(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);

  std::mutex mu_;
  std::unique_ptr<UcxWorker> ucx_;
  std::map<uint32_t, Agent> agents_;
  std::map<uint64_t, Reply> replies_;
  uint64_t next_request_ = 1;
  int64_t timeout_ms_ = 10000;
  std::function<AgentMap()> refresh_;
};

}  // namespace maru
