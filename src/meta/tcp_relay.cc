#include "meta/tcp_relay.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "util/clock.h"
#include "util/log.h"

namespace maru {
namespace {

int ConnectUnix(const std::string &path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A peer that stops reading holds its relay at most this long.
void SetTimeouts(int fd) {
  timeval send{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send, sizeof(send));
}

bool WriteAll(int fd, const char *p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Carries bytes both ways until both sides have finished, either fails, or
// nothing moves for `idle_seconds`. A side that finishes sending (EOF) is
// passed on as a shutdown of the other's sending side.
void Pump(int a, int b, int idle_seconds) {
  std::vector<char> buf(64 << 10);
  pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    const int ready = poll(fds, 2, idle_seconds * 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;  // idle, or poll failed
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      const int from = fds[i].fd, to = i == 0 ? b : a;
      const ssize_t n = read(from, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;
      if (n == 0) {
        shutdown(to, SHUT_WR);
        fds[i].fd = -1;
        --open;
      } else if (!WriteAll(to, buf.data(), static_cast<size_t>(n))) {
        return;
      }
    }
  }
}

int NextListenerId() {
  static std::atomic<int> next{0};
  return ++next;
}

}  // namespace

TcpRelay::TcpRelay(std::unique_ptr<Acceptor> acceptor, std::string target, ConnectionGate *gate)
    : acceptor_(std::move(acceptor)),
      target_(std::move(target)),
      gate_(gate),
      id_(NextListenerId()) {}

Result<std::unique_ptr<TcpRelay>> TcpRelay::Listen(const std::string &host_port, std::string target,
                                                   ConnectionGate *gate) {
  Result<std::unique_ptr<Acceptor>> a = Acceptor::ListenTcp(host_port);
  if (!a.ok()) return a.status();
  return std::unique_ptr<TcpRelay>(new TcpRelay(std::move(*a), std::move(target), gate));
}

TcpRelay::~TcpRelay() {
  Stop();
}

void TcpRelay::Start() {
  acceptor_->Start([this](int fd) { Accept(fd); });
}

void TcpRelay::Stop() {
  acceptor_->Stop();
  std::vector<std::unique_ptr<Connection>> all;
  {
    MutexLock lock(&mu_);
    for (auto &c : connections_)
      if (!c->done) {
        shutdown(c->fd, SHUT_RDWR);
        if (c->up >= 0) shutdown(c->up, SHUT_RDWR);
      }
    all.swap(connections_);
  }
  for (auto &c : all)
    if (c->thread.joinable()) c->thread.join();
}

void TcpRelay::Reap() {
  std::erase_if(connections_, [](std::unique_ptr<Connection> &c) {
    if (!c->done) return false;
    c->thread.join();
    return true;
  });
}

void TcpRelay::Accept(int fd) {
  std::string peer = TcpPeerAddress(fd);
  if (!gate_->AdmitTcp(id_, peer)) {
    close(fd);
    // Said at most once a second: a flood must not flood the log too.
    const int64_t now = MonotonicNs();
    MutexLock lock(&mu_);
    if (now - last_refusal_log_ns_ > 1'000'000'000) {
      last_refusal_log_ns_ = now;
      LOG_WARN(
          "%s: refusing connections from %s (a cap on connections per peer, per listener "
          "or on descriptors is reached)",
          name().c_str(), peer.c_str());
    }
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  MutexLock lock(&mu_);
  Reap();
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->peer = std::move(peer);
  Connection *raw = c.get();
  try {
    c->thread = std::thread([this, raw] { Serve(raw); });
  } catch (const std::system_error &e) {
    LOG_WARN("%s: cannot start a thread for a connection: %s", name().c_str(), e.what());
    close(fd);
    gate_->LeaveTcp(id_, c->peer);
    return;
  }
  connections_.push_back(std::move(c));
}

void TcpRelay::Serve(Connection *c) {
  const int up = ConnectUnix(target_);
  {
    MutexLock lock(&mu_);
    c->up = up;
  }
  if (up >= 0) {
    SetTimeouts(c->fd);
    SetTimeouts(up);
    Pump(c->fd, up, kIdleSeconds);
  }
  {
    MutexLock lock(&mu_);  // Stop() shuts down what is not done
    close(c->fd);
    if (up >= 0) close(up);
    c->done = true;
  }
  gate_->LeaveTcp(id_, c->peer);
}

}  // namespace maru
