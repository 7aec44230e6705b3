// A tiny HTTP/1.0 server for Prometheus: GET /metrics returns the server's
// counters, gauges and latency histograms in the text exposition format.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "meta/acceptor.h"
#include "proto/maru.pb.h"
#include "util/status.h"

namespace maru {

class MetaEngine;

// Renders a stats snapshot in Prometheus text format (version 0.0.4).
std::string RenderPrometheus(const rpc::StatsReply &stats);

class MetricsServer {
 public:
  // Listens on HOST:PORT and serves on a thread of its own.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string &host_port,
                                                      MetaEngine *engine);
  ~MetricsServer();

 private:
  MetricsServer() = default;
  void Answer(int conn);

  MetaEngine *engine_ = nullptr;
  std::unique_ptr<Acceptor> acceptor_;
};

}  // namespace maru
