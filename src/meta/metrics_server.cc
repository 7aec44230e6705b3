#include "meta/metrics_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "meta/meta_engine.h"
#include "util/clock.h"
#include "util/log.h"

namespace maru {
namespace {

void Metric(std::ostringstream &out, const char *name, const char *type, const char *help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

std::string Escape(const std::string &v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

// Quotas, the most used first: a label per quota, and at most
// kMaxQuotaLabels of them so that quotas cannot grow the label set unbounded.
constexpr int kMaxQuotaLabels = 32;

void QuotaMetrics(std::ostringstream &out, const rpc::StatsReply &st) {
  std::vector<const rpc::QuotaInfo *> quotas;
  for (const auto &q : st.quotas()) quotas.push_back(&q);
  std::sort(quotas.begin(), quotas.end(),
            [](const auto *a, const auto *b) { return a->used_bytes() > b->used_bytes(); });
  if (quotas.size() > kMaxQuotaLabels) quotas.resize(kMaxQuotaLabels);
  Metric(out, "maru_quota_bytes", "gauge", "Quota limits in bytes (0: none), by target.");
  for (const auto *q : quotas)
    out << "maru_quota_bytes{target=\"" << Escape(q->target()) << "\"} " << q->limit_bytes()
        << "\n";
  Metric(out, "maru_quota_used_bytes", "gauge", "Bytes held under a quota, by target.");
  for (const auto *q : quotas)
    out << "maru_quota_used_bytes{target=\"" << Escape(q->target()) << "\"} " << q->used_bytes()
        << "\n";
  Metric(out, "maru_quota_pins", "gauge", "Quota limits in pins (0: none), by target.");
  for (const auto *q : quotas)
    out << "maru_quota_pins{target=\"" << Escape(q->target()) << "\"} " << q->limit_pins() << "\n";
  Metric(out, "maru_quota_used_pins", "gauge", "Pinned chunks under a quota, by target.");
  for (const auto *q : quotas)
    out << "maru_quota_used_pins{target=\"" << Escape(q->target()) << "\"} " << q->used_pins()
        << "\n";
}

std::string RenderPrometheus(const rpc::StatsReply &st) {
  std::ostringstream out;
  out.precision(10);
  Metric(out, "maru_operations_total", "counter", "Requests served, by operation.");
  for (const auto &op : st.ops())
    out << "maru_operations_total{op=\"" << op.op() << "\"} " << op.count() << "\n";
  Metric(out, "maru_operation_errors_total", "counter",
         "Requests answered with an error, by operation.");
  for (const auto &op : st.ops())
    out << "maru_operation_errors_total{op=\"" << op.op() << "\"} " << op.errors() << "\n";
  Metric(out, "maru_operation_duration_seconds", "histogram",
         "Time to serve a request, by operation.");
  for (const auto &op : st.ops()) {
    uint64_t cumulative = 0;
    for (int i = 0; i < op.buckets_size(); ++i) {
      cumulative += op.buckets(i);
      out << "maru_operation_duration_seconds_bucket{op=\"" << op.op() << "\",le=\"";
      if (i < st.bucket_bounds_us_size())
        out << st.bucket_bounds_us(i) / 1e6;
      else
        out << "+Inf";
      out << "\"} " << cumulative << "\n";
    }
    out << "maru_operation_duration_seconds_sum{op=\"" << op.op() << "\"} " << op.sum_us() / 1e6
        << "\n";
    out << "maru_operation_duration_seconds_count{op=\"" << op.op() << "\"} " << op.count() << "\n";
  }
  Metric(out, "maru_leader_epoch", "gauge",
         "The fencing epoch this server leads its pool with (0: a server without etcd).");
  out << "maru_leader_epoch " << st.leader_epoch() << "\n";
  Metric(out, "maru_server_lag_bytes", "gauge",
         "How far each of the pool's servers is behind the leader's log (docs/ha.md).");
  for (const auto &m : st.members())
    out << "maru_server_lag_bytes{member=\"" << Escape(m.id()) << "\",role=\""
        << (m.leads() ? "leader" : "standby") << "\"} " << (m.leads() ? 0 : m.lag_bytes()) << "\n";
  Metric(out, "maru_server_electable", "gauge", "1 for a server that may be elected to lead.");
  for (const auto &m : st.members())
    out << "maru_server_electable{member=\"" << Escape(m.id()) << "\"} " << (m.electable() ? 1 : 0)
        << "\n";
  Metric(out, "maru_stored_bytes_total", "counter", "Bytes of chunks sealed.");
  out << "maru_stored_bytes_total " << st.bytes_stored() << "\n";
  Metric(out, "maru_loaded_bytes_total", "counter", "Bytes of chunks opened for reading.");
  out << "maru_loaded_bytes_total " << st.bytes_loaded() << "\n";
  Metric(out, "maru_lookups_total", "counter", "Chunks asked for by prefix lookups.");
  out << "maru_lookups_total " << st.lookups() << "\n";
  Metric(out, "maru_lookup_hits_total", "counter", "Chunks found by prefix lookups.");
  out << "maru_lookup_hits_total " << st.lookup_hits() << "\n";
  Metric(out, "maru_evictions_total", "counter", "Chunks evicted, by reason.");
  for (const auto &[reason, n] : st.evictions_by_reason())
    out << "maru_evictions_total{reason=\"" << Escape(reason) << "\"} " << n << "\n";
  Metric(out, "maru_evicted_bytes_total", "counter", "Bytes of chunks evicted.");
  out << "maru_evicted_bytes_total " << st.evicted_bytes() << "\n";
  Metric(out, "maru_pool_capacity_bytes", "gauge", "Allocatable bytes, by pool device.");
  for (const auto &d : st.devices())
    out << "maru_pool_capacity_bytes{device=\"" << d.index() << "\",path=\"" << Escape(d.path())
        << "\"} " << d.size() << "\n";
  Metric(out, "maru_pool_used_bytes", "gauge", "Allocated bytes, by pool device.");
  for (const auto &d : st.devices())
    out << "maru_pool_used_bytes{device=\"" << d.index() << "\",path=\"" << Escape(d.path())
        << "\"} " << d.used() << "\n";
  Metric(out, "maru_chunks", "gauge", "Sealed chunks.");
  out << "maru_chunks " << st.chunks() << "\n";
  // By the name clients gave themselves; the label is not `instance`,
  // which Prometheus sets to the scraped target.
  Metric(out, "maru_sessions", "gauge", "Client sessions, by the instance name they gave.");
  for (const auto &[name, n] : st.sessions_by_instance())
    out << "maru_sessions{client_instance=\"" << Escape(name) << "\"} " << n << "\n";
  QuotaMetrics(out, st);
  Metric(out, "maru_leases", "gauge", "Read leases held.");
  out << "maru_leases " << st.leases() << "\n";
  Metric(out, "maru_pins", "gauge", "Pinned chunks.");
  out << "maru_pins " << st.pins() << "\n";
  Metric(out, "maru_uptime_seconds", "gauge", "Seconds since the server started.");
  out << "maru_uptime_seconds " << static_cast<double>(st.uptime_ns()) / 1e9 << "\n";
  return out.str();
}

// Closing a socket with unread input (the rest of a request's headers)
// resets the connection, and a reset throws away what the client has not
// read yet: the tail of a large reply. So: end the reply, read what is left
// until the client closes, for 2 s at most (a client that trickles bytes
// holds the thread no longer), then close.
static void LingeringClose(int conn) {
  shutdown(conn, SHUT_WR);
  const int64_t give_up = MonotonicMs() + 2000;
  char sink[4096];
  while (MonotonicMs() < give_up && recv(conn, sink, sizeof(sink), 0) > 0) {
  }
  close(conn);
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string &host_port,
                                                            MetaEngine *engine) {
  Result<std::unique_ptr<Acceptor>> a = Acceptor::ListenTcp(host_port);
  if (!a.ok())
    return Status::Error(a.status().errnum(), "--metrics-listen: " + a.status().message());
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->engine_ = engine;
  m->acceptor_ = std::move(*a);
  m->acceptor_->Start([raw = m.get()](int conn) {
    raw->Answer(conn);
    LingeringClose(conn);
  });
  return m;
}

MetricsServer::~MetricsServer() {
  acceptor_->Stop();
}

void MetricsServer::Answer(int conn) {
  timeval tv{2, 0};
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  ssize_t n = recv(conn, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return;
  buf[n] = '\0';
  std::string body, status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8";
  if (strncmp(buf, "GET /metrics", 12) == 0 && (buf[12] == ' ' || buf[12] == '?')) {
    rpc::StatsReply stats;
    engine_->Snapshot(&stats);
    body = RenderPrometheus(stats);
  } else {
    status = "404 Not Found";
    type = "text/plain";
    body = "try /metrics\n";
  }
  std::string reply = "HTTP/1.0 " + status + "\r\nContent-Type: " + type +
                      "\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n\r\n" + body;
  size_t off = 0;
  while (off < reply.size()) {
    ssize_t w = send(conn, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

}  // namespace maru
