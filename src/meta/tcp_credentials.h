// What maru-server needs to authenticate TCP callers, read from its flags:
// the TLS server credentials (mutual TLS: a client certificate signed by
// --tls-client-ca is required and verified), the certificate-name ->
// identity map, and the token file. Deciding who a caller is stays in
// meta/identity.h; this unit only loads and checks the configuration.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <vector>

#include "meta/identity.h"
#include "util/status.h"

namespace maru {

struct TcpAuthConfig {
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files; all or none
  std::vector<std::string> tls_identities;       // "CN=vllm-0=1000:1000"
  std::string tls_identity_map;                  // a file of such lines
  std::string token_file;                        // lines "TOKEN UID[:GID]"
};

// "NAME=UID[:GID]" where NAME is "CN=..." or "SAN=..." (split at the last '=').
Status AddIdentityMapping(const std::string &line, IdentityPolicy *policy);

// Reads the token file. It must be a regular file of mode 0600 or 0400 (no
// group or other bits) owned by root or by this process's user: anyone who
// can read it can act as every uid in it.
Status LoadTokenFile(const std::string &path, IdentityPolicy *policy);
// The contents of a file of secrets (`what`: "token file", ...): EPERM,
// saying how to fix it, unless only its owner (root or the server's user)
// may read it.
Result<std::string> ReadSecretFile(const std::string &what, const std::string &path);

// The policy the config describes (maps of certificates and tokens).
Result<IdentityPolicy> LoadIdentityPolicy(const TcpAuthConfig &config);

// Credentials for the TCP listening ports: mutual TLS with the config's
// files, or insecure when no TLS file is given.
Result<std::shared_ptr<grpc::ServerCredentials>> TcpServerCredentials(const TcpAuthConfig &config);

}  // namespace maru
