#include "meta/unix_listener.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "util/log.h"

namespace maru {
namespace {

sockaddr_un SocketAddress(const std::string &path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

// True if a server answers on `path`.
bool SomeoneListens(const std::string &path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr = SocketAddress(path);
  bool live = connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

}  // namespace

UnixListener::~UnixListener() {
  Stop();
}

Status UnixListener::Bind() {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  if (ec) return Status::Error(ec.value(), "cannot create the directory of " + path_);
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::Error(EEXIST, path_ + " exists and is not a socket");
    if (SomeoneListens(path_))
      return Status::Error(EADDRINUSE, "another server already listens on " + path_);
    unlink(path_.c_str());
  }
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Status::Error(errno, "socket");
  sockaddr_un addr = SocketAddress(path_);
  if (bind(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0)
    return Status::Error(errno, "cannot bind " + path_);
  chmod(path_.c_str(), 0666);
  if (listen(fd_, 512) < 0) return Status::Error(errno, "cannot listen on " + path_);
  if (pipe2(wake_, O_CLOEXEC) < 0) return Status::Error(errno, "pipe");
  return Status::Ok();
}

void UnixListener::Start(grpc::Server *server) {
  server_ = server;
  thread_ = std::thread([this] { AcceptLoop(); });
}

void UnixListener::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("poll on %s: %s", path_.c_str(), strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    int conn =
        accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);  // gRPC needs non-blocking
    if (conn < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
        LOG_WARN("accept on %s: %s", path_.c_str(), strerror(errno));
      continue;
    }
    std::optional<PeerCredentials> creds = ReadPeerCredentials(conn);
    if (!creds) {
      close(conn);
      continue;
    }
    LOG_DEBUG("connection fd %d from pid %d uid %u", conn, creds->pid, creds->uid);
    peers_->Set(conn, *creds);
    grpc::AddInsecureChannelFromFd(server_, conn);
  }
}

void UnixListener::Stop() {
  if (thread_.joinable()) {
    char b = 0;
    (void)!write(wake_[1], &b, 1);
    thread_.join();
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
    unlink(path_.c_str());
  }
  for (int &w : wake_)
    if (w >= 0) close(w), w = -1;
}

}  // namespace maru
