// UcxAgent: the heart of maru-agent. It maps the pool devices of a memory
// node, registers them with UCX, and lets remote clients read and write
// extents with one-sided get/put. A client first asks for a grant; the agent
// gives it the device's remote key only after maru-server confirms that the
// client's session holds a lease or reservation on the extents it names.
// The bytes never pass through the agent's CPU.
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
#include "rdma/ucx_worker.h"

namespace maru {

class UcxAgent {
 public:
  // `devices` are opened pool devices, by the server's device index.
  static Result<std::unique_ptr<UcxAgent>> Start(
      std::unique_ptr<MetaClient> client, std::map<uint32_t, std::unique_ptr<PoolDevice>> devices,
      const std::string &listen_host, int port);
  ~UcxAgent();

  // Serves until Stop() (from a signal handler, say), calling `tick` now
  // and then on the same thread.
  void Run(const std::function<void()> &tick);
  void Stop() { stop_ = true; }
  int port() const { return port_; }

 private:
  struct Registered {
    PoolDevice *device = nullptr;
    ucp_mem_h memh = nullptr;
    std::vector<uint8_t> rkey;
  };
  struct PendingGrant {
    ucp_ep_h reply_ep;
    std::vector<uint8_t> request;
  };

  UcxAgent() = default;
  static void OnConnect(ucp_conn_request_h request, void *arg);
  static ucs_status_t OnGrant(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);
  static void OnEndpointError(void *arg, ucp_ep_h ep, ucs_status_t status);
  void Answer(const PendingGrant &grant);
  void CloseFailedEndpoints();

  std::unique_ptr<MetaClient> client_;
  std::unique_ptr<UcxWorker> ucx_;
  std::map<uint32_t, std::unique_ptr<PoolDevice>> devices_;
  std::map<uint32_t, Registered> registered_;
  ucp_listener_h listener_ = nullptr;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<ucp_ep_h> failed_;
  std::deque<PendingGrant> pending_;
  std::atomic<bool> stop_{false};
  int port_ = 0;
};

}  // namespace maru
