// How a client proves who it is to maru-server over TCP, from the
// environment: mutual TLS (MARU_TLS_CA, the CA that signed the server's
// certificate; MARU_TLS_CERT and MARU_TLS_KEY, this client's certificate and
// key) and a bearer token (MARU_TOKEN_FILE, a file holding the token). Unix
// sockets need neither: the kernel tells the server who is calling.
#pragma once

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "util/address.h"
#include "util/status.h"

namespace maru {

struct TcpClientAuth {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // TLS or insecure
  bool tls = false;
  std::string token;  // sent as "authorization: Bearer TOKEN"; empty: none
};

// Reads the MARU_TLS_* and MARU_TOKEN_FILE files. EINVAL when a variable
// names an unreadable file or only one of MARU_TLS_CERT / MARU_TLS_KEY is set.
Result<TcpClientAuth> TcpClientAuthFromEnv();

// Whether anything accepts a TCP connection at `address` (within
// `timeout_ms`): tells a failed TLS handshake from a server that is away.
bool TcpReachable(const Address &address, int timeout_ms);

}  // namespace maru
