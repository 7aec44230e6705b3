#include "client/tcp_auth.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace maru {
namespace {

Result<std::string> ReadEnvFile(const char *variable) {
  const char *path = getenv(variable);
  if (!path || !*path) return std::string();
  std::ifstream in(path);
  if (!in) return Status::Error(EINVAL, std::string("cannot read ") + variable + "=" + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One connection attempt, bounded by `timeout_ms`.
bool ConnectsWithin(const addrinfo *ai, int timeout_ms) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return false;
  bool ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    ok = poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
         err == 0;
  }
  close(fd);
  return ok;
}

}  // namespace

Result<TcpClientAuth> TcpClientAuthFromEnv() {
  TcpClientAuth auth;
  Result<std::string> ca = ReadEnvFile("MARU_TLS_CA");
  Result<std::string> cert = ReadEnvFile("MARU_TLS_CERT");
  Result<std::string> key = ReadEnvFile("MARU_TLS_KEY");
  Result<std::string> token = ReadEnvFile("MARU_TOKEN_FILE");
  for (const Result<std::string> *r : {&ca, &cert, &key, &token})
    if (!r->ok()) return r->status();
  if (cert->empty() != key->empty())
    return Status::Error(EINVAL, "MARU_TLS_CERT and MARU_TLS_KEY go together");
  if (!cert->empty() && ca->empty())
    return Status::Error(EINVAL, "MARU_TLS_CERT needs MARU_TLS_CA (the server's CA)");
  if (ca->empty()) {
    auth.credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = *ca;
    options.pem_private_key = *key;
    options.pem_cert_chain = *cert;
    auth.credentials = grpc::SslCredentials(options);
    auth.tls = true;
  }
  auth.token = *token;
  while (!auth.token.empty() && isspace(static_cast<unsigned char>(auth.token.back())))
    auth.token.pop_back();
  return auth;
}

bool TcpReachable(const Address &address, int timeout_ms) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *found = nullptr;
  if (getaddrinfo(address.host.c_str(), std::to_string(address.port).c_str(), &hints, &found) != 0)
    return false;
  bool ok = false;
  for (addrinfo *ai = found; ai && !ok; ai = ai->ai_next) ok = ConnectsWithin(ai, timeout_ms);
  freeaddrinfo(found);
  return ok;
}

}  // namespace maru
