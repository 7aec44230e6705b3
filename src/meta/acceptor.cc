#include "meta/acceptor.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "util/address.h"
#include "util/log.h"

namespace maru {
namespace {

sockaddr_un UnixAddress(const std::string &path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

bool SomeoneListens(const std::string &path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr = UnixAddress(path);
  bool live = connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

}  // namespace

Status Acceptor::Prepare(int fd, const std::string &name) {
  fd_ = fd;
  name_ = name;
  if (listen(fd_, 512) < 0) return Status::Error(errno, "cannot listen on " + name);
  if (pipe2(wake_, O_CLOEXEC) < 0) return Status::Error(errno, "pipe");
  return Status::Ok();
}

Result<std::unique_ptr<Acceptor>> Acceptor::ListenUnix(const std::string &path) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) return Status::Error(ENAMETOOLONG, path);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return Status::Error(ec.value(), "cannot create the directory of " + path);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::Error(EEXIST, path + " exists and is not a socket");
    if (SomeoneListens(path))
      return Status::Error(EADDRINUSE, "another server already listens on " + path);
    unlink(path.c_str());
  }
  std::unique_ptr<Acceptor> a(new Acceptor());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Error(errno, "socket");
  sockaddr_un addr = UnixAddress(path);
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0) {
    int err = errno;
    close(fd);
    return Status::Error(err, "cannot bind " + path);
  }
  a->unix_path_ = path;
  chmod(path.c_str(), 0666);
  MARU_RETURN_IF_ERROR(a->Prepare(fd, path));
  return a;
}

Result<std::unique_ptr<Acceptor>> Acceptor::ListenTcp(const std::string &host_port) {
  Result<Address> addr = ParseAddress("tcp://" + host_port);
  if (!addr.ok()) return Status::Error(EINVAL, "expected HOST:PORT, not '" + host_port + "'");
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(addr->host.c_str(), std::to_string(addr->port).c_str(), &hints, &res) != 0)
    return Status::Error(EINVAL, "cannot resolve " + host_port);
  std::unique_ptr<Acceptor> a(new Acceptor());
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc = bind(fd, res->ai_addr, res->ai_addrlen);
  int err = errno;
  freeaddrinfo(res);
  if (rc < 0) {
    close(fd);
    return Status::Error(err, "cannot listen on " + host_port);
  }
  MARU_RETURN_IF_ERROR(a->Prepare(fd, host_port));
  return a;
}

int Acceptor::port() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd_, reinterpret_cast<sockaddr *>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in *>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_port);
  return 0;
}

Acceptor::~Acceptor() {
  Stop();
}

void Acceptor::Start(std::function<void(int fd)> on_connection, bool nonblocking) {
  thread_ =
      std::thread([this, f = std::move(on_connection), nonblocking] { Loop(f, nonblocking); });
}

void Acceptor::Loop(const std::function<void(int)> &on_connection, bool nonblocking) {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("poll on %s: %s", name_.c_str(), strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0));
    if (conn < 0) {
      const int err = errno;
      if (err != EINTR && err != EAGAIN && err != ECONNABORTED)
        LOG_WARN("accept on %s: %s", name_.c_str(), strerror(err));
      // Out of descriptors: the pending connection stays readable, so wait
      // for some to close instead of spinning on it (or for Stop).
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) poll(&fds[1], 1, 100);
      continue;
    }
    on_connection(conn);
  }
}

void Acceptor::Stop() {
  if (thread_.joinable()) {
    char b = 0;
    (void)!write(wake_[1], &b, 1);
    thread_.join();
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
    if (!unix_path_.empty()) unlink(unix_path_.c_str());
  }
  for (int &w : wake_)
    if (w >= 0) close(w), w = -1;
}

}  // namespace maru
